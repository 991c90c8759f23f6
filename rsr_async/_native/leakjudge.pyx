# cython: language_level=3, boundscheck=True, wraparound=True
"""The leak scan's second pass, compiled. Twin: ``leakrules.Judge`` (same verdicts; the
rules, their constants and :class:`SandboxKnowledge` are there, shared by both).

What the pure pass spends its time on is searching public text for values nobody showed:
a value, its halves, the parts of a path. Here one-byte text (nearly every terminal
screen) is searched in C, 16 starts at a time: two of the needle's rarest bytes are
compared at their offsets together (SSE2, or AVX2 or AVX-512BW where the CPU has them),
so a hit of one common byte costs no compare.
A wrapped value's windows are joined in C (the ``_JOIN`` pattern, written out) into a
buffer that is searched the same way. Everything else (the shell syntax of actions, the
arithmetic of the ``computed`` rule) is the twin's code, compiled with typed locals.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_KIND
from libc.stdint cimport uint8_t
from libc.math cimport fabs
from libc.string cimport memcmp

cimport cython

import posixpath

from rsr_async._native.leakrules import (
    _ABSENT,
    _BIN_DIRS,
    _MODULE_ROOTS,
    _ROOT_LINKS,
    _SHELL_WORD,
    _VIRTUAL,
    _CREATE_ALL,
    _CREATE_LAST,
    _CREATES,
    _JOIN,
    _NUMBER,
    _NUMBER_CHUNK,
    _OUTPUT_FLAGS,
    _PARTS,
    _PREFIX_WORDS,
    _PROMPT,
    _REDIRECTS,
    _SED_PROGRAM,
    _SEPARATORS,
    _STANDARD,
    _UNITS,
    _URL_PORT,
    EVERYDAY_NUMBERS,
    OPERANDS,
    RULES,
    SandboxKnowledge,
    _decimals,
)
from rsr_async._native.sandbox_base import MODULES
from rsr_async.schema import Leak

cdef extern from "Python.h":
    int PyUnicode_IS_ASCII(object text)

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
    Py_ssize_t rsr_rarest(const uint8_t* needle, Py_ssize_t m) noexcept nogil
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


cdef list _numbers_back(str text, Py_ssize_t start, Py_ssize_t cut):
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


cdef bint _creates(str line) except -1:
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


cdef str _dirname(str path):
    """``posixpath.dirname`` of a str (its code, without the call through ``os.fspath``)."""
    cdef str head = path[:path.rfind("/") + 1]
    if head and head != "/" * len(head):
        head = head.rstrip("/")
    return head


cdef str _basename(str path):
    return path[path.rfind("/") + 1:]


cdef bint _carries_digits(str part):
    """``leakrules._carries_digits``."""
    cdef Py_UCS4 c
    if part.replace(".", "").isdigit():
        return "." in part or len(part.strip("0")) >= 3
    if len(part) < 3:
        return False
    for c in part:
        if c.isdigit():
            return True
    return False


cdef list _shell_words(str line):
    """``leakrules._shell_words``."""
    cdef str word
    return [word[1:-1] if (word[0] == "'" or word[0] == '"') and len(word) >= 2 else word
            for word in _SHELL_WORD.findall(line)]


@cython.final
cdef class Judge:
    """The second pass for one episode; shares the scanner's list of public texts."""

    cdef bint _derive
    cdef list _texts
    cdef object _sandbox
    cdef bint _plain  # a SandboxKnowledge itself (not a subclass): its sets are read here
    cdef frozenset _paths, _commands
    cdef set _created
    cdef object _cwd
    cdef dict _numbers
    cdef tuple _operands
    cdef dict _parts
    cdef list _absent
    cdef Py_ssize_t _absent_count
    cdef list _pending

    def __init__(self, texts, sandbox, derive=True):
        if not isinstance(derive, bool):
            raise TypeError(f"LeakScanner: derive must be a bool, got {type(derive).__name__}")
        self._derive = derive
        if sandbox is not None and not isinstance(sandbox, SandboxKnowledge):
            raise TypeError(
                f"LeakScanner: sandbox must be a SandboxKnowledge, got {type(sandbox).__name__}"
            )
        self._texts = texts  # the scanner appends to it; read, never written here
        self._sandbox = sandbox if sandbox is not None else _STANDARD
        self._plain = type(self._sandbox) is SandboxKnowledge
        self._paths = self._sandbox.paths
        self._commands = self._sandbox.commands
        self._created = set()
        self._cwd = None
        self._numbers = {}
        self._operands = (-1, [], [])
        self._parts = {}
        self._absent = []
        self._absent_count = 0
        self._pending = []

    cdef bint _holds_path(self, str path):
        """``SandboxKnowledge.holds_path`` (its code, on the sets read once)."""
        cdef str head, name
        if not self._plain:
            return self._sandbox.holds_path(path)
        if path in self._paths or path.startswith(_VIRTUAL) or path in _ROOT_LINKS:
            return True
        head, _, name = path.rpartition("/")
        return head in _BIN_DIRS and name in self._commands

    cdef bint _holds_name(self, str value):
        """``SandboxKnowledge.holds_name`` (its code, on the sets read once)."""
        if not self._plain:
            return self._sandbox.holds_name(value)
        if value in self._commands:
            return True
        return value.split(".", 1)[0] in _MODULE_ROOTS and (
            value in MODULES or value.rsplit(".", 1)[0] in MODULES
        )

    # -- public text, read lazily: only a candidate ever pays for it ------------------

    cdef bint _contains(self, str value, Py_ssize_t start):
        """``value`` is a substring of some text from ``texts[start]`` on."""
        cdef Py_ssize_t i
        cdef str text
        cdef _Needle nd
        cdef bint bytewise = PyUnicode_KIND(value) == 1
        _needle(&nd, <const uint8_t*>PyUnicode_DATA(value), PyUnicode_GET_LENGTH(value))
        for i in range(start, len(self._texts)):
            text = <str>self._texts[i]
            if bytewise and PyUnicode_KIND(text) == 1:
                if rsr_find(<const uint8_t*>PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text),
                            nd.data, nd.length, nd.r1, nd.r2, 0) >= 0:
                    return True
            elif value in text:
                return True
        return False

    cdef bint _wrapped(self, str value) except -1:
        """``value`` is in some public text, whole or broken by line wraps (the twin's
        ``_wrapped``: halves first, then windows around each half's first 64 hits)."""
        cdef Py_ssize_t n = len(value), half = n // 2, offset, at, hits, lo, hi, size, joined
        cdef Py_ssize_t length
        cdef str text, piece
        cdef list shown = []
        cdef _Needle nd_piece, nd_value
        cdef const uint8_t* data
        cdef uint8_t small[4096]
        cdef uint8_t* buffer
        for piece, offset in ((value[:half], 0), (value[half:], half)):
            if self._seen_part(piece):
                shown.append((piece, offset))
        if len(shown) == 2 and self._seen_part(value):
            return True
        # The byte needles are read only where value, piece and text are all one-byte.
        cdef bint bytewise = PyUnicode_KIND(value) == 1
        _needle(&nd_value, <const uint8_t*>PyUnicode_DATA(value), n)
        for piece, offset in shown:
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

    cdef bint _seen_part(self, str part):
        """``part`` is a substring of some public text (memoised as texts only grow; a
        part holding one recently found in no text is not searched for)."""
        cdef Py_ssize_t searched = self._parts.get(part, 0), count = len(self._texts)
        cdef str absent
        cdef bint holds_absent = False
        if searched < 0:
            return True
        if self._absent_count != count:
            self._absent_count = count
            self._absent = []
        for absent in self._absent:
            if absent in part:
                holds_absent = True
                break
        if not holds_absent and self._contains(part, searched):
            self._parts[part] = -1
            return True
        self._parts[part] = count
        self._absent = self._absent[-(_ABSENT - 1):] + [part]
        return False

    cdef object _working_directory(self):
        cdef str text
        if self._cwd is None:
            for text in self._texts:
                match = _PROMPT.search(text) if "@" in text else None
                if match:
                    self._cwd = match.group(1).replace("~", "/root", 1)
                    break
        return self._cwd

    cdef tuple _seen_numbers(self):
        """The last distinct numbers in view, and the same with the unit constants (read
        as the twin reads them: from the newest text back, each from its end)."""
        cdef Py_ssize_t count = len(self._texts), index, cut, read, start
        cdef str text
        cdef list numbers
        if self._operands[0] == count:
            return self._operands[1], self._operands[2]
        cdef dict recent = {}
        for index in range(count - 1, -1, -1):
            text = <str>self._texts[index]
            cut, numbers = self._numbers.get(index, (len(text), []))
            read = 0
            while True:
                for number in numbers[read:]:  # newest first
                    recent.setdefault(number.lstrip("-"), None)
                read = len(numbers)
                if len(recent) >= OPERANDS or cut == 0:
                    break
                start = text.rfind("\n", 0, max(0, cut - _NUMBER_CHUNK)) + 1
                numbers = numbers + _numbers_back(text, start, cut)
                cut = start
            self._numbers[index] = (cut, numbers)
            if len(recent) >= OPERANDS:
                break
        values = sorted({float(n) for n in list(recent)[:OPERANDS]})
        self._operands = (count, values, sorted(set(values) | set(_UNITS)))
        return values, self._operands[2]

    # -- the shell syntax of the action ---------------------------------------------

    cdef str _resolve(self, str path):
        if path.startswith("~"):
            path = "/root" + path[1:]
        if not path.startswith("/"):
            cwd = self._working_directory()
            if cwd is None:
                return posixpath.normpath(path)
            path = posixpath.join(cwd, path)
        return posixpath.normpath(path)

    cdef int _read_commands(self, str action) except -1:
        """Learn the paths this action creates and where it ``cd``s to."""
        if not _creates(action):
            # No line can create a path then: the pattern's words hold no line break, and
            # ``\b`` sees a line's edge as it sees the break beside it.
            return 0
        cdef Py_ssize_t i, start
        cdef list words
        for line in action.splitlines():
            if not _creates(line):
                continue  # nothing here can create a path or change directory
            if "<<" in line and not line.lstrip().startswith(("cat", "tee", "python", "bash")):
                continue
            words = _shell_words(line)
            start = 0
            for i in range(len(words) + 1):
                if i == len(words) or words[i] in _SEPARATORS:
                    self._simple_command(words[start:i])
                    start = i + 1
        return 0

    cdef int _simple_command(self, list words) except -1:
        cdef list args = []
        cdef Py_ssize_t i = 0
        cdef str word
        while i < len(words):
            word = words[i]
            if word in _REDIRECTS or (word in _OUTPUT_FLAGS and args):
                if i + 1 < len(words) and words[i + 1] not in _SEPARATORS:
                    if words[i + 1] not in ("<", "<<", "<<<"):
                        self._created.add(self._resolve(words[i + 1]))
                i += 2
                continue
            if word.startswith("--") and "=" in word:
                flag, _, value = word.partition("=")
                if flag in _OUTPUT_FLAGS and value:
                    self._created.add(self._resolve(value))
            if word in ("<", "<<", "<<<"):
                i += 2
                continue
            if not args and ("=" in word or word in _PREFIX_WORDS):
                i += 1
                continue
            args.append(word)
            i += 1
        if not args:
            return 0
        command = _basename(args[0])
        operands = [a for a in args[1:] if not a.startswith("-")]
        if command == "cd":
            target = operands[0] if operands else "/root"
            self._cwd = self._resolve(target) if target != "-" else self._cwd
        elif command in _CREATE_ALL:
            made = [self._resolve(a) for a in operands]
            self._created.update(made)
            if command == "mkdir" and ("-p" in args or "--parents" in args):
                for path in made:  # and every parent the image did not have
                    while (path := _dirname(path)) not in ("/", ""):
                        if self._holds_path(path):
                            break
                        self._created.add(path)
        elif command in _CREATE_LAST and len(operands) >= 2:
            self._created.add(self._resolve(operands[-1]))
        elif command == "git" and operands[:1] in (["clone"], ["init"]) and len(operands) >= 2:
            self._created.add(self._resolve(operands[-1].removesuffix(".git").rsplit("/", 1)[-1]
                                            if operands[0] == "clone" and len(operands) == 2
                                            else operands[-1]))
        elif command.startswith("python") and operands[:1] == ["venv"] and len(operands) >= 2:
            self._created.add(self._resolve(operands[-1]))
        elif command == "virtualenv" and operands:
            self._created.add(self._resolve(operands[-1]))
        return 0

    # -- the rules ---------------------------------------------------------------------

    def note(self, action):
        """An action with no candidate: its shell syntax is read only if a later one needs it."""
        self._pending.append(action)

    cdef int _catch_up(self) except -1:
        cdef list pending = self._pending
        cdef str action
        self._pending = []
        for action in pending:
            self._read_commands(action)
        return 0

    cdef bint _own(self, str path):
        cdef str probe = path, parent
        while True:
            if probe in self._created:
                return True
            parent = _dirname(probe)
            if parent == probe or not parent:
                return False
            probe = parent

    cdef object _path_rule(self, str value):
        cdef Py_ssize_t cut
        cdef list parts, rest
        cdef str head, p
        cdef bint all_seen
        self._catch_up()
        path = self._resolve(value)
        if self._holds_path(path) or self._holds_name(value):
            return "sandbox"
        if self._own(path):
            return "own-path"
        # The longest leading directory known to exist (the sandbox's, the agent's own, or
        # one public text named), then only components public text showed.
        parts = [p for p in path.split("/") if p]
        for cut in range(len(parts), -1, -1):
            head = "/" + "/".join(parts[:cut])
            if (cut == 0 or self._holds_path(head) or head in self._created
                    or (cut > 1 and self._seen_part(head))):
                rest = parts[cut:]
                all_seen = True
                for p in rest:
                    if not self._seen_part(p):
                        all_seen = False
                        break
                if all_seen:
                    return "path-parts"
                break
        # Last, as the dearest: a search of every screen for the path, whole or wrapped.
        return "wrapped" if len(value) >= 8 and self._wrapped(value) else None

    cdef object _number_rule(self, str value):
        if value in EVERYDAY_NUMBERS:
            return "everyday"
        if value.count(".") > 1:
            return None  # a version or an address: no arithmetic makes one
        cdef double target = float(value), exact, rounding, a
        cdef int decimals
        exact = 1e-9 * max(1.0, abs(target))
        decimals = _decimals(value)
        rounding = 0.5 * 10.0 ** -decimals if decimals else exact
        seen, with_units = self._seen_numbers()
        cdef Py_ssize_t n_seen = len(seen), n_units = len(with_units), i
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
        return "computed" if found else None

    cdef object _word_rule(self, str action, Py_ssize_t position, str value, str kind):
        before = action[max(0, position - 1):position]
        if (kind == "identifier" or kind == "token" or kind == "hex") and before == "-":
            return "option"
        if kind == "path":
            return self._path_rule(value)
        if kind == "number":
            return self._number_rule(value)
        if kind == "host":
            return "everyday" if value == "localhost" or self._seen_part(value) else None
        if self._holds_name(value):
            return "sandbox"
        if self._wrapped(value):
            return "wrapped"
        if kind == "identifier" and not any(c.isdigit() for c in value):
            # ``KEY=value``, ``key: value``, ``"key": "value"``: a value, which may be data;
            # anywhere else (a call, an import, a grep) a name is vocabulary.
            lead = action[max(0, position - 3):position]
            if not (lead.endswith(("=", ":", "=\"", "='", ": ", ':"', ": \"", ": '"))):
                return "name"
        return None

    cdef object _quoted_flag(self, str value, dict judged):
        """The first part of a quoted value that needs a source and has none."""
        cdef str part
        for part in _PARTS.findall(value):
            if part in judged:
                if judged[part]:
                    return part  # also flagged as a word of its own
                continue
            if not _carries_digits(part):
                continue  # syntax, a keyword, a short count: no data to leak
            if part in EVERYDAY_NUMBERS or self._seen_part(part):
                continue
            if part.isdigit() and self._number_rule(part):
                continue
            return part
        return None

    cdef list _split_syntax(self, str action, list found):
        """Re-cut path-shaped words the shell syntax says are something else (the twin's
        ``_split_syntax``)."""
        cdef Py_ssize_t position
        cdef list out
        for _position, _value, kind in found:
            if kind == "path":
                break
        else:
            return found
        programs = ([m.span() for m in _SED_PROGRAM.finditer(action)]
                    if "'" in action or '"' in action else [])  # a program is quoted
        out = []
        for position, value, kind in found:
            if kind != "path":
                out.append((position, value, kind))
                continue
            if any(start < position < end for start, end in programs):
                # Pattern text: each piece with a digit must have been shown.
                out.extend((position + m.start(), m.group(), "number" if m.group()[0].isdigit()
                            else "token") for m in _PARTS.finditer(value)
                           if _carries_digits(m.group()))
                continue
            if action[position - 1:position] == ":" and position >= 1:
                if value.startswith("//"):
                    host, _, rest = value[2:].partition("/")
                    if host:
                        out.append((position + 2, host, "number" if host.replace(".", "").isdigit()
                                    else "host"))
                    if len(rest) >= 3:
                        out.append((position + 2 + len(host), "/" + rest, "path"))
                    continue
                port = _URL_PORT.fullmatch(value)
                if port:
                    if _carries_digits(port.group(1)):
                        out.append((position, port.group(1), "number"))
                    if port.group(2) and len(port.group(2)) >= 4:
                        out.append((position + len(port.group(1)), port.group(2), "path"))
                    continue
            out.append((position, value, kind))
        return out

    def judge(self, str action, turn, list found):
        """Leaks among first-pass candidates ``(position, value, kind)``, in order."""
        cdef Py_ssize_t index, position
        cdef str value, kind
        cdef dict judged, flags
        if not self._derive:
            return [_leak(turn, position, value, kind,
                          "unseen-quoted" if kind == "quoted" else f"unseen-{kind}",
                          f"{kind} {value!r}") for position, value, kind in found]
        self._pending.append(action)
        found = self._split_syntax(action, found)
        judged = {}
        flags = {}
        # Words first, so a quoted string's parts reuse their verdicts.
        for index in range(len(found)):
            position, value, kind = found[index]
            if kind != "quoted":
                cleared = self._word_rule(action, position, value, kind)
                judged[value] = cleared is None
                if cleared is None:
                    flags[index] = (f"unseen-{kind}", f"{kind} {value!r}")
        for index in range(len(found)):
            position, value, kind = found[index]
            if kind == "quoted":
                part = self._quoted_flag(value, judged)
                if part is not None:
                    flags[index] = ("unseen-part", f"quoted {value!r}: its part {part!r}")
        out = []
        for index in sorted(flags):
            position, value, kind = found[index]
            rule, what = flags[index]
            out.append(_leak(turn, position, value, kind, rule, what))
        return out


def _simd(level=None):
    """Tests only: the widest search to use, at most what the CPU has: 0 SSE2, 1 AVX2,
    2 AVX-512BW, ``None`` the CPU's best (so every path is checked against the twin)."""
    global rsr_simd_level
    rsr_simd_level = rsr_cpu_level() if level is None else min(int(level), rsr_cpu_level())


cdef object _leak(turn, position, value, kind, rule, what):
    why = f"{rule}: {what} at turn {turn}, character {position}: {RULES[rule]} before this turn"
    return Leak(value=value, kind=kind, turn=turn, position=position, rule=rule, why=why)
