# cython: language_level=3
"""Leak scanning, compiled. Twin: ``leakscan_py.py`` (same answers; the rules are there).

A known text is not read when it is observed. An episode asks about few distinct words
(an action's word is known, and then remembered, or unknown, and then reported and never
asked about again), so a lookup searches the texts not indexed yet for the word (newest
first; one-byte text 16 or 64 starts a step, SIMD on the needle's two rarest bytes) and
checks that the occurrence is a whole trimmed word there. A text searched in vain
:data:`_INDEX_AFTER` times is indexed: read once through the PEP 393 API, one-byte text
classified 64 bytes at a time (AVX-512BW compares straight to bit masks where the CPU has
them, SSE2 otherwise), so words that cannot be candidates are skipped without being
visited. Candidate words, and every word a search found, go into an open-addressing table
whose entries point back into their text (plus their first and last 8 bytes inline), so
no Python string is made for a known word. A lookup compares characters on a hash match:
the answer is exact, never probabilistic. A text equal to the one before it (a screen
that did not change) is not kept again.
"""

from cpython.mem cimport PyMem_Calloc, PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.unicode cimport PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_KIND
from libc.stdint cimport int32_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memchr, memcmp, memcpy, memset

cimport cython

from collections.abc import Sequence

from rsr_async._native.leakjudge import Judge
from rsr_async._native.leakrules import SandboxKnowledge

cdef extern from "Python.h":
    # A macro over the string's own buffer: safe without the GIL while the string lives.
    Py_UCS4 PyUnicode_READ(int kind, const void* data, Py_ssize_t index) nogil
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

cdef extern from *:
    """
    /* rsr_find.h (above) brings stdint, string and the SIMD intrinsics. */
    static inline int rsr_ctz64(unsigned long long x) { return __builtin_ctzll(x); }
    static inline int rsr_clz64(unsigned long long x) { return __builtin_clzll(x); }

    /* Character classes of up to 64 bytes as bit masks: bit i describes p[i]. */
    typedef struct {
        uint64_t word, digit, zero, letter, hex, slash, dot, dash, plus, under;
    } rsr_masks;

    static inline void rsr_masks_scalar(const uint8_t *p, int length, rsr_masks *m) {
        int i;
        uint64_t b;
        uint8_t c, lower;
        m->word = m->digit = m->zero = m->letter = m->hex = 0;
        m->slash = m->dot = m->dash = m->plus = m->under = 0;
        for (i = 0; i < length; i++) {
            c = p[i];
            b = (uint64_t)1 << i;
            lower = c | 0x20;
            if (c >= '0' && c <= '9') { m->digit |= b; if (c == '0') m->zero |= b; }
            else if (lower >= 'a' && lower <= 'z') { m->letter |= b; if (lower <= 'f') m->hex |= b; }
            else if (c == '/') m->slash |= b;
            else if (c == '.') m->dot |= b;
            else if (c == '-') m->dash |= b;
            else if (c == '+') m->plus |= b;
            else if (c == '_') m->under |= b;
            else if (c != '~') continue;
            m->word |= b;
        }
    }

    #ifdef RSR_WIDE_SIMD
    /* AVX-512BW: one 64-byte load, each class one or two compares straight to a mask. */
    __attribute__((target("avx512bw")))
    static void rsr_masks64_avx512(const uint8_t *p, rsr_masks *m) {
        __m512i c = _mm512_loadu_si512((const void *)p);
        __m512i lower = _mm512_or_si512(c, _mm512_set1_epi8(0x20));
        __m512i from_a = _mm512_sub_epi8(lower, _mm512_set1_epi8('a'));
        uint64_t digit = _mm512_cmple_epu8_mask(_mm512_sub_epi8(c, _mm512_set1_epi8('0')),
                                                _mm512_set1_epi8(9));
        uint64_t letter = _mm512_cmple_epu8_mask(from_a, _mm512_set1_epi8(25));
        m->digit = digit;
        m->letter = letter;
        m->hex = letter & _mm512_cmple_epu8_mask(from_a, _mm512_set1_epi8(5));
        m->zero = _mm512_cmpeq_epi8_mask(c, _mm512_set1_epi8('0'));
        m->slash = _mm512_cmpeq_epi8_mask(c, _mm512_set1_epi8('/'));
        m->dot = _mm512_cmpeq_epi8_mask(c, _mm512_set1_epi8('.'));
        m->dash = _mm512_cmpeq_epi8_mask(c, _mm512_set1_epi8('-'));
        m->plus = _mm512_cmpeq_epi8_mask(c, _mm512_set1_epi8('+'));
        m->under = _mm512_cmpeq_epi8_mask(c, _mm512_set1_epi8('_'));
        m->word = digit | letter | m->slash | m->dot | m->dash | m->plus | m->under
                  | _mm512_cmpeq_epi8_mask(c, _mm512_set1_epi8('~'));
    }
    #endif

    /* AVX-512BW where the CPU has it, else SSE2 where there is one (16 bytes per step):
       no table, no branch per byte. */
    static inline void rsr_masks64(const uint8_t *p, int length, rsr_masks *m) {
    #ifdef RSR_WIDE_SIMD
        if (length == 64) {
            if (rsr_simd_level < 0) rsr_simd_level = rsr_cpu_level();
            if (rsr_simd_level == 2) {
                rsr_masks64_avx512(p, m);
                return;
            }
        }
    #endif
    #if defined(__SSE2__)
        if (length == 64) {
            int k;
            uint64_t sh;
            m->word = m->digit = m->zero = m->letter = m->hex = 0;
            m->slash = m->dot = m->dash = m->plus = m->under = 0;
            for (k = 0; k < 4; k++) {
                __m128i c = _mm_loadu_si128((const __m128i *)(p + 16 * k));
                /* Signed compares: bytes >= 0x80 are negative, so in no range. */
                __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(c, _mm_set1_epi8('0' - 1)),
                                              _mm_cmplt_epi8(c, _mm_set1_epi8('9' + 1)));
                __m128i lower = _mm_or_si128(c, _mm_set1_epi8(0x20));
                __m128i above_a = _mm_cmpgt_epi8(lower, _mm_set1_epi8('a' - 1));
                __m128i letter = _mm_and_si128(above_a, _mm_cmplt_epi8(lower, _mm_set1_epi8('z' + 1)));
                __m128i hex = _mm_and_si128(above_a, _mm_cmplt_epi8(lower, _mm_set1_epi8('f' + 1)));
                __m128i slash = _mm_cmpeq_epi8(c, _mm_set1_epi8('/'));
                __m128i dot = _mm_cmpeq_epi8(c, _mm_set1_epi8('.'));
                __m128i dash = _mm_cmpeq_epi8(c, _mm_set1_epi8('-'));
                __m128i plus = _mm_cmpeq_epi8(c, _mm_set1_epi8('+'));
                __m128i under = _mm_cmpeq_epi8(c, _mm_set1_epi8('_'));
                __m128i tilde = _mm_cmpeq_epi8(c, _mm_set1_epi8('~'));
                __m128i zero = _mm_cmpeq_epi8(c, _mm_set1_epi8('0'));
                __m128i word = _mm_or_si128(
                    _mm_or_si128(_mm_or_si128(digit, letter), _mm_or_si128(slash, dot)),
                    _mm_or_si128(_mm_or_si128(dash, plus), _mm_or_si128(under, tilde)));
                sh = 16 * k;
                m->word |= (uint64_t)(uint16_t)_mm_movemask_epi8(word) << sh;
                m->digit |= (uint64_t)(uint16_t)_mm_movemask_epi8(digit) << sh;
                m->zero |= (uint64_t)(uint16_t)_mm_movemask_epi8(zero) << sh;
                m->letter |= (uint64_t)(uint16_t)_mm_movemask_epi8(letter) << sh;
                m->hex |= (uint64_t)(uint16_t)_mm_movemask_epi8(hex) << sh;
                m->slash |= (uint64_t)(uint16_t)_mm_movemask_epi8(slash) << sh;
                m->dot |= (uint64_t)(uint16_t)_mm_movemask_epi8(dot) << sh;
                m->dash |= (uint64_t)(uint16_t)_mm_movemask_epi8(dash) << sh;
                m->plus |= (uint64_t)(uint16_t)_mm_movemask_epi8(plus) << sh;
                m->under |= (uint64_t)(uint16_t)_mm_movemask_epi8(under) << sh;
            }
            return;
        }
    #endif
        rsr_masks_scalar(p, length, m);
    }

    """
    ctypedef struct rsr_masks:
        uint64_t word, digit, zero, letter, hex, slash, dot, dash, plus, under
    int rsr_ctz64(unsigned long long x) nogil
    int rsr_clz64(unsigned long long x) nogil
    void rsr_masks64(const uint8_t* p, int length, rsr_masks* m) nogil

__all__ = ["LeakScanner", "SandboxKnowledge", "scan_leaks"]

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
    # The tail by fixed-size loads (overlapping is fine: the length is in the seed), so
    # no variable-size copy stalls the load that follows it.
    cdef uint32_t lo, hi
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
    return h if h else 1  # 0 marks an empty table slot


cdef inline uint64_t _hash_short(uint64_t head, uint64_t tail, Py_ssize_t n) noexcept nogil:
    """Hash of a word of up to 16 bytes from its head and tail words (which hold all of it)."""
    cdef uint64_t h = (head ^ <uint64_t>0x9E3779B97F4A7C15 ^ <uint64_t>n) * <uint64_t>0xBF58476D1CE4E5B9
    h = (h ^ (h >> 31) ^ tail) * <uint64_t>0x94D049BB133111EB
    h ^= h >> 29
    h *= <uint64_t>0xBF58476D1CE4E5B9
    h ^= h >> 32
    return h if h else 1  # 0 marks an empty table slot


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


rsr_rank_init()


def _rank_table():
    """Tests only: the byte-rarity table this module searches with (256 bytes)."""
    return bytes([rsr_rank[c] for c in range(256)])


cdef inline bint _contains_bytes(const uint8_t* hay, Py_ssize_t n, const uint8_t* needle,
                                 Py_ssize_t m, Py_ssize_t rare) noexcept nogil:
    """Substring test in one-byte text: ``memchr`` (vectorised) for the rarest needle byte,
    then a compare around each hit."""
    cdef Py_ssize_t i = rare
    cdef const uint8_t* hit
    if m == 0:
        return True
    if m > n:
        return False
    while i <= n - m + rare:
        hit = <const uint8_t*>memchr(hay + i, needle[rare], n - m + rare + 1 - i)
        if hit == NULL:
            return False
        i = hit - hay
        if memcmp(hay + i - rare, needle, m) == 0:
            return True
        i += 1
    return False


cdef inline bint _whole_at(int kind, const void* data, Py_ssize_t n, Py_ssize_t p,
                           Py_ssize_t m) noexcept nogil:
    """The trimmed word around the occurrence ``data[p:p + m]`` of a trimmed word is that
    occurrence: the run of word characters it lies in has only ``.``/``-`` before it and
    only ``.``/``/``/``-`` after it (what the trimming strips)."""
    cdef Py_ssize_t i = p
    cdef Py_UCS4 c
    while i > 0:
        c = PyUnicode_READ(kind, data, i - 1)
        if not _is_word(c):
            break
        if c != 46 and c != 45:
            return False
        i -= 1
    i = p + m
    while i < n:
        c = PyUnicode_READ(kind, data, i)
        if not _is_word(c):
            break
        if c != 46 and c != 47 and c != 45:
            return False
        i += 1
    return True


cdef inline Py_ssize_t _find_word(int kind, const void* data, Py_ssize_t n,
                                  const uint8_t* needle, Py_ssize_t m, Py_ssize_t r1,
                                  Py_ssize_t r2) noexcept nogil:
    """Where the trimmed ASCII word ``needle`` is a whole trimmed word of the text, or -1."""
    cdef Py_ssize_t at = 0, j
    if m <= 0:
        return -1
    if kind == 1:
        at = rsr_find(<const uint8_t*>data, n, needle, m, r1, r2, 0)
        while at >= 0:
            if _whole_at(1, data, n, at, m):
                return at
            at = rsr_find(<const uint8_t*>data, n, needle, m, r1, r2, at + 1)
        return -1
    while at <= n - m:
        for j in range(m):
            if PyUnicode_READ(kind, data, at + j) != needle[j]:
                break
        else:
            if _whole_at(kind, data, n, at, m):
                return at
        at += 1
    return -1


cdef inline bint _is_ascii_space(Py_UCS4 c) noexcept nogil:
    return c == 32 or (9 <= c <= 13)


cdef struct _Entry:
    Py_ssize_t start
    int32_t text
    int32_t length
    uint64_t head  # the first 8 bytes (zero-padded) ...
    uint64_t tail  # ... and the last 8 (0 when shorter): a word of up to 16 bytes is
                   # compared without touching its text


cdef inline void _head_tail(const uint8_t* b, Py_ssize_t n, uint64_t* head, uint64_t* tail) noexcept nogil:
    cdef uint64_t w = 0
    cdef uint32_t lo, hi
    cdef Py_ssize_t i
    if n >= 8:
        memcpy(&w, b, 8)
        head[0] = w
        memcpy(&w, b + n - 8, 8)
        tail[0] = w
    else:
        # Fixed-size loads (overlapping when n < 8) rather than a copy of variable size.
        tail[0] = 0
        if n >= 4:
            memcpy(&lo, b, 4)
            memcpy(&hi, b + n - 4, 4)
            head[0] = <uint64_t>lo | (<uint64_t>hi << (8 * (n - 4)))
        else:
            for i in range(n):
                w |= <uint64_t>b[i] << (8 * i)
            head[0] = w


# One finished scanner's tables, kept for the next (every access holds the GIL).
# Bounded: tables over 2**_SPARE_MAX_BITS slots are freed, not kept.
cdef uint64_t* _spare_slots = NULL
cdef _Entry* _spare_entries = NULL
cdef Py_ssize_t _spare_bits = 0
cdef Py_ssize_t _SPARE_MAX_BITS = 18

# A text is indexed (its candidate words put in the table) once this many lookups have
# searched it in vain. Reading a text into the table costs about as much as a few dozen
# searches of it, and an episode asks about few distinct words (each action word at most
# once: known ones are remembered, unknown ones are reported), so most screens are never
# indexed; one searched again and again is, so the cost stays within twice the cheaper.
cdef Py_ssize_t _INDEX_AFTER = 24


@cython.final
cdef class LeakScanner:
    """Incremental leak scan of one episode: ``observe`` what the model saw, ``scan`` what it did."""

    cdef list _texts
    cdef int* _kinds
    cdef const void** _datas
    cdef Py_ssize_t* _lengths
    cdef int32_t* _searched  # lookups that searched the text in vain; -1: indexed
    cdef Py_ssize_t _n_texts, _texts_cap
    # The known words: open addressing over 8-byte slots (high half: the hash's top 32
    # bits; low half: entry number + 1, 0 for empty), entries appended in order. Small,
    # so an episode's table stays in cache; every entry points back into its text.
    cdef uint64_t* _slots
    cdef _Entry* _entries
    cdef Py_ssize_t _cap, _bits, _count, _entries_cap
    cdef set _reported
    cdef dict _quoted  # quoted value -> texts searched without a hit; -1: known
    cdef object _judge  # the second pass: leakjudge.Judge, the compiled twin of leakjudge_py.Judge

    def __cinit__(self):
        global _spare_slots, _spare_entries, _spare_bits
        self._texts = []
        self._reported = set()
        self._quoted = {}
        if _spare_slots != NULL:
            # The last scanner's tables: no fresh pages to fault in, no regrowing from
            # small for every episode.
            self._bits = _spare_bits
            self._cap = 1 << self._bits
            self._slots = _spare_slots
            self._entries = _spare_entries
            _spare_slots = NULL
            _spare_entries = NULL
            memset(self._slots, 0, self._cap * sizeof(uint64_t))
        else:
            self._bits = 12
            self._cap = 1 << self._bits
            self._slots = <uint64_t*>PyMem_Calloc(self._cap, sizeof(uint64_t))
            self._entries = <_Entry*>PyMem_Malloc((self._cap // 2 + 1) * sizeof(_Entry))
        self._entries_cap = self._cap // 2 + 1
        if self._slots == NULL or self._entries == NULL:
            raise MemoryError()

    def __init__(self, instruction="", *, sandbox=None, derive=True):
        self._judge = Judge(self._texts, sandbox, derive)
        self.observe(instruction)

    def __dealloc__(self):
        global _spare_slots, _spare_entries, _spare_bits
        if self._slots != NULL and self._entries != NULL and self._bits <= _SPARE_MAX_BITS and (
            _spare_slots == NULL or _spare_bits < self._bits
        ):
            PyMem_Free(_spare_slots)
            PyMem_Free(_spare_entries)
            _spare_slots = self._slots
            _spare_entries = self._entries
            _spare_bits = self._bits
        else:
            PyMem_Free(self._slots)
            PyMem_Free(self._entries)
        PyMem_Free(self._kinds)
        PyMem_Free(<void*>self._datas)
        PyMem_Free(self._lengths)
        PyMem_Free(self._searched)

    cdef int _grow(self) except -1:
        cdef Py_ssize_t old_cap = self._cap, i, j, mask
        cdef uint64_t* old = self._slots
        cdef uint64_t* slots = <uint64_t*>PyMem_Calloc(old_cap * 2, sizeof(uint64_t))
        cdef _Entry* entries = <_Entry*>PyMem_Realloc(self._entries, (old_cap + 1) * sizeof(_Entry))
        if entries != NULL:
            self._entries = entries
            self._entries_cap = old_cap + 1
        if slots == NULL or entries == NULL:
            PyMem_Free(slots)
            raise MemoryError()
        self._bits += 1
        self._cap = old_cap * 2
        mask = self._cap - 1
        for i in range(old_cap):
            if old[i]:
                j = <Py_ssize_t>((old[i] >> 32) >> (32 - self._bits))
                while slots[j]:
                    j = (j + 1) & mask
                slots[j] = old[i]
        self._slots = slots
        PyMem_Free(old)
        return 0

    cdef inline Py_ssize_t _find(self, uint64_t h, uint64_t head, uint64_t tail, int kind,
                                 const void* data, Py_ssize_t s, Py_ssize_t n) noexcept:
        """Slot holding this word, or the empty slot where it would go (as ``-1 - slot``)."""
        cdef Py_ssize_t mask = self._cap - 1
        cdef uint64_t tag = h >> 32, slot
        cdef Py_ssize_t j = <Py_ssize_t>(tag >> (32 - self._bits))
        cdef _Entry* entry
        while True:
            slot = self._slots[j]
            if slot == 0:
                return -1 - j
            if (slot >> 32) == tag:
                entry = self._entries + <Py_ssize_t>((slot & <uint64_t>0xFFFFFFFF) - 1)
                if (entry.length == n and entry.head == head and entry.tail == tail
                        and (n <= 16 or _same(kind, data, s, self._kinds[entry.text],
                                              self._datas[entry.text], entry.start, n))):
                    return j
            j = (j + 1) & mask

    cdef inline int _lookup(self, int kind, const void* data, Py_ssize_t s, Py_ssize_t e,
                     Py_ssize_t insert_from) except -1:
        """1 when the ASCII word ``data[s:e]`` is known, else 0; with ``insert_from`` >= 0
        an unknown word is added, pointing into that text."""
        cdef uint8_t small[64]
        cdef uint8_t* b
        cdef Py_ssize_t n = e - s, i, slot
        cdef uint64_t h, head, tail
        cdef _Entry* entry
        if kind == 1:
            b = <uint8_t*>data + s
        else:
            b = &small[0] if n <= 64 else <uint8_t*>PyMem_Malloc(n)
            if b == NULL:
                raise MemoryError()
            for i in range(n):
                b[i] = <uint8_t>PyUnicode_READ(kind, data, s + i)
        _head_tail(b, n, &head, &tail)
        h = _hash_short(head, tail, n) if n <= 16 else _hash_bytes(b, n)
        if kind != 1 and n > 64:
            PyMem_Free(b)
        slot = self._find(h, head, tail, kind, data, s, n)
        if slot >= 0:
            return 1
        if insert_from < 0:
            return 0
        slot = -1 - slot
        if self._count >= self._entries_cap:
            raise MemoryError()  # only after a failed _grow: never write past the entries
        entry = self._entries + self._count
        entry.start = s
        entry.text = <int32_t>insert_from
        entry.length = <int32_t>n
        entry.head = head
        entry.tail = tail
        self._count += 1
        self._slots[slot] = ((h >> 32) << 32) | <uint64_t>self._count
        if self._count * 2 > self._cap:
            self._grow()
        return 0

    cdef int _add_text(self, str text) except -1:
        cdef int* kinds
        cdef const void** datas
        cdef Py_ssize_t* lengths
        cdef int32_t* searched
        cdef Py_ssize_t cap
        if self._n_texts == self._texts_cap:
            # The capacity is raised only once all four arrays hold it: after a failed
            # allocation the scanner stays consistent (a bigger array is harmless).
            cap = self._texts_cap * 2 + 16
            kinds = <int*>PyMem_Realloc(self._kinds, cap * sizeof(int))
            if kinds == NULL:
                raise MemoryError()
            self._kinds = kinds
            datas = <const void**>PyMem_Realloc(<void*>self._datas, cap * sizeof(void*))
            if datas == NULL:
                raise MemoryError()
            self._datas = datas
            lengths = <Py_ssize_t*>PyMem_Realloc(self._lengths, cap * sizeof(Py_ssize_t))
            if lengths == NULL:
                raise MemoryError()
            self._lengths = lengths
            searched = <int32_t*>PyMem_Realloc(self._searched, cap * sizeof(int32_t))
            if searched == NULL:
                raise MemoryError()
            self._searched = searched
            self._texts_cap = cap
        self._texts.append(text)  # keeps the buffer the table points into alive
        self._kinds[self._n_texts] = PyUnicode_KIND(text)
        self._datas[self._n_texts] = PyUnicode_DATA(text)
        self._lengths[self._n_texts] = PyUnicode_GET_LENGTH(text)
        self._searched[self._n_texts] = 0
        self._n_texts += 1
        return 0

    cdef int _index(self, Py_ssize_t tidx) except -1:
        """Put every candidate word of text ``tidx`` in the table."""
        cdef int kind = self._kinds[tidx]
        cdef const void* data = self._datas[tidx]
        cdef Py_ssize_t n = self._lengths[tidx], i = 0, s = 0, e = 0
        self._searched[tidx] = -1
        if kind == 1:
            self._observe_bytes(<const uint8_t*>data, n, tidx)
            return 0
        while True:
            i = _next_word(kind, data, n, i, &s, &e)
            if i < 0:
                break
            if _classify(kind, data, s, e):
                self._insert(tidx, kind, data, s, e)
        return 0

    cdef int _known_at(self, int kind, const void* data, Py_ssize_t s, Py_ssize_t e) except -1:
        """1 when the candidate word ``data[s:e]`` is known: in the table, or a whole word
        of a text not indexed yet (then it goes in the table: known once, known for good)."""
        cdef uint8_t small[64]
        cdef uint8_t* b
        cdef Py_ssize_t m = e - s, i, at, r1, r2
        if self._lookup(kind, data, s, e, -1):
            return 1
        if kind == 1:
            b = <uint8_t*>data + s
        else:
            b = &small[0] if m <= 64 else <uint8_t*>PyMem_Malloc(m)
            if b == NULL:
                raise MemoryError()
            for i in range(m):
                b[i] = <uint8_t>PyUnicode_READ(kind, data, s + i)
        rsr_rare_pair(b, m, &r1, &r2)
        at = -1
        i = self._n_texts - 1
        try:
            while i >= 0:  # the newest first: a word in use was most likely shown lately
                if self._searched[i] >= 0:
                    at = _find_word(self._kinds[i], self._datas[i], self._lengths[i], b, m,
                                    r1, r2)
                    if at >= 0:
                        break
                    self._searched[i] += 1
                    if self._searched[i] >= _INDEX_AFTER:
                        self._index(i)
                i -= 1
        finally:
            if kind != 1 and m > 64:
                PyMem_Free(b)
        if at < 0:
            return 0
        self._lookup(self._kinds[i], self._datas[i], at, at + m, i)
        return 1

    def observe(self, text):
        """Add text the model has now seen (an observation, the instruction)."""
        if not isinstance(text, str):
            raise TypeError(f"LeakScanner.observe: expected str, got {type(text).__name__}")
        cdef str t = <str>text
        cdef Py_ssize_t n = PyUnicode_GET_LENGTH(t)
        if n == 0:
            return
        if self._n_texts and t == <str>self._texts[self._n_texts - 1]:
            return  # the screen did not change: nothing new to know
        self._add_text(t)
        if _INDEX_AFTER == 0:
            self._index(self._n_texts - 1)

    cdef inline int _insert(self, Py_ssize_t tidx, int kind, const void* data,
                            Py_ssize_t s, Py_ssize_t e) except -1:
        self._lookup(kind, data, s, e, tidx)
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

        Character classes come as bit masks per block, so finding words, rejecting the
        ones that cannot be candidates (no digit, no slash, under 10 characters),
        trimming and classifying are shifts and bit scans: no branch per character, and
        only candidates are ever looked at byte by byte (to hash them).
        """
        cdef Py_ssize_t base = 0, length, end, s, e, d, s2, e2, size
        cdef uint64_t wm, mark, runs, low, inv, one = 1, full = ~(<uint64_t>0)
        cdef uint64_t span, x, y, nz, lead, trail, r3, short
        cdef rsr_masks m
        cdef int code
        while base < n:
            length = n - base if n - base < 64 else 64
            rsr_masks64(p + base, <int>length, &m)
            wm = m.word
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
            r3 = wm & (wm >> 1) & (wm >> 2)  # bit i: characters i to i + 2 are word characters
            runs = r3 & (r3 >> 3) & (r3 >> 6) & (wm >> 9)  # ... and i to i + 9
            # Words of one or two characters can never be candidates (digits though they
            # hold, like the 32 of an escape sequence): drop them here, before the loop
            # that walks marked words one at a time.
            short = wm & ~(wm << 1) & ~r3
            short |= (short << 1) & wm
            mark = (((m.digit | m.slash) & wm) | runs) & ~short
            lead = m.dot | m.dash
            trail = lead | m.slash
            while mark:
                d = rsr_ctz64(mark)
                low = ~wm & ((one << d) - 1)
                s = 64 - rsr_clz64(low) if low else 0
                inv = ~(wm >> d)
                e = d + (rsr_ctz64(inv) if inv else 64 - d)
                if e - s >= 64:
                    self._observe_word(p, base, base + 64, tidx)
                    break
                span = ((one << (e - s)) - 1) << s
                mark &= ~span
                x = span & ~lead
                if x == 0:
                    continue
                s2 = rsr_ctz64(x)
                y = span & ~trail & (full << s2)
                if y == 0:
                    continue
                e2 = 64 - rsr_clz64(y)
                size = e2 - s2
                if size < 3:
                    continue
                span = ((one << size) - 1) << s2
                code = 0
                if span & m.slash:
                    code = K_PATH if size >= 4 else 0
                elif span & ~(m.digit | m.dot) == 0:
                    if span & m.dot:
                        code = K_NUMBER
                    else:
                        nz = span & ~m.zero
                        if nz and (63 - rsr_clz64(nz)) - rsr_ctz64(nz) + 1 >= 3:
                            code = K_NUMBER
                elif (size >= 8 and span & ~(m.digit | m.letter | m.plus | m.under | m.dash) == 0
                        and span & m.digit and span & m.letter):
                    code = K_HEX if span & ~(m.digit | m.hex) == 0 else K_TOKEN
                elif (size >= 10 and span & ~(m.digit | m.letter | m.under | m.dot | m.dash) == 0
                        and ((m.letter | m.under) >> s2) & 1):
                    code = K_IDENT
                if code:
                    self._insert(tidx, 1, p, base + s2, base + e2)
            base += length
        return 0

    cdef bint _known_word(self, str value):
        cdef int kind = PyUnicode_KIND(value)
        cdef const void* data = PyUnicode_DATA(value)
        cdef Py_ssize_t n = PyUnicode_GET_LENGTH(value)
        if not PyUnicode_IS_ASCII(value):
            return False  # the table holds words, and words are ASCII
        return self._lookup(kind, data, 0, n, -1) == 1

    cdef bint _known_quoted(self, str value):
        # Texts only grow: a value found once stays known (-1), and one not found in the
        # first k texts need only be looked for in the newer ones next time.
        cdef Py_ssize_t searched = self._quoted.get(value, 0), i
        if searched < 0:
            return True
        if self._known_word(value):
            self._quoted[value] = -1
            return True
        cdef int kind = PyUnicode_KIND(value)
        cdef const uint8_t* needle = <const uint8_t*>PyUnicode_DATA(value)
        cdef Py_ssize_t m = PyUnicode_GET_LENGTH(value), rare = 0
        if kind == 1:
            rare = rsr_rarest(needle, m)
        for i in range(searched, self._n_texts):
            if kind == 1 and self._kinds[i] == 1:
                if _contains_bytes(<const uint8_t*>self._datas[i],
                                   PyUnicode_GET_LENGTH(<str>self._texts[i]), needle, m, rare):
                    self._quoted[value] = -1
                    return True
            elif value in <str>self._texts[i]:
                self._quoted[value] = -1
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
            if code == 0 or self._lookup(kind, data, s, e, -1):
                continue
            value = a[s:e]
            # A reported value is skipped anyway: no text need be searched for it.
            if value in self._reported or self._known_at(kind, data, s, e):
                continue
            found.append((s, 0, value, _KIND_NAMES[code]))
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
            self._judge.note(a)
            return out
        found.sort()
        for item in found:
            value = <str>item[2]
            if value in self._reported:
                continue
            if item[1] == 1 and self._known_quoted(value):
                continue
            self._reported.add(value)
            out.append((item[0], value, item[3]))
        if not out:
            self._judge.note(a)
            return out
        return self._judge.judge(a, turn, out)


def _index_after(searches=None):
    """Tests only: index a text once ``searches`` lookups searched it in vain (0: as soon
    as it is observed, a large number: never); ``None`` restores the default."""
    global _INDEX_AFTER
    _INDEX_AFTER = 24 if searches is None else int(searches)


def _simd(level=None):
    """Tests only: the widest SIMD to use, at most what the CPU has: 0 SSE2, 1 AVX2 (the
    character masks stay on SSE2 below AVX-512BW), 2 AVX-512BW, ``None`` the CPU's best
    (so every path is checked against the twin)."""
    global rsr_simd_level
    rsr_simd_level = rsr_cpu_level() if level is None else min(int(level), rsr_cpu_level())


def scan_leaks(actions, context, *, instruction="", sandbox=None):
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
    cdef LeakScanner scanner = LeakScanner(instruction, sandbox=sandbox)
    cdef list out = []
    cdef Py_ssize_t turn
    for turn in range(len(actions)):
        scanner.observe(context[turn])
        out.extend(scanner.scan(actions[turn], turn))
    return out
