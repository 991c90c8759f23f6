# cython: language_level=3
"""Leak scanning, compiled. Twin: ``leakscan_py.py`` (same answers; the rules are there).

Every known text is read once through the PEP 393 API; its candidate words go into an
open-addressing table of (hash, text, start, length) that points back into the text, so
no Python string is made for a known word. A lookup compares characters on a hash match,
so the answer is exact, never probabilistic.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_RawFree, PyMem_RawMalloc, PyMem_Realloc
from cpython.unicode cimport PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_KIND
from libc.stdint cimport uint8_t, uint16_t, uint64_t
from libc.string cimport memcmp, memcpy

from collections.abc import Sequence

from rsr_async.schema import Leak

cdef extern from "Python.h":
    # A macro over the string's own buffer: safe without the GIL while the string lives.
    Py_UCS4 PyUnicode_READ(int kind, const void* data, Py_ssize_t index) nogil
    int PyUnicode_IS_ASCII(object text)

cdef extern from *:
    """
    #include <stdint.h>
    #if defined(__SSE2__)
    #include <emmintrin.h>
    #endif
    static inline int rsr_ctz64(unsigned long long x) { return __builtin_ctzll(x); }
    static inline int rsr_clz64(unsigned long long x) { return __builtin_clzll(x); }

    /* Masks of 64 bytes: bit i of *word is set when p[i] is in [A-Za-z0-9_./+~-], bit i
       of *digit_slash when p[i] is a digit or '/'. SSE2 where there is one (16 bytes per
       step, no table); the caller's table loop elsewhere. Returns 0 if it did nothing. */
    static inline int rsr_masks64(const uint8_t *p, uint64_t *word, uint64_t *digit_slash) {
    #if defined(__SSE2__)
        uint64_t w = 0, d = 0;
        int k;
        for (k = 0; k < 4; k++) {
            __m128i c = _mm_loadu_si128((const __m128i *)(p + 16 * k));
            /* Signed compares: bytes >= 0x80 are negative, so never in a range. */
            __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(c, _mm_set1_epi8('0' - 1)),
                                          _mm_cmplt_epi8(c, _mm_set1_epi8('9' + 1)));
            __m128i lower = _mm_or_si128(c, _mm_set1_epi8(0x20));
            __m128i letter = _mm_and_si128(_mm_cmpgt_epi8(lower, _mm_set1_epi8('a' - 1)),
                                           _mm_cmplt_epi8(lower, _mm_set1_epi8('z' + 1)));
            __m128i slash = _mm_cmpeq_epi8(c, _mm_set1_epi8('/'));
            __m128i other = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(c, _mm_set1_epi8('_')), _mm_cmpeq_epi8(c, _mm_set1_epi8('.'))),
                _mm_or_si128(
                    _mm_or_si128(_mm_cmpeq_epi8(c, _mm_set1_epi8('+')), _mm_cmpeq_epi8(c, _mm_set1_epi8('~'))),
                    _mm_cmpeq_epi8(c, _mm_set1_epi8('-'))));
            __m128i ds = _mm_or_si128(digit, slash);
            __m128i any = _mm_or_si128(_mm_or_si128(ds, letter), other);
            w |= (uint64_t)(uint16_t)_mm_movemask_epi8(any) << (16 * k);
            d |= (uint64_t)(uint16_t)_mm_movemask_epi8(ds) << (16 * k);
        }
        *word = w;
        *digit_slash = d;
        return 1;
    #else
        (void)p; (void)word; (void)digit_slash;
        return 0;
    #endif
    }
    """
    int rsr_ctz64(unsigned long long x) nogil
    int rsr_clz64(unsigned long long x) nogil
    int rsr_masks64(const uint8_t* p, uint64_t* word, uint64_t* digit_slash) nogil

__all__ = ["LeakScanner", "scan_leaks"]

# Character classes, one bit each; bytes 128-255 (Latin-1) are in no class.
cdef enum:
    F_WORD = 1
    F_DIGIT = 2
    F_LETTER = 4
    F_HEX = 8
    F_TOKEN = 16
    F_IDENT = 32
    F_SLASH = 64
    F_DOT = 128
    F_DIGDOT = 256

cdef uint16_t _CLASS[256]


cdef void _init_classes() noexcept:
    cdef int c
    for c in range(256):
        _CLASS[c] = 0
    for c in range(ord("0"), ord("9") + 1):
        _CLASS[c] = F_WORD | F_DIGIT | F_HEX | F_TOKEN | F_IDENT | F_DIGDOT
    for c in range(ord("a"), ord("z") + 1):
        _CLASS[c] = F_WORD | F_LETTER | F_TOKEN | F_IDENT
        _CLASS[c - 32] = F_WORD | F_LETTER | F_TOKEN | F_IDENT
    for c in range(ord("a"), ord("f") + 1):
        _CLASS[c] |= F_HEX
        _CLASS[c - 32] |= F_HEX
    _CLASS[ord("_")] = F_WORD | F_TOKEN | F_IDENT
    _CLASS[ord("-")] = F_WORD | F_TOKEN | F_IDENT
    _CLASS[ord("+")] = F_WORD | F_TOKEN
    _CLASS[ord(".")] = F_WORD | F_IDENT | F_DOT | F_DIGDOT
    _CLASS[ord("/")] = F_WORD | F_SLASH
    _CLASS[ord("~")] = F_WORD


cdef uint8_t _BITS[256]  # bit 0: word character; bit 1: digit or slash


cdef void _init_bits() noexcept:
    cdef int c
    for c in range(256):
        _BITS[c] = (1 if _CLASS[c] & F_WORD else 0) | (2 if _CLASS[c] & (F_DIGIT | F_SLASH) else 0)


_init_classes()
_init_bits()

# Kind codes; 0 means "not a candidate".
cdef enum:
    K_NUMBER = 1
    K_HEX = 2
    K_TOKEN = 3
    K_IDENT = 4
    K_PATH = 5

cdef tuple _KIND_NAMES = (None, "number", "hex", "token", "identifier", "path")


cdef inline bint _is_word(Py_UCS4 c) noexcept nogil:
    return c < 128 and (_CLASS[c] & F_WORD)


cdef inline int _decide(uint16_t all_flags, uint16_t any_flags, Py_ssize_t length,
                        Py_UCS4 first, Py_ssize_t significant) noexcept nogil:
    """The kind of a trimmed word from the classes all / any of its characters have."""
    if any_flags & F_SLASH:
        return K_PATH if length >= 4 else 0
    if all_flags & F_DIGDOT:
        if any_flags & F_DOT:
            return K_NUMBER
        return K_NUMBER if significant >= 3 else 0
    if length >= 8 and (all_flags & F_TOKEN) and (any_flags & F_DIGIT) and (any_flags & F_LETTER):
        return K_HEX if all_flags & F_HEX else K_TOKEN
    if length >= 10 and (all_flags & F_IDENT) and ((_CLASS[first] & F_LETTER) or first == 95):
        return K_IDENT
    return 0


cdef inline Py_ssize_t _significant(int kind, const void* data, Py_ssize_t s, Py_ssize_t e) noexcept nogil:
    """Digits between the first and last non-zero digit, inclusive (0 when all zeros)."""
    cdef Py_ssize_t first = -1, last = -1, i
    for i in range(s, e):
        if PyUnicode_READ(kind, data, i) != 48:
            if first < 0:
                first = i
            last = i
    return 0 if first < 0 else last - first + 1


cdef inline int _classify(int kind, const void* data, Py_ssize_t s, Py_ssize_t e) noexcept nogil:
    cdef Py_ssize_t i
    cdef uint16_t f, all_flags = 0xFFFF, any_flags = 0
    for i in range(s, e):
        f = _CLASS[PyUnicode_READ(kind, data, i)]  # a word holds ASCII only
        all_flags &= f
        any_flags |= f
    return _decide(all_flags, any_flags, e - s, PyUnicode_READ(kind, data, s),
                   _significant(kind, data, s, e) if all_flags & F_DIGDOT else 0)


cdef inline uint64_t _hash_bytes(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    """Eight bytes per multiply; the low bits (the table index) are mixed at the end."""
    cdef uint64_t h = <uint64_t>0x9E3779B97F4A7C15 ^ <uint64_t>n, w
    while n >= 8:
        memcpy(&w, p, 8)
        h = (h ^ w) * <uint64_t>0xBF58476D1CE4E5B9
        h ^= h >> 31
        p += 8
        n -= 8
    w = 0
    memcpy(&w, p, n)
    h = (h ^ w) * <uint64_t>0x94D049BB133111EB
    h ^= h >> 29
    h *= <uint64_t>0xBF58476D1CE4E5B9
    h ^= h >> 32
    return h if h else 1  # 0 marks an empty table slot


cdef uint64_t _hash(int kind, const void* data, Py_ssize_t s, Py_ssize_t e) noexcept nogil:
    """Hash of an ASCII word, the same whatever the kind of the string holding it."""
    cdef uint8_t small[64]
    cdef uint8_t* buf
    cdef uint64_t h
    cdef Py_ssize_t i, n = e - s
    if kind == 1:
        return _hash_bytes(<const uint8_t*>data + s, n)
    if n <= 64:
        buf = &small[0]
    else:
        buf = <uint8_t*>PyMem_RawMalloc(n)
    if buf == NULL:
        return 1  # never: a word is short; a collision only costs a comparison
    for i in range(n):
        buf[i] = <uint8_t>PyUnicode_READ(kind, data, s + i)
    h = _hash_bytes(buf, n)
    if n > 64:
        PyMem_RawFree(buf)
    return h


cdef inline bint _same(int k1, const void* d1, Py_ssize_t s1,
                       int k2, const void* d2, Py_ssize_t s2, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    if k1 == 1 and k2 == 1:
        return memcmp(<const char*>d1 + s1, <const char*>d2 + s2, n) == 0
    for i in range(n):
        if PyUnicode_READ(k1, d1, s1 + i) != PyUnicode_READ(k2, d2, s2 + i):
            return False
    return True


cdef inline Py_ssize_t _next_word(int kind, const void* data, Py_ssize_t n, Py_ssize_t i,
                                  Py_ssize_t* start, Py_ssize_t* end) noexcept nogil:
    """Find the next trimmed word of 3+ characters at or after ``i``; return where to go on."""
    cdef Py_ssize_t s, e
    cdef Py_UCS4 c
    while i < n:
        while i < n and not _is_word(PyUnicode_READ(kind, data, i)):
            i += 1
        s = i
        while i < n and _is_word(PyUnicode_READ(kind, data, i)):
            i += 1
        e = i
        while s < e:
            c = PyUnicode_READ(kind, data, s)
            if c != 46 and c != 45:
                break
            s += 1
        while e > s:
            c = PyUnicode_READ(kind, data, e - 1)
            if c != 46 and c != 47 and c != 45:
                break
            e -= 1
        if e - s >= 3:
            start[0] = s
            end[0] = e
            return i
    return -1


cdef inline bint _is_ascii_space(Py_UCS4 c) noexcept nogil:
    return c == 32 or (9 <= c <= 13)


cdef class LeakScanner:
    """Incremental leak scan of one episode: ``observe`` what the model saw, ``scan`` what it did."""

    cdef list _texts
    cdef int* _kinds
    cdef const void** _datas
    cdef Py_ssize_t _n_texts, _texts_cap
    cdef uint64_t* _hashes
    cdef Py_ssize_t* _where  # per slot: text index, start, length
    cdef Py_ssize_t _cap, _count
    cdef set _reported
    cdef dict _quoted  # quoted value -> texts already searched without a hit

    def __cinit__(self):
        self._texts = []
        self._reported = set()
        self._quoted = {}
        self._cap = 1024
        self._hashes = <uint64_t*>PyMem_Malloc(self._cap * sizeof(uint64_t))
        self._where = <Py_ssize_t*>PyMem_Malloc(self._cap * 3 * sizeof(Py_ssize_t))
        if self._hashes == NULL or self._where == NULL:
            raise MemoryError()
        cdef Py_ssize_t i
        for i in range(self._cap):
            self._hashes[i] = 0

    def __init__(self, instruction=""):
        self.observe(instruction)

    def __dealloc__(self):
        PyMem_Free(self._hashes)
        PyMem_Free(self._where)
        PyMem_Free(self._kinds)
        PyMem_Free(<void*>self._datas)

    cdef int _grow(self) except -1:
        cdef Py_ssize_t old_cap = self._cap, i, j, mask
        cdef uint64_t* old_h = self._hashes
        cdef Py_ssize_t* old_w = self._where
        cdef uint64_t* new_h = <uint64_t*>PyMem_Malloc(old_cap * 2 * sizeof(uint64_t))
        cdef Py_ssize_t* new_w = <Py_ssize_t*>PyMem_Malloc(old_cap * 6 * sizeof(Py_ssize_t))
        if new_h == NULL or new_w == NULL:
            PyMem_Free(new_h)
            PyMem_Free(new_w)
            raise MemoryError()
        self._cap = old_cap * 2
        mask = self._cap - 1
        for i in range(self._cap):
            new_h[i] = 0
        for i in range(old_cap):
            if old_h[i]:
                j = <Py_ssize_t>(old_h[i] & <uint64_t>mask)
                while new_h[j]:
                    j = (j + 1) & mask
                new_h[j] = old_h[i]
                new_w[3 * j] = old_w[3 * i]
                new_w[3 * j + 1] = old_w[3 * i + 1]
                new_w[3 * j + 2] = old_w[3 * i + 2]
        self._hashes = new_h
        self._where = new_w
        PyMem_Free(old_h)
        PyMem_Free(old_w)
        return 0

    cdef inline Py_ssize_t _find(self, uint64_t h, int kind, const void* data,
                                 Py_ssize_t s, Py_ssize_t n) noexcept:
        """Slot holding this word, or the empty slot where it would go (as ``-1 - slot``)."""
        cdef Py_ssize_t mask = self._cap - 1
        cdef Py_ssize_t j = <Py_ssize_t>(h & <uint64_t>mask)
        cdef Py_ssize_t* w
        while self._hashes[j]:
            if self._hashes[j] == h:
                w = self._where + 3 * j
                if w[2] == n and _same(kind, data, s, self._kinds[w[0]], self._datas[w[0]], w[1], n):
                    return j
            j = (j + 1) & mask
        return -1 - j

    cdef int _add_text(self, str text) except -1:
        cdef int* kinds
        cdef const void** datas
        if self._n_texts == self._texts_cap:
            self._texts_cap = self._texts_cap * 2 + 16
            kinds = <int*>PyMem_Realloc(self._kinds, self._texts_cap * sizeof(int))
            if kinds == NULL:
                raise MemoryError()
            self._kinds = kinds
            datas = <const void**>PyMem_Realloc(<void*>self._datas, self._texts_cap * sizeof(void*))
            if datas == NULL:
                raise MemoryError()
            self._datas = datas
        self._texts.append(text)  # keeps the buffer the table points into alive
        self._kinds[self._n_texts] = PyUnicode_KIND(text)
        self._datas[self._n_texts] = PyUnicode_DATA(text)
        self._n_texts += 1
        return 0

    def observe(self, text):
        """Add text the model has now seen (an observation, the instruction)."""
        if not isinstance(text, str):
            raise TypeError(f"LeakScanner.observe: expected str, got {type(text).__name__}")
        cdef str t = <str>text
        cdef Py_ssize_t n = PyUnicode_GET_LENGTH(t)
        if n == 0:
            return
        self._add_text(t)
        cdef Py_ssize_t tidx = self._n_texts - 1
        cdef int kind = PyUnicode_KIND(t)
        cdef const void* data = PyUnicode_DATA(t)
        cdef Py_ssize_t i = 0, s = 0, e = 0
        if kind == 1:
            self._observe_bytes(<const uint8_t*>data, n, tidx)
            return
        while True:
            i = _next_word(kind, data, n, i, &s, &e)
            if i < 0:
                break
            if _classify(kind, data, s, e):
                self._insert(tidx, kind, data, s, e)

    cdef int _insert(self, Py_ssize_t tidx, int kind, const void* data,
                     Py_ssize_t s, Py_ssize_t e) except -1:
        cdef uint64_t h = _hash(kind, data, s, e)
        cdef Py_ssize_t slot = self._find(h, kind, data, s, e - s)
        if slot >= 0:
            return 0
        slot = -1 - slot
        self._hashes[slot] = h
        self._where[3 * slot] = tidx
        self._where[3 * slot + 1] = s
        self._where[3 * slot + 2] = e - s
        self._count += 1
        if self._count * 2 > self._cap:
            self._grow()
        return 0

    cdef int _observe_word(self, const uint8_t* p, Py_ssize_t s, Py_ssize_t e,
                           Py_ssize_t tidx) except -1:
        while s < e and (p[s] == 46 or p[s] == 45):
            s += 1
        while e > s and (p[e - 1] == 46 or p[e - 1] == 47 or p[e - 1] == 45):
            e -= 1
        if e - s >= 3 and _classify(1, p, s, e):
            self._insert(tidx, 1, p, s, e)
        return 0

    cdef int _observe_bytes(self, const uint8_t* p, Py_ssize_t n, Py_ssize_t tidx) except -1:
        """``observe`` for one-byte strings (nearly every terminal screen), 64 bytes at a time.

        Two bit masks per block (word characters; digits and slashes) find, with shifts
        and bit scans, the only words that can be candidates: those with a digit or a
        slash, or at least 10 characters long. Every other word is never visited, and no
        branch is taken per character.
        """
        cdef Py_ssize_t base = 0, length, i, end, s, e, d
        cdef uint64_t wm, dm, mark, runs, low, inv, one = 1, span
        cdef uint8_t c
        cdef int k
        while base < n:
            length = n - base if n - base < 64 else 64
            if length < 64 or not rsr_masks64(p + base, &wm, &dm):
                wm = 0
                dm = 0
                for i in range(length):
                    c = _BITS[p[base + i]]
                    wm |= <uint64_t>(c & 1) << i
                    dm |= <uint64_t>(c >> 1) << i
            if base + length < n and (wm >> 63):
                # The block ends inside a word: end it before that word instead.
                inv = ~wm
                if inv == 0:
                    # 64 word characters in a row: one long word, walked on its own.
                    end = base + 64
                    while end < n and (_BITS[p[end]] & 1):
                        end += 1
                    self._observe_word(p, base, end, tidx)
                    base = end
                    continue
                length = 64 - rsr_clz64(inv)
                wm &= (one << length) - 1
            dm &= wm
            runs = wm
            for k in range(1, 10):
                runs &= wm >> k  # bit i: characters i to i + 9 are all word characters
            mark = dm | runs
            while mark:
                d = rsr_ctz64(mark)
                low = ~wm & ((one << d) - 1)
                s = 64 - rsr_clz64(low) if low else 0
                inv = ~(wm >> d)
                e = d + (rsr_ctz64(inv) if inv else 64 - d)
                span = (~<uint64_t>0) if e - s >= 64 else (((one << (e - s)) - 1) << s)
                mark &= ~span
                self._observe_word(p, base + s, base + e, tidx)
            base += length
        return 0

    cdef bint _known_word(self, str value):
        cdef int kind = PyUnicode_KIND(value)
        cdef const void* data = PyUnicode_DATA(value)
        cdef Py_ssize_t n = PyUnicode_GET_LENGTH(value)
        if not PyUnicode_IS_ASCII(value):
            return False  # the table holds words, and words are ASCII
        return self._find(_hash(kind, data, 0, n), kind, data, 0, n) >= 0

    cdef bint _known_quoted(self, str value):
        if self._known_word(value):
            return True
        # Texts only grow, so a value not found in the first k texts need only be looked
        # for in the newer ones next time.
        cdef Py_ssize_t searched = self._quoted.get(value, 0), i
        for i in range(searched, self._n_texts):
            if value in <str>self._texts[i]:
                return True
        self._quoted[value] = self._n_texts
        return False

    def scan(self, action, turn=0):
        """Leaks in one action (its keystrokes), first uses only; ``turn`` is copied into each."""
        if not isinstance(action, str):
            raise TypeError(f"LeakScanner.scan: expected str, got {type(action).__name__}")
        if not isinstance(turn, int) or isinstance(turn, bool):
            raise TypeError(f"LeakScanner.scan: turn must be an int, got {type(turn).__name__}")
        cdef str a = <str>action
        cdef Py_ssize_t n = PyUnicode_GET_LENGTH(a)
        cdef int kind = PyUnicode_KIND(a)
        cdef const void* data = PyUnicode_DATA(a)
        cdef Py_ssize_t i = 0, s = 0, e = 0, j, k
        cdef int code
        cdef Py_UCS4 c, q
        cdef bint ok
        cdef list found = []
        cdef list out = []
        cdef str value
        while True:
            i = _next_word(kind, data, n, i, &s, &e)
            if i < 0:
                break
            code = _classify(kind, data, s, e)
            if code and self._find(_hash(kind, data, s, e), kind, data, s, e - s) < 0:
                found.append((s, 0, a[s:e], _KIND_NAMES[code]))
        i = 0
        while i < n:
            q = PyUnicode_READ(kind, data, i)
            if q == 39 or q == 34:
                j = i + 1
                while j < n:
                    c = PyUnicode_READ(kind, data, j)
                    if c == q or c == 10:
                        break
                    j += 1
                if j < n and PyUnicode_READ(kind, data, j) == q:
                    if j - i - 1 >= 4:
                        ok = True
                        for k in range(i + 1, j):
                            if _is_ascii_space(PyUnicode_READ(kind, data, k)):
                                ok = False
                                break
                        if ok:
                            found.append((i + 1, 1, a[i + 1:j], "quoted"))
                    i = j + 1
                    continue
            i += 1
        if not found:
            return out
        found.sort()
        for item in found:
            value = <str>item[2]
            if value in self._reported:
                continue
            if item[1] == 1 and self._known_quoted(value):
                continue
            self._reported.add(value)
            out.append(Leak(value=value, kind=item[3], turn=turn, position=item[0]))
        return out


def scan_leaks(actions, context, *, instruction=""):
    """Leaks of one episode: ``context[i]`` is what was shown just before ``actions[i]``."""
    for name, value in (("actions", actions), ("context", context)):
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise TypeError(
                f"scan_leaks: {name} must be a sequence of str, got {type(value).__name__}"
            )
    if len(actions) != len(context):
        raise ValueError(
            f"scan_leaks: {len(actions)} actions but {len(context)} contexts; "
            "pass one context (possibly empty) per action"
        )
    if not isinstance(instruction, str):
        raise TypeError(f"scan_leaks: instruction must be str, got {type(instruction).__name__}")
    cdef LeakScanner scanner = LeakScanner(instruction)
    cdef list out = []
    cdef Py_ssize_t turn
    for turn in range(len(actions)):
        scanner.observe(context[turn])
        out.extend(scanner.scan(actions[turn], turn))
    return out
