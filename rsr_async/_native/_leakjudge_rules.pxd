# The C types of ``leakjudge_py.py``, compiled as ``rsr_async._native._leakjudge_rules``
# (Cython's pure Python mode: this file augments that source, which stays plain Python and
# is the pure scanner's second pass unchanged). ``setup.py`` builds the module with
# Python's semantics (bounds and negative indexes checked, annotations not read as types,
# Python division); the types below only spare the rules' calls and attribute reads their
# Python-level lookups. ``leakjudge.pyx`` subclasses :class:`Judge`, overriding the five
# kernels, which the rules then reach through the C method table.
#
# Every method stays callable from Python (``cpdef``) and every attribute readable
# (``public``), as in the twin, so the compiled class has the twin's names.

cimport cython


@cython.locals(c=Py_UCS4)
cpdef bint _has_digit(str text) except -1


cpdef bint _holds_any(str text, list pieces) except -1


@cython.locals(start=Py_ssize_t, end=Py_ssize_t)
cpdef bint _inside(Py_ssize_t position, list spans) except -1


cpdef bint _carries_digits(str part) except -1


@cython.locals(i=Py_ssize_t)
cpdef bint _within(list sorted_values, double target, double tolerance) except -1


@cython.locals(head=str)
cpdef str _dirname(str path)


cpdef list _shell_words(str line)


cdef class Judge:
    cdef public bint _derive
    cdef public list _texts
    cdef public object _sandbox
    cdef public set _created
    cdef public str _cwd
    cdef public dict _numbers
    cdef public tuple _operands
    cdef public dict _parts
    cdef public list _absent
    cdef public Py_ssize_t _absent_count
    cdef public list _pending

    # The kernels (overridden in leakjudge.pyx with these signatures).
    cpdef bint _contains(self, str value, Py_ssize_t start) except -1
    cpdef bint _wrapped_near(self, str value, str piece, Py_ssize_t offset) except -1
    cpdef list _numbers_back(self, str text, Py_ssize_t start, Py_ssize_t cut)
    cpdef bint _creates(self, str line) except -1
    cpdef bint _computed(self, double target, double rounding, double exact, list seen,
                         list with_units) except -1

    # The rules.
    @cython.locals(half=Py_ssize_t, shown=list)
    cpdef bint _wrapped(self, str value) except -1

    @cython.locals(searched=Py_ssize_t, count=Py_ssize_t)
    cpdef bint _seen_part(self, str part) except -1

    cpdef bint _all_seen(self, list parts) except -1

    cpdef str _working_directory(self)

    @cython.locals(count=Py_ssize_t, index=Py_ssize_t, cut=Py_ssize_t, read=Py_ssize_t,
                   start=Py_ssize_t, text=str, recent=dict, numbers=list, values=list)
    cpdef tuple _seen_numbers(self)

    cpdef str _resolve(self, str path)

    @cython.locals(line=str, words=list, start=Py_ssize_t, i=Py_ssize_t)
    cpdef _read_commands(self, str action)

    @cython.locals(args=list, i=Py_ssize_t, word=str, command=str, operands=list, made=list)
    cpdef _simple_command(self, list words)

    @cython.locals(pending=list)
    cpdef _catch_up(self)

    @cython.locals(probe=str, parent=str)
    cpdef bint _own(self, str path) except -1

    @cython.locals(path=str, parts=list, cut=Py_ssize_t, head=str, rest=list)
    cpdef str _path_rule(self, str value)

    @cython.locals(target=double, exact=double, rounding=double, decimals=Py_ssize_t,
                   seen=list, with_units=list)
    cpdef str _number_rule(self, str value)

    @cython.locals(before=str, lead=str)
    cpdef str _word_rule(self, str action, Py_ssize_t position, str value, str kind)

    @cython.locals(part=str)
    cpdef str _quoted_flag(self, str value, dict judged)

    @cython.locals(out=list, programs=list)
    cpdef list _split_syntax(self, str action, list found)
