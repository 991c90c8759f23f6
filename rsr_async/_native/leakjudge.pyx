# cython: language_level=3, boundscheck=True, wraparound=True
"""The leak scan's second pass, compiled: ``leakjudge_py.py``'s rules with their kernels in C.

Every rule is written once, in ``leakjudge_py.py`` (the pure scanner's second pass). That
source is also compiled as it is, typed by ``_leakjudge_rules.pxd`` (Cython's pure Python
mode), into ``_leakjudge_rules``, whose :class:`Judge` is an extension type whose rules
call one another through C. :class:`Judge` here subclasses it and replaces only the
kernels, where the pass spends its time reading public text: searching it for values
nobody showed (a value, its halves, the parts of a path), joining wrapped windows,
reading numbers off screens, the create-word test, the ``computed`` arithmetic. One-byte
text (nearly every terminal screen) is searched in C, 16 starts at a time: two of the
needle's rarest bytes are compared at their offsets together (SSE2, or AVX2 or AVX-512BW
where the CPU has them), so a hit of one common byte costs no compare. A wrapped value's
windows are joined in C (the ``_JOIN`` pattern, written out) into a buffer that is
searched the same way. Other text takes the twin's code.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_KIND
from libc.stdint cimport uint8_t
from libc.math cimport fabs
from libc.string cimport memcmp

from rsr_async._native._leakjudge_rules cimport Judge as _RulesJudge
from rsr_async._native.leakrules import _CREATES, _JOIN, _NUMBER

cdef extern from "rsr_find.h":
    # The substring search both compiled passes use (SSE2, AVX2 or AVX-512BW, chosen at
    # run time); the header says how it works.
    Py_ssize_t rsr_find(const uint8_t* hay, Py_ssize_t n, const uint8_t* needle, Py_ssize_t m,
                        Py_ssize_t r1, Py_ssize_t r2, Py_ssize_t start) noexcept nogil
    int rsr_simd_level
    int rsr_cpu_level() noexcept nogil
    # The byte-rarity table both passes share, and the needle bytes it picks.
    uint8_t rsr_rank[256]
    void rsr_rank_init() noexcept nogil
    void rsr_rare_pair(const uint8_t* needle, Py_ssize_t m, Py_ssize_t* r1,
                       Py_ssize_t* r2) noexcept nogil

__all__ = ["Judge"]

rsr_rank_init()


def _rank_table():
    """Tests only: the byte-rarity table this module searches with (256 bytes)."""
    return bytes([rsr_rank[c] for c in range(256)])


cdef uint8_t _NUMBER_CLASS[256]  # bit 0: ``\\d`` (a decimal digit); bit 1: ``\\w``


cdef void _init_number_class() noexcept:
    cdef int c
    for c in range(256):
        # What ``re`` means by them in a str pattern: str.isdecimal, str.isalnum or "_".
        _NUMBER_CLASS[c] = ((1 if chr(c).isdecimal() else 0)
                            | (2 if chr(c).isalnum() or c == 95 else 0))


_init_number_class()


cdef list _numbers_back_c(str text, Py_ssize_t start, Py_ssize_t cut):
    """``_NUMBER.findall(text, start, cut)``, newest first.

    ``(?<![\\w.])-?\\d+(?:\\.\\d+)?(?![\\w])`` written out for one-byte text: at a start
    the look-behind allows, the digits (after an optional ``-``), then the fraction if
    the character after it is no word character, else the digits alone if the one after
    them is none (a ``.`` never is); backtracking into the digits finds nothing more.
    """
    cdef list out = []
    cdef const uint8_t* t
    cdef Py_ssize_t p, q, d, f, e
    cdef uint8_t c
    if PyUnicode_KIND(text) != 1:
        out = _NUMBER.findall(text, start, cut)
        out.reverse()
        return out
    t = <const uint8_t*>PyUnicode_DATA(text)
    p = start
    while p < cut:
        c = t[p]
        if not (c == 45 or (_NUMBER_CLASS[c] & 1)):
            p += 1
            continue
        if p > 0 and ((_NUMBER_CLASS[t[p - 1]] & 2) or t[p - 1] == 46):
            p += 1
            continue
        q = p + 1 if c == 45 else p
        d = q
        while d < cut and (_NUMBER_CLASS[t[d]] & 1):
            d += 1
        e = -1
        if d > q:
            if d + 1 < cut and t[d] == 46 and (_NUMBER_CLASS[t[d + 1]] & 1):
                f = d + 1
                while f < cut and (_NUMBER_CLASS[t[f]] & 1):
                    f += 1
                if f >= cut or not (_NUMBER_CLASS[t[f]] & 2):
                    e = f
            if e < 0 and (d >= cut or not (_NUMBER_CLASS[t[d]] & 2)):
                e = d
        if e < 0:
            p += 1
            continue
        out.append(text[p:e])
        p = e
    out.reverse()
    return out


cdef inline bint _word_at(const uint8_t* t, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    """``t[i]`` is a word character (``\\w``); past either end it is not."""
    return 0 <= i < n and (_NUMBER_CLASS[t[i]] & 2) != 0


cdef inline bint _literal_at(const uint8_t* t, Py_ssize_t n, Py_ssize_t i, const char* word,
                             Py_ssize_t m) noexcept nogil:
    return i + m <= n and memcmp(t + i, word, m) == 0


cdef inline bint _whole_at(const uint8_t* t, Py_ssize_t n, Py_ssize_t i, const char* word,
                           Py_ssize_t m) noexcept nogil:
    """``\\bword\\b`` at ``i``, for a word of word characters."""
    return (_literal_at(t, n, i, word, m) and not _word_at(t, n, i - 1)
            and not _word_at(t, n, i + m))


cdef bint _creates_c(str line) except -1:
    """``_CREATES.search(line)`` is not None (the pattern written out for one-byte text:
    ``mkdir``, ``touch``, ``tee``, ``>``, ``venv``, ``--out``, ``--target``, ``--prefix``,
    ``--dest`` anywhere; ``cp mv ln install rsync cd git virtualenv`` as whole words;
    ``-o``, ``-O``, ``-d`` with no word character after)."""
    cdef const uint8_t* t
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(line), i
    cdef uint8_t c
    if PyUnicode_KIND(line) != 1:
        return _CREATES.search(line) is not None
    t = <const uint8_t*>PyUnicode_DATA(line)
    for i in range(n):
        c = t[i]
        if c == 62:  # >
            return True
        if c == 109:  # m
            if _literal_at(t, n, i, b"mkdir", 5) or _whole_at(t, n, i, b"mv", 2):
                return True
        elif c == 116:  # t
            if _literal_at(t, n, i, b"touch", 5) or _literal_at(t, n, i, b"tee", 3):
                return True
        elif c == 118:  # v
            if _literal_at(t, n, i, b"venv", 4) or _whole_at(t, n, i, b"virtualenv", 10):
                return True
        elif c == 99:  # c
            if _whole_at(t, n, i, b"cp", 2) or _whole_at(t, n, i, b"cd", 2):
                return True
        elif c == 108:  # l
            if _whole_at(t, n, i, b"ln", 2):
                return True
        elif c == 105:  # i
            if _whole_at(t, n, i, b"install", 7):
                return True
        elif c == 114:  # r
            if _whole_at(t, n, i, b"rsync", 5):
                return True
        elif c == 103:  # g
            if _whole_at(t, n, i, b"git", 3):
                return True
        elif c == 45:  # -
            if i + 1 < n and (t[i + 1] == 111 or t[i + 1] == 79 or t[i + 1] == 100) and (
                    not _word_at(t, n, i + 2)):
                return True
            if (_literal_at(t, n, i, b"--out", 5) or _literal_at(t, n, i, b"--target", 8)
                    or _literal_at(t, n, i, b"--prefix", 8) or _literal_at(t, n, i, b"--dest", 6)):
                return True
    return False


cdef inline bint _within_c(const double* values, Py_ssize_t n, double target,
                           double tolerance) noexcept nogil:
    """``leakrules._within`` on a C array: ``bisect_right`` (same ``<`` compares), then
    whether the value there lies below ``target + tolerance``."""
    cdef double low = target - tolerance
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) // 2
        if low < values[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo < n and values[lo] < target + tolerance


cdef struct _Needle:
    const uint8_t* data
    Py_ssize_t length, r1, r2


cdef inline void _needle(_Needle* nd, const uint8_t* data, Py_ssize_t m) noexcept nogil:
    """The needle and its two rarest bytes."""
    nd.data = data
    nd.length = m
    rsr_rare_pair(data, m, &nd.r1, &nd.r2)


cdef inline bint _is_blank(uint8_t c) noexcept nogil:
    return c == 32 or c == 9


cdef Py_ssize_t _join_window(const uint8_t* w, Py_ssize_t n, uint8_t* out) noexcept nogil:
    """``_JOIN.sub("", w)`` for one-byte text (whose table borders can only be ``|``).

    ``_JOIN``: blanks, an optional ``\\`` or ``|`` with blanks after it, ``\\r?\\n``, then
    any number of (blanks, ``|`` or ``>``), then blanks. Where a match starts at a blank,
    every start in the same run of blanks reaches the same end, so a failed run is copied
    whole.
    """
    cdef Py_ssize_t i = 0, j, k, e, t, o = 0
    while i < n:
        j = i
        while j < n and _is_blank(w[j]):
            j += 1
        k = j
        if k < n and (w[k] == 92 or w[k] == 124):  # \ or |
            k += 1
            while k < n and _is_blank(w[k]):
                k += 1
        e = -1
        if k < n and w[k] == 10:
            e = k + 1
        elif k + 1 < n and w[k] == 13 and w[k + 1] == 10:
            e = k + 2
        if e < 0:
            if j == i:
                j = i + 1
            while i < j:
                out[o] = w[i]
                o += 1
                i += 1
            continue
        while True:
            t = e
            while t < n and _is_blank(w[t]):
                t += 1
            if t < n and (w[t] == 124 or w[t] == 62):  # | or >
                e = t + 1
            else:
                e = t
                break
        i = e
    return o


cdef class Judge(_RulesJudge):
    """The second pass for one episode (``leakjudge_py.Judge``, its kernels compiled)."""

    cpdef bint _contains(self, str value, Py_ssize_t start) except -1:
        """``value`` is a substring of some text from ``texts[start]`` on."""
        cdef Py_ssize_t i
        cdef str text
        cdef _Needle nd
        cdef list texts = self._texts
        cdef bint bytewise = PyUnicode_KIND(value) == 1
        _needle(&nd, <const uint8_t*>PyUnicode_DATA(value), PyUnicode_GET_LENGTH(value))
        for i in range(start, len(texts)):
            text = <str>texts[i]
            if bytewise and PyUnicode_KIND(text) == 1:
                if rsr_find(<const uint8_t*>PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text),
                            nd.data, nd.length, nd.r1, nd.r2, 0) >= 0:
                    return True
            elif value in text:
                return True
        return False

    cpdef bint _wrapped_near(self, str value, str piece, Py_ssize_t offset) except -1:
        """Some text, around one of the first 64 occurrences of ``piece``, holds
        ``value`` once line wraps are joined (windows of one-byte text joined in C)."""
        cdef Py_ssize_t n = len(value), at, hits, lo, hi, size, joined, length
        cdef str text
        cdef _Needle nd_piece, nd_value
        cdef const uint8_t* data
        cdef uint8_t small[4096]
        cdef uint8_t* buffer
        cdef bint found
        # The byte needles are read only where value, piece and text are all one-byte.
        cdef bint bytewise = PyUnicode_KIND(value) == 1
        _needle(&nd_value, <const uint8_t*>PyUnicode_DATA(value), n)
        _needle(&nd_piece, <const uint8_t*>PyUnicode_DATA(piece), len(piece))
        for text in self._texts:
            if not (bytewise and PyUnicode_KIND(text) == 1):
                at = text.find(piece)
                hits = 0
                while at >= 0 and hits < 64:
                    window = text[max(0, at - offset - 4 * n - 64):at + 4 * n + 64]
                    if value in _JOIN.sub("", window):
                        return True
                    at = text.find(piece, at + 1)
                    hits += 1
                continue
            data = <const uint8_t*>PyUnicode_DATA(text)
            length = PyUnicode_GET_LENGTH(text)
            at = rsr_find(data, length, nd_piece.data, nd_piece.length, nd_piece.r1,
                          nd_piece.r2, 0)
            hits = 0
            while at >= 0 and hits < 64:
                lo = max(0, at - offset - 4 * n - 64)
                hi = min(length, at + 4 * n + 64)
                size = hi - lo
                buffer = &small[0] if size <= 4096 else <uint8_t*>PyMem_Malloc(size)
                if buffer == NULL:
                    raise MemoryError()
                joined = _join_window(data + lo, size, buffer)
                found = rsr_find(buffer, joined, nd_value.data, n, nd_value.r1,
                                 nd_value.r2, 0) >= 0
                if buffer != &small[0]:
                    PyMem_Free(buffer)
                if found:
                    return True
                at = rsr_find(data, length, nd_piece.data, nd_piece.length, nd_piece.r1,
                              nd_piece.r2, at + 1)
                hits += 1
        return False

    cpdef list _numbers_back(self, str text, Py_ssize_t start, Py_ssize_t cut):
        """``_NUMBER.findall(text, start, cut)``, newest first."""
        return _numbers_back_c(text, start, cut)

    cpdef bint _creates(self, str line) except -1:
        """``_CREATES.search(line)`` finds something."""
        return _creates_c(line)

    cpdef bint _computed(self, double target, double rounding, double exact, list seen,
                         list with_units) except -1:
        """The twin's ``_computed`` on C arrays of the numbers."""
        cdef Py_ssize_t n_seen = len(seen), n_units = len(with_units), i
        cdef double a
        cdef double* values = <double*>PyMem_Malloc((n_seen + n_units + 1) * sizeof(double))
        cdef double* units = values + n_seen
        cdef bint found = False
        if values == NULL:
            raise MemoryError()
        for i in range(n_seen):
            values[i] = seen[i]
        for i in range(n_units):
            units[i] = with_units[i]
        for i in range(n_seen):
            a = values[i]
            if a != target and fabs(a - target) < rounding:
                found = True  # a, rounded
                break
            if (_within_c(values, n_seen, target - a, exact)
                    or _within_c(values, n_seen, a - target, exact)):
                found = True
                break
        if not found:
            for i in range(n_units):
                a = units[i]
                if a == 0.0 or a == 1.0:
                    continue
                # a * b, then a as the divisor of b / a and of 100 * b / a
                if (_within_c(units, n_units, target / a, rounding / a)
                        or _within_c(units, n_units, target * a, rounding * a)
                        or (a != 100.0 and _within_c(units, n_units, target * a / 100.0,
                                                     rounding * a / 100.0))):
                    found = True
                    break
        PyMem_Free(values)
        return found


def _simd(level=None):
    """Tests only: the widest search to use, at most what the CPU has: 0 SSE2, 1 AVX2,
    2 AVX-512BW, ``None`` the CPU's best (so every path is checked against the twin)."""
    global rsr_simd_level
    rsr_simd_level = rsr_cpu_level() if level is None else min(int(level), rsr_cpu_level())
