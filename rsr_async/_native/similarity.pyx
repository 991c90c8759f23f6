# cython: language_level=3
"""Command similarity, compiled. Twin: ``similarity_py.py`` (same answers; definitions there).

Commands are normalised once, mapped to dense integer ids, and compared as C arrays:
Jaccard by stamping ids, order similarity by Hyyrö's bit-parallel LCS over 64-bit words
(one pass over the shorter side per pair, no dynamic-programming table). The kernels
run without the GIL, so a caller on a worker thread leaves the event loop free.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.unicode cimport PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_KIND, PyUnicode_READ
from libc.stdint cimport int32_t, uint64_t
from libc.string cimport memset

from collections.abc import Sequence

from rsr_async.schema import Trajectory

__all__ = [
    "command_jaccard",
    "command_order_similarity",
    "normalize_command",
    "pairwise_jaccard",
    "pairwise_order_similarity",
]

cdef extern from *:
    """
    static inline int rsr_popcount64(unsigned long long x) { return __builtin_popcountll(x); }
    """
    int rsr_popcount64(unsigned long long x) nogil


cdef inline bint _is_space(Py_UCS4 ch) noexcept nogil:
    # Same set as str.split() with no argument.
    if ch < 128:
        return ch == 32 or (9 <= ch <= 13) or (28 <= ch <= 31)
    return ch == 0x85 or ch == 0xA0 or ch == 0x1680 or (0x2000 <= ch <= 0x200A) \
        or ch == 0x2028 or ch == 0x2029 or ch == 0x202F or ch == 0x205F or ch == 0x3000


cdef str _normalize(str text):
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
    cdef int kind = PyUnicode_KIND(text)
    cdef void* data = PyUnicode_DATA(text)
    cdef Py_ssize_t i, start = 0, end = n
    cdef Py_UCS4 ch
    cdef bint prev_space = False
    while start < n and _is_space(PyUnicode_READ(kind, data, start)):
        start += 1
    if start == n:
        return ""
    while _is_space(PyUnicode_READ(kind, data, end - 1)):
        end -= 1
    # Fast path: the inside is already single-spaced, so a slice (or the string itself) is it.
    for i in range(start, end):
        ch = PyUnicode_READ(kind, data, i)
        if _is_space(ch):
            if ch != 32 or prev_space:
                break
            prev_space = True
        else:
            prev_space = False
    else:
        if start == 0 and end == n:
            return text
        return text[start:end]
    cdef list words = []
    i = start
    while i < end:
        while i < end and _is_space(PyUnicode_READ(kind, data, i)):
            i += 1
        start = i
        while i < end and not _is_space(PyUnicode_READ(kind, data, i)):
            i += 1
        words.append(text[start:i])
    return " ".join(words)


def normalize_command(command):
    """Collapse runs of whitespace to one space and strip both ends (``ls  -l\\n`` → ``ls -l``)."""
    if not isinstance(command, str):
        raise TypeError(f"normalize_command: expected str, got {type(command).__name__}")
    return _normalize(<str>command)


cdef Py_ssize_t _check_skip(object skip_first, str fname) except -1:
    if not isinstance(skip_first, int) or isinstance(skip_first, bool):
        raise TypeError(f"{fname}: skip_first must be an int, got {type(skip_first).__name__}")
    if skip_first < 0:
        raise ValueError(f"{fname}: skip_first must be >= 0, got {skip_first}")
    return skip_first


cdef class _Encoded:
    """Every item's normalised commands as ids into one vocabulary, in one flat C array."""

    cdef int32_t* ids
    cdef Py_ssize_t* offsets  # item i is ids[offsets[i]:offsets[i + 1]]
    cdef Py_ssize_t n_items
    cdef Py_ssize_t n_ids
    cdef Py_ssize_t capacity
    cdef Py_ssize_t vocab

    def __dealloc__(self):
        PyMem_Free(self.ids)
        PyMem_Free(self.offsets)

    cdef int push(self, int32_t value) except -1:
        cdef int32_t* grown
        if self.n_ids == self.capacity:
            self.capacity = self.capacity * 2 + 64
            grown = <int32_t*>PyMem_Realloc(self.ids, self.capacity * sizeof(int32_t))
            if grown == NULL:
                raise MemoryError()
            self.ids = grown
        self.ids[self.n_ids] = value
        self.n_ids += 1
        return 0


cdef _Encoded _encode(list items, Py_ssize_t skip, str fname, bint first_is_b=False):
    cdef _Encoded enc = _Encoded()
    cdef dict vocab = {}
    cdef Py_ssize_t i
    cdef object item, raw, command, found
    cdef str normalized, name
    enc.n_items = len(items)
    enc.offsets = <Py_ssize_t*>PyMem_Malloc((enc.n_items + 1) * sizeof(Py_ssize_t))
    if enc.offsets == NULL:
        raise MemoryError()
    for i in range(enc.n_items):
        enc.offsets[i] = enc.n_ids
        item = items[i]
        if first_is_b:
            name = "a" if i == 0 else "b"
        else:
            name = f"items[{i}]"
        if isinstance(item, Trajectory):
            raw = item.commands(skip_first=skip)
        elif isinstance(item, str) or not isinstance(item, Sequence):
            raise TypeError(
                f"{fname}: {name} must be a Trajectory or a sequence of str, "
                f"got {type(item).__name__}"
            )
        else:
            raw = item[skip:]
        for command in raw:
            if not isinstance(command, str):
                raise TypeError(f"{fname}: {name} holds a {type(command).__name__}, not str")
            normalized = _normalize(<str>command)
            if not normalized:
                continue
            found = vocab.get(normalized)
            if found is None:
                found = len(vocab)
                vocab[normalized] = found
            enc.push(<int32_t>found)
    enc.offsets[enc.n_items] = enc.n_ids
    enc.vocab = len(vocab)
    return enc


cdef class _Scratch:
    """Per-call work arrays: id → local slot, match masks, the LCS bit vector."""

    cdef int32_t* slot
    cdef uint64_t* pm
    cdef uint64_t* v
    cdef int32_t* seen

    def __dealloc__(self):
        PyMem_Free(self.slot)
        PyMem_Free(self.pm)
        PyMem_Free(self.v)
        PyMem_Free(self.seen)


cdef _Scratch _scratch(_Encoded enc, bint for_lcs):
    cdef _Scratch s = _Scratch()
    cdef Py_ssize_t i, longest = 0, length, words
    for i in range(enc.n_items):
        length = enc.offsets[i + 1] - enc.offsets[i]
        if length > longest:
            longest = length
    words = (longest + 63) // 64 + 1
    s.slot = <int32_t*>PyMem_Malloc((enc.vocab + 1) * sizeof(int32_t))
    s.seen = <int32_t*>PyMem_Malloc((longest + 1) * sizeof(int32_t))
    if for_lcs:
        s.pm = <uint64_t*>PyMem_Malloc((longest + 1) * words * sizeof(uint64_t))
        s.v = <uint64_t*>PyMem_Malloc(words * sizeof(uint64_t))
        if s.pm == NULL or s.v == NULL:
            raise MemoryError()
    if s.slot == NULL or s.seen == NULL:
        raise MemoryError()
    for i in range(enc.vocab + 1):
        s.slot[i] = -1
    return s


cdef inline Py_ssize_t _build_pattern(const int32_t* a, Py_ssize_t m, Py_ssize_t words,
                                      int32_t* slot, int32_t* seen, uint64_t* pm) noexcept nogil:
    """Match masks of pattern ``a``: one row of ``words`` words per distinct id."""
    cdef Py_ssize_t i, k = 0
    cdef int32_t s
    for i in range(m):
        if slot[a[i]] < 0:
            slot[a[i]] = <int32_t>k
            seen[k] = a[i]
            k += 1
    memset(pm, 0, k * words * sizeof(uint64_t))
    for i in range(m):
        s = slot[a[i]]
        pm[s * words + (i >> 6)] |= (<uint64_t>1) << (i & 63)
    return k


cdef inline void _clear_pattern(int32_t* slot, const int32_t* seen, Py_ssize_t k) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(k):
        slot[seen[i]] = -1


cdef inline Py_ssize_t _lcs(Py_ssize_t m, Py_ssize_t words, const int32_t* slot,
                            const uint64_t* pm, const int32_t* b, Py_ssize_t n,
                            uint64_t* v) noexcept nogil:
    """Hyyrö's bit-parallel LCS length of the prepared pattern against ``b``."""
    cdef Py_ssize_t j, w, zeros = 0
    cdef int32_t s
    cdef uint64_t x, u, t, total, carry, one = 0
    cdef const uint64_t* row
    if m == 0 or n == 0:
        return 0
    if words == 1:
        x = ~one
        for j in range(n):
            s = slot[b[j]]
            if s >= 0:
                u = x & pm[s]
                x = (x + u) | (x - u)
        if m < 64:
            x |= ~one << m
        return 64 - rsr_popcount64(x)
    for w in range(words):
        v[w] = ~one
    for j in range(n):
        s = slot[b[j]]
        if s < 0:
            continue  # no match bits: the vector would not change
        row = pm + s * words
        carry = 0
        for w in range(words):
            x = v[w]
            u = x & row[w]
            t = x + carry
            carry = t < carry
            total = t + u
            carry |= total < u
            v[w] = total | (x - u)
    for w in range(words):
        x = v[w]
        if w == words - 1 and (m & 63):
            x |= ~one << (m & 63)
        zeros += 64 - rsr_popcount64(x)
    return zeros


cdef inline double _order_ratio(Py_ssize_t lcs, Py_ssize_t m, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t longest = m if m > n else n
    if longest == 0:
        return 1.0
    # rapidfuzz's exact arithmetic (1 - distance / max), not lcs / max: they differ in the last bit.
    return 1.0 - <double>(longest - lcs) / <double>longest


cdef void _order_matrix(_Encoded enc, _Scratch s, double* out) noexcept nogil:
    cdef Py_ssize_t n = enc.n_items, i, j, m, words, k
    cdef const int32_t* a
    cdef double r
    for i in range(n):
        out[i * n + i] = 1.0
        a = enc.ids + enc.offsets[i]
        m = enc.offsets[i + 1] - enc.offsets[i]
        words = (m + 63) >> 6
        if words == 0:
            words = 1
        k = _build_pattern(a, m, words, s.slot, s.seen, s.pm)
        for j in range(i + 1, n):
            r = _order_ratio(
                _lcs(m, words, s.slot, s.pm, enc.ids + enc.offsets[j],
                     enc.offsets[j + 1] - enc.offsets[j], s.v),
                m, enc.offsets[j + 1] - enc.offsets[j])
            out[i * n + j] = r
            out[j * n + i] = r
        _clear_pattern(s.slot, s.seen, k)


cdef Py_ssize_t _unique(int32_t* ids, Py_ssize_t m, int32_t* slot) noexcept nogil:
    """Drop repeated ids in place (first occurrences kept); ``slot`` is all -1 on entry and exit."""
    cdef Py_ssize_t i, k = 0
    for i in range(m):
        if slot[ids[i]] < 0:
            slot[ids[i]] = 0
            ids[k] = ids[i]
            k += 1
    for i in range(k):
        slot[ids[i]] = -1
    return k


cdef void _jaccard_matrix(_Encoded enc, _Scratch s, Py_ssize_t* sizes, double* out) noexcept nogil:
    cdef Py_ssize_t n = enc.n_items, i, j, t, inter, union
    cdef const int32_t* a
    cdef const int32_t* b
    cdef double r
    for i in range(n):
        sizes[i] = _unique(enc.ids + enc.offsets[i], enc.offsets[i + 1] - enc.offsets[i], s.slot)
    for i in range(n):
        out[i * n + i] = 1.0
        a = enc.ids + enc.offsets[i]
        for t in range(sizes[i]):
            s.slot[a[t]] = 0
        for j in range(i + 1, n):
            b = enc.ids + enc.offsets[j]
            inter = 0
            for t in range(sizes[j]):
                if s.slot[b[t]] == 0:
                    inter += 1
            union = sizes[i] + sizes[j] - inter
            r = 1.0 if union == 0 else <double>inter / <double>union
            out[i * n + j] = r
            out[j * n + i] = r
        for t in range(sizes[i]):
            s.slot[a[t]] = -1


cdef list _to_rows(double* out, Py_ssize_t n):
    cdef list rows = []
    cdef list row
    cdef Py_ssize_t i, j
    for i in range(n):
        row = [None] * n
        for j in range(n):
            row[j] = out[i * n + j]
        rows.append(row)
    return rows


cdef list _items(object items, str fname):
    if isinstance(items, str) or not isinstance(items, Sequence):
        raise TypeError(f"{fname}: items must be a sequence, got {type(items).__name__}")
    return list(items)


cdef list _matrix(object items, object skip_first, str fname, bint order, bint pair):
    cdef Py_ssize_t skip = _check_skip(skip_first, fname)
    cdef _Encoded enc = _encode(items if pair else _items(items, fname), skip, fname, pair)
    cdef _Scratch s = _scratch(enc, order)
    cdef Py_ssize_t n = enc.n_items
    cdef double* out = <double*>PyMem_Malloc((n * n + 1) * sizeof(double))
    cdef Py_ssize_t* sizes = <Py_ssize_t*>PyMem_Malloc((n + 1) * sizeof(Py_ssize_t))
    if out == NULL or sizes == NULL:
        PyMem_Free(out)
        PyMem_Free(sizes)
        raise MemoryError()
    try:
        with nogil:
            if order:
                _order_matrix(enc, s, out)
            else:
                _jaccard_matrix(enc, s, sizes, out)
        if pair:
            return [out[1]]
        return _to_rows(out, n)
    finally:
        PyMem_Free(out)
        PyMem_Free(sizes)


def command_jaccard(a, b, *, skip_first=0):
    """Jaccard index of the sets of normalised, non-blank commands; 1.0 when both are empty."""
    return _matrix([a, b], skip_first, "command_jaccard", False, True)[0]


def command_order_similarity(a, b, *, skip_first=0):
    """Normalised LCS of the two command sequences: ``LCS / max(len)``; 1.0 when both are empty."""
    return _matrix([a, b], skip_first, "command_order_similarity", True, True)[0]


def pairwise_jaccard(items, *, skip_first=0):
    """All-pairs ``command_jaccard``: a symmetric ``len(items)`` square matrix."""
    return _matrix(items, skip_first, "pairwise_jaccard", False, False)


def pairwise_order_similarity(items, *, skip_first=0):
    """All-pairs ``command_order_similarity``: a symmetric ``len(items)`` square matrix."""
    return _matrix(items, skip_first, "pairwise_order_similarity", True, False)
