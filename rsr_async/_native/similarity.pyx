# cython: language_level=3
"""Command similarity, compiled. Twin: ``similarity_py.py`` (same answers; definitions there).

Commands are normalised once, mapped to dense integer ids, and compared as C arrays:
Jaccard by stamping ids, order similarity by Hyyrö's bit-parallel LCS over 64-bit words
(one pass over the shorter side per pair, no dynamic-programming table). The kernels
run without the GIL, so a caller on a worker thread leaves the event loop free.
"""

from cpython.mem cimport (
    PyMem_Calloc,
    PyMem_Free,
    PyMem_Malloc,
    PyMem_RawCalloc,
    PyMem_RawFree,
    PyMem_RawMalloc,
    PyMem_Realloc,
)
from cpython.unicode cimport PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_KIND, PyUnicode_READ
from libc.stdint cimport int32_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

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


cdef uint8_t _SPACE1[256]  # _is_space for one-byte characters


cdef void _init_space1() noexcept:
    cdef int c
    for c in range(256):
        _SPACE1[c] = _is_space(<Py_UCS4>c)


_init_space1()


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


cdef inline uint64_t _hash_bytes(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    cdef uint64_t h = <uint64_t>0x9E3779B97F4A7C15 ^ <uint64_t>n, w = 0
    cdef uint32_t lo, hi
    while n >= 8:
        memcpy(&w, p, 8)
        h = (h ^ w) * <uint64_t>0xBF58476D1CE4E5B9
        h ^= h >> 31
        p += 8
        n -= 8
    if n > 0:
        if n >= 4:
            memcpy(&lo, p, 4)
            memcpy(&hi, p + n - 4, 4)
            w = (<uint64_t>hi << 32) | lo
        else:
            w = (<uint64_t>p[0] << 16) | (<uint64_t>p[n >> 1] << 8) | p[n - 1]
        h = (h ^ w) * <uint64_t>0x94D049BB133111EB
    h ^= h >> 29
    h *= <uint64_t>0xBF58476D1CE4E5B9
    h ^= h >> 32
    return h


cdef uint64_t _hash_span(int kind, const void* data, Py_ssize_t s, Py_ssize_t e) noexcept:
    """Hash of the characters, the same whichever kind of string holds them."""
    cdef Py_ssize_t i, n = e - s
    cdef Py_UCS4 c, top = 0
    cdef uint64_t h
    cdef uint8_t small[256]
    cdef uint8_t* buf
    if kind == 1:
        return _hash_bytes(<const uint8_t*>data + s, n)
    for i in range(s, e):
        c = PyUnicode_READ(kind, data, i)
        if c > top:
            top = c
    if top < 256:
        # Could also sit in a one-byte string: hash it as one.
        buf = &small[0] if n <= 256 else <uint8_t*>PyMem_RawMalloc(n)
        if buf == NULL:
            return 0  # out of memory: one bucket for all, still correct
        for i in range(n):
            buf[i] = <uint8_t>PyUnicode_READ(kind, data, s + i)
        h = _hash_bytes(buf, n)
        if n > 256:
            PyMem_RawFree(buf)
        return h
    h = <uint64_t>0xCBF29CE484222325
    for i in range(s, e):
        h = (h ^ <uint64_t>PyUnicode_READ(kind, data, i)) * <uint64_t>0x100000001B3
    return h ^ (h >> 29)


cdef inline bint _same_span(int k1, const void* d1, Py_ssize_t s1,
                            int k2, const void* d2, Py_ssize_t s2, Py_ssize_t n) noexcept:
    cdef Py_ssize_t i
    if k1 == k2:
        return memcmp(<const char*>d1 + s1 * k1, <const char*>d2 + s2 * k2, n * k1) == 0
    for i in range(n):
        if PyUnicode_READ(k1, d1, s1 + i) != PyUnicode_READ(k2, d2, s2 + i):
            return False
    return True


cdef struct _Word:
    const void* data
    Py_ssize_t start
    Py_ssize_t length
    int kind


cdef class _Vocab:
    """Normalised command -> dense id, without making a string per command.

    A command whose inside is already single-spaced (nearly all) is looked up as a span
    of the caller's string; only one that needs spaces collapsed is copied. Strings the
    table points into are kept alive in ``keep``.
    """

    cdef uint64_t* slots  # high half: hash tag; low half: id + 1 (0: empty)
    cdef _Word* words
    cdef Py_ssize_t cap, bits, count
    cdef list keep

    def __cinit__(self):
        self.bits = 10
        self.cap = 1 << self.bits
        self.slots = <uint64_t*>PyMem_Calloc(self.cap, sizeof(uint64_t))
        self.words = <_Word*>PyMem_Malloc((self.cap // 2 + 1) * sizeof(_Word))
        self.keep = []
        if self.slots == NULL or self.words == NULL:
            raise MemoryError()

    def __dealloc__(self):
        PyMem_Free(self.slots)
        PyMem_Free(self.words)

    cdef int _grow(self) except -1:
        cdef Py_ssize_t old_cap = self.cap, i, j, mask
        cdef uint64_t* old = self.slots
        cdef uint64_t* slots = <uint64_t*>PyMem_Calloc(old_cap * 2, sizeof(uint64_t))
        cdef _Word* words = <_Word*>PyMem_Realloc(self.words, (old_cap + 1) * sizeof(_Word))
        if words != NULL:
            self.words = words
        if slots == NULL or words == NULL:
            PyMem_Free(slots)
            raise MemoryError()
        self.bits += 1
        self.cap = old_cap * 2
        mask = self.cap - 1
        for i in range(old_cap):
            if old[i]:
                j = <Py_ssize_t>((old[i] >> 32) >> (32 - self.bits))
                while slots[j]:
                    j = (j + 1) & mask
                slots[j] = old[i]
        self.slots = slots
        PyMem_Free(old)
        return 0

    cdef Py_ssize_t id_of(self, str command) except -2:
        """The id of the normalised command, -1 when it normalises to nothing."""
        cdef Py_ssize_t n = PyUnicode_GET_LENGTH(command)
        cdef int kind = PyUnicode_KIND(command)
        cdef const void* data = PyUnicode_DATA(command)
        cdef Py_ssize_t i, start = 0, end = n, j, mask
        cdef Py_UCS4 ch
        cdef bint prev_space = False, simple = True
        cdef str owner = command
        cdef uint64_t h, tag, slot
        cdef _Word* w
        cdef const uint8_t* p = <const uint8_t*>data
        cdef uint8_t b, now, was, bad
        if kind == 1:
            # One-byte strings (nearly all commands): a table instead of the full
            # Unicode whitespace test, and no kind switch per character.
            while start < n and _SPACE1[p[start]]:
                start += 1
            if start == n:
                return -1
            while _SPACE1[p[end - 1]]:
                end -= 1
            # Branch-free: a space is fine unless it is not ' ' or follows another space.
            bad = 0
            was = 0
            for i in range(start, end):
                b = p[i]
                now = _SPACE1[b]
                bad |= now & ((b != 32) | was)
                was = now
            simple = not bad
        else:
            while start < n and _is_space(PyUnicode_READ(kind, data, start)):
                start += 1
            if start == n:
                return -1
            while _is_space(PyUnicode_READ(kind, data, end - 1)):
                end -= 1
            for i in range(start, end):
                ch = PyUnicode_READ(kind, data, i)
                if _is_space(ch):
                    if ch != 32 or prev_space:
                        simple = False
                        break
                    prev_space = True
                else:
                    prev_space = False
        if not simple:
            owner = _normalize(command)
            kind = PyUnicode_KIND(owner)
            data = PyUnicode_DATA(owner)
            start = 0
            end = PyUnicode_GET_LENGTH(owner)
        h = _hash_span(kind, data, start, end)
        tag = h >> 32
        mask = self.cap - 1
        j = <Py_ssize_t>(tag >> (32 - self.bits))
        while True:
            slot = self.slots[j]
            if slot == 0:
                break
            if (slot >> 32) == tag:
                w = self.words + <Py_ssize_t>((slot & <uint64_t>0xFFFFFFFF) - 1)
                if w.length == end - start and _same_span(kind, data, start, w.kind, w.data,
                                                          w.start, end - start):
                    return <Py_ssize_t>((slot & <uint64_t>0xFFFFFFFF) - 1)
            j = (j + 1) & mask
        w = self.words + self.count
        w.data = data
        w.kind = kind
        w.start = start
        w.length = end - start
        self.keep.append(owner)
        self.count += 1
        self.slots[j] = (tag << 32) | <uint64_t>self.count
        if self.count * 2 > self.cap:
            self._grow()
        return self.count - 1


cdef _Encoded _encode(list items, Py_ssize_t skip, str fname, bint first_is_b=False):
    cdef _Encoded enc = _Encoded()
    cdef _Vocab vocab = _Vocab()
    cdef Py_ssize_t i, found
    cdef object item, raw, command
    enc.n_items = len(items)
    enc.offsets = <Py_ssize_t*>PyMem_Malloc((enc.n_items + 1) * sizeof(Py_ssize_t))
    if enc.offsets == NULL:
        raise MemoryError()
    for i in range(enc.n_items):
        enc.offsets[i] = enc.n_ids
        item = items[i]
        if isinstance(item, Trajectory):
            raw = item.commands(skip_first=skip)
        elif isinstance(item, (list, tuple)):
            raw = item[skip:] if skip else item
        elif isinstance(item, str) or not isinstance(item, Sequence):
            raise TypeError(
                f"{fname}: {_item_name(i, first_is_b)} must be a Trajectory or a sequence "
                f"of str, got {type(item).__name__}"
            )
        else:
            raw = item[skip:]
        for command in raw:
            if not isinstance(command, str):
                raise TypeError(
                    f"{fname}: {_item_name(i, first_is_b)} holds a "
                    f"{type(command).__name__}, not str"
                )
            found = vocab.id_of(<str>command)
            if found >= 0:
                enc.push(<int32_t>found)
    enc.offsets[enc.n_items] = enc.n_ids
    enc.vocab = vocab.count
    return enc


cdef str _item_name(Py_ssize_t i, bint first_is_b):
    if first_is_b:
        return "a" if i == 0 else "b"
    return f"items[{i}]"


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


# Each pair's answer is kept as a fraction (numerator << 32 | denominator), so the
# Python floats can be shared between pairs with the same fraction.
cdef inline uint64_t _pack(Py_ssize_t num, Py_ssize_t den) noexcept nogil:
    return (<uint64_t>num << 32) | <uint64_t>den


cdef inline double _ratio(uint64_t packed, bint order) noexcept nogil:
    cdef Py_ssize_t num = <Py_ssize_t>(packed >> 32), den = <Py_ssize_t>(packed & <uint64_t>0xFFFFFFFF)
    if den == 0:
        return 1.0
    if order:
        # rapidfuzz's exact arithmetic (1 - distance / max), not lcs / max: they differ
        # in the last bit.
        return 1.0 - <double>(den - num) / <double>den
    return <double>num / <double>den


cdef void _order_matrix(_Encoded enc, _Scratch s, uint64_t* out) noexcept nogil:
    """LCS and longer length of every pair (i < j), as fractions."""
    cdef Py_ssize_t n = enc.n_items, i, j, m, mj, words, k
    cdef const int32_t* a
    for i in range(n):
        a = enc.ids + enc.offsets[i]
        m = enc.offsets[i + 1] - enc.offsets[i]
        words = (m + 63) >> 6
        if words == 0:
            words = 1
        k = _build_pattern(a, m, words, s.slot, s.seen, s.pm)
        for j in range(i + 1, n):
            mj = enc.offsets[j + 1] - enc.offsets[j]
            out[i * n + j] = _pack(
                _lcs(m, words, s.slot, s.pm, enc.ids + enc.offsets[j], mj, s.v),
                m if m > mj else mj)
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


cdef int _jaccard_matrix(_Encoded enc, Py_ssize_t* sizes, uint64_t* out) except -1 nogil:
    """Intersection and union sizes of every pair (i < j), as fractions.

    Intersections come from an inverted index (command id -> items holding it, in item
    order), so the work is the number of shared (pair, command) combinations, not pairs
    times set sizes; most pairs of real trajectories share few commands.
    """
    cdef Py_ssize_t n = enc.n_items, v = enc.vocab, i, j, t, p, inter, total = 0
    cdef int32_t* slot = <int32_t*>PyMem_RawMalloc((v + 1) * sizeof(int32_t))
    cdef Py_ssize_t* start = <Py_ssize_t*>PyMem_RawCalloc(v + 2, sizeof(Py_ssize_t))
    cdef Py_ssize_t* cursor = <Py_ssize_t*>PyMem_RawMalloc((v + 1) * sizeof(Py_ssize_t))
    cdef int32_t* postings = NULL
    cdef int32_t* counts = <int32_t*>PyMem_RawCalloc(n + 1, sizeof(int32_t))
    cdef const int32_t* a
    try:
        if slot == NULL or start == NULL or cursor == NULL or counts == NULL:
            with gil:
                raise MemoryError()
        for t in range(v + 1):
            slot[t] = -1
        for i in range(n):
            sizes[i] = _unique(enc.ids + enc.offsets[i], enc.offsets[i + 1] - enc.offsets[i], slot)
            a = enc.ids + enc.offsets[i]
            for t in range(sizes[i]):
                start[a[t] + 1] += 1
            total += sizes[i]
        for t in range(v):
            start[t + 1] += start[t]
            cursor[t] = start[t]
        postings = <int32_t*>PyMem_RawMalloc((total + 1) * sizeof(int32_t))
        if postings == NULL:
            with gil:
                raise MemoryError()
        for i in range(n):
            a = enc.ids + enc.offsets[i]
            for t in range(sizes[i]):
                postings[cursor[a[t]]] = <int32_t>i
                cursor[a[t]] += 1
        for t in range(v):
            cursor[t] = start[t]
        for i in range(n):
            a = enc.ids + enc.offsets[i]
            for t in range(sizes[i]):
                # postings[cursor] is i itself: every later entry is a later item.
                p = cursor[a[t]] + 1
                cursor[a[t]] = p
                while p < start[a[t] + 1]:
                    counts[postings[p]] += 1
                    p += 1
            for j in range(i + 1, n):
                inter = counts[j]
                counts[j] = 0
                out[i * n + j] = _pack(inter, sizes[i] + sizes[j] - inter)
    finally:
        PyMem_RawFree(slot)
        PyMem_RawFree(start)
        PyMem_RawFree(cursor)
        PyMem_RawFree(postings)
        PyMem_RawFree(counts)
    return 0


cdef list _to_rows(uint64_t* out, Py_ssize_t n, bint order):
    """Rows of Python floats; (i, j) and (j, i) share one float object."""
    cdef list rows = [[1.0] * n for _ in range(n)]
    cdef list row_i, row_j
    cdef Py_ssize_t i, j, den, num
    cdef uint64_t packed
    cdef object value
    for i in range(n):
        row_i = <list>rows[i]
        for j in range(i + 1, n):
            value = _ratio(out[i * n + j], order)
            row_i[j] = value
            (<list>rows[j])[i] = value
    return rows


cdef list _items(object items, str fname):
    if isinstance(items, str) or not isinstance(items, Sequence):
        raise TypeError(f"{fname}: items must be a sequence, got {type(items).__name__}")
    return list(items)


cdef list _matrix(object items, object skip_first, str fname, bint order, bint pair):
    cdef Py_ssize_t skip = _check_skip(skip_first, fname)
    cdef _Encoded enc = _encode(items if pair else _items(items, fname), skip, fname, pair)
    cdef _Scratch s = _scratch(enc, order) if order else None
    cdef Py_ssize_t n = enc.n_items
    cdef uint64_t* out = <uint64_t*>PyMem_Malloc((n * n + 1) * sizeof(uint64_t))
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
                _jaccard_matrix(enc, sizes, out)
        if pair:
            return [_ratio(out[1], order)]
        return _to_rows(out, n, order)
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
