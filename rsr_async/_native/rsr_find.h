/* Substring search on one-byte text, shared by leakscan.pyx and leakjudge.pyx.

   rsr_find(hay, n, needle, m, r1, r2, from): the first start >= from where needle[0:m]
   occurs in hay[0:n], or -1 (an empty needle is found at `from` when from <= n). r1 and
   r2 are two offsets into the needle, its rarest bytes (the caller ranks them): a start
   is compared in full only when both of those bytes match, and 16 starts (32 with AVX2,
   64 with AVX-512BW) are tested per step.

   The widest path the CPU has is chosen at run time (per-function `target` attributes),
   so the build flags stay portable. Each including module has its own copy of
   `rsr_simd_level`, which its tests may lower to check every path against the twin. */
#ifndef RSR_FIND_H
#define RSR_FIND_H

#include <stdint.h>
#include <string.h>
#include <Python.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__GNUC__) && defined(__x86_64__)
#define RSR_WIDE_SIMD 1
#include <immintrin.h>
#endif

/* hay[0:m] == needle[0:m]: the first and last 4 bytes first (most starts that pass the
   two-byte test fail there), with no call. */
static inline int rsr_same(const uint8_t *hay, const uint8_t *needle, Py_ssize_t m) {
    uint32_t x, y;
    if (m < 4) return memcmp(hay, needle, (size_t)m) == 0;
    memcpy(&x, hay, 4);
    memcpy(&y, needle, 4);
    if (x != y) return 0;
    memcpy(&x, hay + m - 4, 4);
    memcpy(&y, needle + m - 4, 4);
    if (x != y) return 0;
    return m <= 8 || memcmp(hay + 4, needle + 4, (size_t)(m - 8)) == 0;
}

static inline Py_ssize_t rsr_find_tail(const uint8_t *hay, Py_ssize_t last,
                                       const uint8_t *needle, Py_ssize_t m,
                                       Py_ssize_t r1, Py_ssize_t r2, Py_ssize_t s) {
    for (; s <= last; s++) {
        if (hay[s + r1] == needle[r1] && hay[s + r2] == needle[r2] && rsr_same(hay + s, needle, m))
            return s;
    }
    return -1;
}

static Py_ssize_t rsr_find_sse2(const uint8_t *hay, Py_ssize_t n, const uint8_t *needle,
                                Py_ssize_t m, Py_ssize_t r1, Py_ssize_t r2, Py_ssize_t s) {
    Py_ssize_t last = n - m;
#if defined(__SSE2__)
    __m128i b1 = _mm_set1_epi8((char)needle[r1]), b2 = _mm_set1_epi8((char)needle[r2]);
    while (s + 15 <= last) {
        __m128i x = _mm_loadu_si128((const __m128i *)(hay + s + r1));
        __m128i y = _mm_loadu_si128((const __m128i *)(hay + s + r2));
        unsigned mask = (unsigned)_mm_movemask_epi8(
            _mm_and_si128(_mm_cmpeq_epi8(x, b1), _mm_cmpeq_epi8(y, b2)));
        while (mask) {
            int k = __builtin_ctz(mask);
            if (rsr_same(hay + s + k, needle, m)) return s + k;
            mask &= mask - 1;
        }
        s += 16;
    }
#endif
    return rsr_find_tail(hay, last, needle, m, r1, r2, s);
}

#ifdef RSR_WIDE_SIMD
__attribute__((target("avx2")))
static Py_ssize_t rsr_find_avx2(const uint8_t *hay, Py_ssize_t n, const uint8_t *needle,
                                Py_ssize_t m, Py_ssize_t r1, Py_ssize_t r2, Py_ssize_t s) {
    Py_ssize_t last = n - m;
    __m256i b1 = _mm256_set1_epi8((char)needle[r1]), b2 = _mm256_set1_epi8((char)needle[r2]);
    while (s + 31 <= last) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(hay + s + r1));
        __m256i y = _mm256_loadu_si256((const __m256i *)(hay + s + r2));
        unsigned mask = (unsigned)_mm256_movemask_epi8(
            _mm256_and_si256(_mm256_cmpeq_epi8(x, b1), _mm256_cmpeq_epi8(y, b2)));
        while (mask) {
            int k = __builtin_ctz(mask);
            if (rsr_same(hay + s + k, needle, m)) return s + k;
            mask &= mask - 1;
        }
        s += 32;
    }
    return rsr_find_tail(hay, last, needle, m, r1, r2, s);
}

__attribute__((target("avx512bw")))
static Py_ssize_t rsr_find_avx512(const uint8_t *hay, Py_ssize_t n, const uint8_t *needle,
                                  Py_ssize_t m, Py_ssize_t r1, Py_ssize_t r2, Py_ssize_t s) {
    Py_ssize_t last = n - m;
    __m512i b1 = _mm512_set1_epi8((char)needle[r1]), b2 = _mm512_set1_epi8((char)needle[r2]);
    while (s + 63 <= last) {
        uint64_t mask = _mm512_cmpeq_epi8_mask(_mm512_loadu_si512(hay + s + r1), b1)
                        & _mm512_cmpeq_epi8_mask(_mm512_loadu_si512(hay + s + r2), b2);
        while (mask) {
            int k = __builtin_ctzll(mask);
            if (rsr_same(hay + s + k, needle, m)) return s + k;
            mask &= mask - 1;
        }
        s += 64;
    }
    return rsr_find_tail(hay, last, needle, m, r1, r2, s);
}
#endif

/* The widest search the CPU has: 2 AVX-512BW, 1 AVX2, 0 SSE2. */
static int rsr_cpu_level(void) {
#ifdef RSR_WIDE_SIMD
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bw") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
#else
    return 0;
#endif
}

/* The level in use: -1 until the first search asks the CPU. */
static int rsr_simd_level = -1;

static Py_ssize_t rsr_find(const uint8_t *hay, Py_ssize_t n, const uint8_t *needle,
                           Py_ssize_t m, Py_ssize_t r1, Py_ssize_t r2, Py_ssize_t from) {
    if (m <= 0) return m == 0 && from <= n ? from : -1;
    if (from > n - m) return -1;
#ifdef RSR_WIDE_SIMD
    if (rsr_simd_level < 0) rsr_simd_level = rsr_cpu_level();
    if (rsr_simd_level == 2) return rsr_find_avx512(hay, n, needle, m, r1, r2, from);
    if (rsr_simd_level == 1) return rsr_find_avx2(hay, n, needle, m, r1, r2, from);
#endif
    return rsr_find_sse2(hay, n, needle, m, r1, r2, from);
}

/* How common a byte is in terminal text (higher: commoner), so a caller searches for a
   needle's rarest bytes. The one table of both compiled passes (each including module
   fills its own copy with rsr_rank_init()). RSR_COMMON_BYTES is most common first, as
   counted on the labelled leak corpus's screens and bench native's: digits are as common
   there as the middle of the alphabet, and `tests/native/test_leakscan.py` checks the
   order against those counts. Then capitals; then other printable bytes; control bytes
   and non-ASCII rarest. */
static const char RSR_COMMON_BYTES[] = " etoasrin1l0dcu-2m/3p:.h_4b6g5f8y7w9kv=xjqz\n";
static uint8_t rsr_rank[256];

static void rsr_rank_init(void) {
    const Py_ssize_t n = (Py_ssize_t)sizeof(RSR_COMMON_BYTES) - 1;
    Py_ssize_t k;
    int c;
    for (c = 0; c < 256; c++) rsr_rank[c] = (c < 32 || c >= 127) ? 0 : 1;
    for (c = 'A'; c <= 'Z'; c++) rsr_rank[c] = 2;
    for (k = 0; k < n; k++) rsr_rank[(uint8_t)RSR_COMMON_BYTES[k]] = (uint8_t)(3 + (n - k) * 4);
}

/* Offset of the needle's rarest byte (the first of equals). */
static inline Py_ssize_t rsr_rarest(const uint8_t *needle, Py_ssize_t m) {
    Py_ssize_t i, best = 0;
    for (i = 1; i < m; i++)
        if (rsr_rank[needle[i]] < rsr_rank[needle[best]]) best = i;
    return best;
}

/* Offsets of the needle's two rarest bytes (the same one twice when it has only one). */
static inline void rsr_rare_pair(const uint8_t *needle, Py_ssize_t m, Py_ssize_t *r1,
                                 Py_ssize_t *r2) {
    Py_ssize_t i, best = 0, second = -1;
    for (i = 1; i < m; i++) {
        if (rsr_rank[needle[i]] < rsr_rank[needle[best]]) {
            second = best;
            best = i;
        } else if (second < 0 || rsr_rank[needle[i]] < rsr_rank[needle[second]]) {
            second = i;
        }
    }
    *r1 = best;
    *r2 = second >= 0 ? second : best;
}

#endif /* RSR_FIND_H */
