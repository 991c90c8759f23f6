# cython: language_level=3
"""Trajectory compression, compiled. Twin: ``compress_py.py`` (same answers; rules there).

Each observation is read once through the PEP 393 API. In ASCII text (terminal
screens, nearly always) escape characters are found 64 bytes at a time as a bit mask,
and only the characters that survive (the head and tail, when the observation is cut)
are copied, once, straight into the new string; an unchanged observation is returned as
the same object. Escapes other than the string kinds cannot hold an ESC, so the next
one is found without waiting for the current parse, and CSI runs are measured with byte
class masks. Escape spans go to a buffer kept between calls (a fresh one per call made
glibc trim and refault its heap). Other strings take a generic path (``memchr`` for
one-byte strings). UTF-8 byte counts come from the code points, so nothing is encoded.
Exact ``Message`` records are read, and their private copies written, through their
slots rather than attribute lookups.
"""

from cpython.object cimport PyObject
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.unicode cimport (
    Py_UNICODE_ISSPACE,
    PyUnicode_DATA,
    PyUnicode_GET_LENGTH,
    PyUnicode_KIND,
)
from libc.string cimport memchr, memcpy

import msgspec

from rsr_async._native.records import CompressionReport
from rsr_async.schema import Command, Message, Trajectory

__all__ = ["CompressionReport", "clean_observation", "compress_trajectory"]

cdef extern from "Python.h":
    Py_UCS4 PyUnicode_READ(int kind, const void* data, Py_ssize_t index) nogil
    object PyUnicode_FromKindAndData(int kind, const void* buffer, Py_ssize_t size)
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    int PyUnicode_IS_ASCII(object text)

cdef extern from *:
    """
    #if defined(__SSE2__)
    #include <emmintrin.h>
    #endif
    /* Index of the next ESC at or after i in p[0:n], or n: 16 bytes per compare. */
    static inline Py_ssize_t rsr_find_esc(const unsigned char *p, Py_ssize_t i, Py_ssize_t n) {
    #if defined(__SSE2__)
        const __m128i esc = _mm_set1_epi8(27);
        while (i + 16 <= n) {
            int m = _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + i)), esc));
            if (m) return i + __builtin_ctz(m);
            i += 16;
        }
    #endif
        while (i < n && p[i] != 27) i++;
        return i;
    }

    /* Bit i set when p[i] is ESC, for the 64 bytes at p (all readable). */
    static inline unsigned long long rsr_esc_mask64(const unsigned char *p) {
    #if defined(__SSE2__)
        const __m128i esc = _mm_set1_epi8(27);
        unsigned long long m = 0;
        int k;
        for (k = 0; k < 4; k++)
            m |= (unsigned long long)(unsigned)_mm_movemask_epi8(
                     _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * k)), esc)) << (16 * k);
        return m;
    #else
        unsigned long long m = 0;
        int k;
        for (k = 0; k < 64; k++) m |= (unsigned long long)(p[k] == 27) << k;
        return m;
    #endif
    }

    static inline int rsr_ctz64(unsigned long long x) { return __builtin_ctzll(x); }

    /* Index just past the CSI sequence at p[j] (ESC) p[j + 1] ('['): parameters
       0x30-0x3F*, intermediates 0x20-0x2F*, an optional final 0x40-0x7E. Their lengths
       vary ("ESC[0m", "ESC[01;34m"), so a byte loop mispredicts its exits; here the
       byte classes of the 16 bytes from the ESC are bit masks and each run's end is a
       count of trailing ones, without a branch on the data. */
    static inline Py_ssize_t rsr_skip_csi(const unsigned char *p, Py_ssize_t j, Py_ssize_t n) {
        Py_ssize_t k;
    #if defined(__SSE2__)
        if (j + 16 <= n) {
            const __m128i v = _mm_loadu_si128((const __m128i *)(p + j));
            const __m128i hi = _mm_and_si128(v, _mm_set1_epi8((char)0xF0));
            const unsigned pm = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(hi, _mm_set1_epi8(0x30)));
            const unsigned im = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(hi, _mm_set1_epi8(0x20)));
            const unsigned fm = (unsigned)_mm_movemask_epi8(_mm_and_si128(
                _mm_cmpgt_epi8(v, _mm_set1_epi8(0x3F)), _mm_cmplt_epi8(v, _mm_set1_epi8(0x7F))));
            const unsigned a = 2 + (unsigned)__builtin_ctz(~(pm >> 2));
            if (a < 16) {
                const unsigned b = a + (unsigned)__builtin_ctz(~(im >> a));
                if (b < 16) return j + b + ((fm >> b) & 1);
            }
        }
    #endif
        k = j + 2;
        while (k < n && p[k] >= 0x30 && p[k] <= 0x3F) k++;
        while (k < n && p[k] >= 0x20 && p[k] <= 0x2F) k++;
        if (k < n && p[k] >= 0x40 && p[k] <= 0x7E) k++;
        return k;
    }

    /* memcpy for the short runs between escapes (a few dozen bytes): whole 16-byte
       blocks while both buffers have room past the run (the overshoot is rewritten by
       the next run or lies in slack), so no library call per run. */
    static inline void rsr_copy_run(char *dst, const char *dst_end, const unsigned char *src,
                                    const unsigned char *src_end, Py_ssize_t len) {
        if (len <= 64 && dst + 64 <= dst_end && src + 64 <= src_end) {
            Py_ssize_t k;
            for (k = 0; k < len; k += 16) memcpy(dst + k, src + k, 16);
        } else {
            memcpy(dst, src, (size_t)len);
        }
    }
    """
    Py_ssize_t rsr_find_esc(const unsigned char* p, Py_ssize_t i, Py_ssize_t n) nogil
    unsigned long long rsr_esc_mask64(const unsigned char* p) nogil
    int rsr_ctz64(unsigned long long x) nogil
    Py_ssize_t rsr_skip_csi(const unsigned char* p, Py_ssize_t j, Py_ssize_t n) nogil
    void rsr_copy_run(char* dst, const char* dst_end, const unsigned char* src,
                      const unsigned char* src_end, Py_ssize_t length) nogil

cdef extern from *:
    """
    #include "structmember.h"
    /* Byte offset of the object slot behind member descriptor ``name`` of ``type``, or -1. */
    static Py_ssize_t rsr_slot_offset(PyObject *type, PyObject *name) {
        PyObject *d = PyDict_GetItemWithError(((PyTypeObject *)type)->tp_dict, name);
        PyMemberDef *m;
        if (d == NULL || Py_TYPE(d) != &PyMemberDescr_Type) { PyErr_Clear(); return -1; }
        m = ((PyMemberDescrObject *)d)->d_member;
        return m->type == T_OBJECT_EX ? m->offset : -1;
    }
    /* The object in the slot at ``offset`` (borrowed; NULL when unset). */
    static inline PyObject *rsr_slot(PyObject *o, Py_ssize_t offset) {
        return *(PyObject **)((char *)o + offset);
    }
    /* Store ``value`` in the slot at ``offset`` of a new, private record. */
    static inline void rsr_slot_set(PyObject *o, Py_ssize_t offset, PyObject *value) {
        PyObject **slot = (PyObject **)((char *)o + offset);
        PyObject *old = *slot;
        Py_INCREF(value);
        *slot = value;
        Py_XDECREF(old);
    }
    """
    Py_ssize_t rsr_slot_offset(object type, object name) except? -2
    PyObject* rsr_slot(object o, Py_ssize_t offset)
    void rsr_slot_set(object o, Py_ssize_t offset, object value)

cdef str SAME_MARKER = "[same output as the previous observation]"
cdef const char* _STATEM = b"statem"  # harness.statem.STATEM_COMMAND (tests pin the rule)
cdef object _force_setattr = msgspec.structs.force_setattr
cdef object _struct_copy = Message.__copy__
# Message is a msgspec Struct: its fields are object slots at fixed offsets. For records
# of exactly that type (a subclass could make a field a property) they are read, and set
# on private copies, directly. Message has gc=False (no field can hold a cycle), so a
# slot store needs no GC bookkeeping.
cdef Py_ssize_t _CONTENT = rsr_slot_offset(Message, "content")
cdef Py_ssize_t _ORIGIN = rsr_slot_offset(Message, "origin")
cdef Py_ssize_t _COMMANDS = rsr_slot_offset(Message, "commands")
cdef bint _SLOTS = (
    _CONTENT >= 0 and _ORIGIN >= 0 and _COMMANDS >= 0
    and not Message.__struct_config__.gc and not Message.__struct_config__.cache_hash
)


cdef inline object _field(object message, Py_ssize_t offset, str name):
    cdef PyObject* value
    if _SLOTS and type(message) is Message:
        value = rsr_slot(message, offset)
        if value != NULL:
            return <object>value
    return getattr(message, name)


cdef inline object _with_content(object message, str text):
    """``msgspec.structs.replace(message, content=text)``, for a Message."""
    cdef object copy
    if _SLOTS and type(message) is Message:
        copy = _struct_copy(message)
        rsr_slot_set(copy, _CONTENT, text)
        return copy
    return _replace(message, "content", text)


cdef inline object _replace(object message, str field, object value):
    """``msgspec.structs.replace`` for one field, a little faster: the copy is new and
    private, so setting its field in place is safe though the record is frozen."""
    cdef object copy = message.__copy__()
    _force_setattr(copy, field, value)
    return copy


cdef inline Py_ssize_t _find_esc(int kind, const void* data, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    cdef const void* hit
    if kind == 1:
        if i >= n:
            return n
        hit = memchr(<const char*>data + i, 27, n - i)
        return n if hit == NULL else <const char*>hit - <const char*>data
    while i < n and PyUnicode_READ(kind, data, i) != 27:
        i += 1
    return i


cdef inline Py_ssize_t _skip_escape(int kind, const void* data, Py_ssize_t n, Py_ssize_t j) noexcept nogil:
    """Index just past the escape sequence starting with the ESC at ``j``."""
    cdef Py_ssize_t k = j + 1
    cdef Py_UCS4 c
    if k >= n:
        return n
    c = PyUnicode_READ(kind, data, k)
    if c == 91:  # '[': CSI
        k += 1
        while k < n and 0x30 <= PyUnicode_READ(kind, data, k) <= 0x3F:
            k += 1
        while k < n and 0x20 <= PyUnicode_READ(kind, data, k) <= 0x2F:
            k += 1
        if k < n and 0x40 <= PyUnicode_READ(kind, data, k) <= 0x7E:
            k += 1
        return k
    if c == 93 or c == 80 or c == 88 or c == 94 or c == 95:  # ] P X ^ _: string up to BEL or ST
        k += 1
        while k < n:
            c = PyUnicode_READ(kind, data, k)
            if c == 7:
                return k + 1
            if c == 27 and k + 1 < n and PyUnicode_READ(kind, data, k + 1) == 92:
                return k + 2
            k += 1
        return n
    if 0x20 <= c <= 0x2F:
        k += 1
        while k < n and 0x20 <= PyUnicode_READ(kind, data, k) <= 0x2F:
            k += 1
        if k < n and 0x30 <= PyUnicode_READ(kind, data, k) <= 0x7E:
            k += 1
        return k
    if 0x30 <= c <= 0x7E:
        return k + 1
    return k


cdef inline Py_ssize_t _skip_escape1(const unsigned char* p, Py_ssize_t n, Py_ssize_t j) noexcept nogil:
    """``_skip_escape`` for one-byte text, CSI (colours, nearly every escape) first."""
    if j + 1 < n and p[j + 1] == 91:
        return rsr_skip_csi(p, j, n)
    return _skip_escape(1, p, n, j)


cdef inline bint _is_string_escape(unsigned char c) noexcept nogil:
    return c == 93 or c == 80 or c == 88 or c == 94 or c == 95  # ] P X ^ _


cdef inline Py_ssize_t _char_bytes(Py_UCS4 c) noexcept nogil:
    if c < 0x80:
        return 1
    if c < 0x800:
        return 2
    if c < 0x10000:
        return 3  # surrogates too, as "surrogatepass" writes them
    return 4


cdef inline Py_ssize_t _utf8_span(int kind, const void* data, Py_ssize_t s, Py_ssize_t e) noexcept nogil:
    cdef Py_ssize_t i, total = 0
    for i in range(s, e):
        total += _char_bytes(PyUnicode_READ(kind, data, i))
    return total


cdef inline Py_ssize_t _utf8_len(str text):
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
    if PyUnicode_IS_ASCII(text):
        return n
    return _utf8_span(PyUnicode_KIND(text), PyUnicode_DATA(text), 0, n)


cdef void _copy_stripped(const unsigned char* p, Py_ssize_t n, const Py_ssize_t* spans,
                         Py_ssize_t count, Py_ssize_t k, Py_ssize_t src, Py_ssize_t want,
                         char* dst, const char* dst_end) noexcept nogil:
    """Copy ``want`` characters of the text without its escape ``spans`` (pairs of
    bounds), from ``p[src]``, which lies in kept segment ``k`` (the one before span k)."""
    cdef Py_ssize_t length
    while want > 0:
        length = (spans[2 * k] if k < count else n) - src
        if length > want:
            length = want
        rsr_copy_run(dst, dst_end, p + src, p + n, length)
        dst += length
        want -= length
        if k == count:
            return
        src = spans[2 * k + 1]
        k += 1


# Escape spans of the observation being cleaned, kept between calls (grow-only): an
# observation holds hundreds of escapes, and a fresh buffer per call costs a malloc, a
# free and, once glibc trims its heap, page faults. Only code holding the GIL touches it;
# ``_pool_busy`` sends a re-entrant call (a finaliser run mid-clean) to its own buffer.
cdef Py_ssize_t* _pool = NULL
cdef Py_ssize_t _pool_cap = 0
cdef bint _pool_busy = False


cdef str _clean_ascii(str text, Py_ssize_t max_bytes, bint strip_ansi, Py_ssize_t* escapes,
                      bint* cut):
    """``_clean`` for ASCII text (terminal screens, nearly always): escape spans are found
    first, then only the characters that survive (head and tail, when cut) are copied,
    once, straight into the new string."""
    global _pool, _pool_cap, _pool_busy
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
    cdef const unsigned char* p = <const unsigned char*>PyUnicode_DATA(text)
    cdef Py_ssize_t small[128]
    cdef Py_ssize_t* spans = &small[0]
    cdef Py_ssize_t* grown
    cdef Py_ssize_t capacity = 64, count = 0, removed = 0, j, k, o, head, tail, m
    cdef Py_ssize_t src, pos, seg
    cdef str marker, result
    cdef char* dst
    cdef const char* dst_end
    cdef Py_ssize_t base
    cdef unsigned long long mask
    cdef bint pooled = False
    j = rsr_find_esc(p, 0, n) if strip_ansi else n
    if j == n and (max_bytes <= 0 or n <= max_bytes):
        return text
    if j < n and not _pool_busy:
        if _pool == NULL:
            _pool = <Py_ssize_t*>PyMem_Malloc(1024 * 2 * sizeof(Py_ssize_t))
            if _pool == NULL:
                raise MemoryError()
            _pool_cap = 1024
        _pool_busy = pooled = True
        spans = _pool
        capacity = _pool_cap
    try:
        # ESC positions 64 bytes at a time as a bit mask; each escape sequence is then
        # parsed from its ESC, and the mask bits it covers are dropped.
        base = j
        while base < n:
            if n - base >= 64:
                mask = rsr_esc_mask64(p + base)
            else:
                mask = 0
                for k in range(n - base):
                    if p[base + k] == 27:
                        mask |= (<unsigned long long>1) << k
            while mask:
                j = base + rsr_ctz64(mask)
                k = _skip_escape1(p, n, j)
                if count == capacity:
                    if pooled:
                        grown = <Py_ssize_t*>PyMem_Realloc(_pool, capacity * 4 * sizeof(Py_ssize_t))
                        if grown == NULL:
                            raise MemoryError()
                        _pool = grown
                        _pool_cap = capacity * 2
                    else:
                        grown = <Py_ssize_t*>PyMem_Malloc(capacity * 4 * sizeof(Py_ssize_t))
                        if grown == NULL:
                            raise MemoryError()
                        memcpy(grown, spans, capacity * 2 * sizeof(Py_ssize_t))
                        if spans != &small[0]:
                            PyMem_Free(spans)
                    spans = grown
                    capacity *= 2
                spans[2 * count] = j
                spans[2 * count + 1] = k
                count += 1
                removed += k - j
                mask &= mask - 1
                # Only the string sequences (ESC ] P X ^ _, up to BEL or ESC \) can
                # hold an ESC; every other kind ends at or before the next one. So the
                # next ESC is found without waiting for this one's end, and the CPU
                # parses several escapes at once.
                if j + 1 < n and _is_string_escape(p[j + 1]):
                    if k - base >= 64:
                        break
                    mask &= (~(<unsigned long long>0)) << (k - base)
            else:
                base += 64
                continue
            base = k  # an escape ran past the block: carry on from its end
        escapes[0] += count
        o = n - removed
        if max_bytes > 0 and o > max_bytes:
            head = max_bytes // 2
            tail = max_bytes - head
            marker = f"\n[... {o - head - tail} bytes omitted ...]\n"
            m = PyUnicode_GET_LENGTH(marker)
            result = PyUnicode_New(head + m + tail, 127)
            dst = <char*>PyUnicode_DATA(result)
            dst_end = dst + head + m + tail
            _copy_stripped(p, n, spans, count, 0, 0, head, dst, dst_end)
            memcpy(dst + head, PyUnicode_DATA(marker), m)
            # The tail's first segment, found from the end: the kept segment after
            # span seg starts at stripped character pos.
            seg = count
            src = n
            pos = o
            while seg > 0:
                pos -= src - spans[2 * seg - 1]
                src = spans[2 * seg - 1]
                if pos <= o - tail:
                    break
                src = spans[2 * seg - 2]
                seg -= 1
            else:
                pos -= src
                src = 0
            _copy_stripped(p, n, spans, count, seg, src + (o - tail - pos), tail,
                           dst + head + m, dst_end)
            cut[0] = True
            return result
        if count == 0:
            return text
        result = PyUnicode_New(o, 127)
        dst = <char*>PyUnicode_DATA(result)
        _copy_stripped(p, n, spans, count, 0, 0, o, dst, dst + o)
        return result
    finally:
        if pooled:
            _pool_busy = False
            if _pool_cap > 65536:  # one huge observation should not pin megabytes
                PyMem_Free(_pool)
                _pool = NULL
                _pool_cap = 0
        elif spans != &small[0]:
            PyMem_Free(spans)


cdef str _clean(str text, Py_ssize_t max_bytes, bint strip_ansi, Py_ssize_t* escapes, bint* cut):
    if PyUnicode_IS_ASCII(text):
        return _clean_ascii(text, max_bytes, strip_ansi, escapes, cut)
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
    cdef int kind = PyUnicode_KIND(text)
    cdef const void* data = PyUnicode_DATA(text)
    cdef bint ascii = PyUnicode_IS_ASCII(text)
    cdef Py_ssize_t i = 0, j, o = n, total, budget, hc, hb, tc, tb, w
    cdef char* buf = NULL
    cdef const void* src = data
    j = _find_esc(kind, data, n, 0) if strip_ansi else n
    if j < n:
        buf = <char*>PyMem_Malloc(n * kind)
        if buf == NULL:
            raise MemoryError()
        o = 0
        with nogil:
            while True:
                memcpy(buf + o * kind, <const char*>data + i * kind, (j - i) * kind)
                o += j - i
                if j >= n:
                    break
                i = _skip_escape(kind, data, n, j)
                escapes[0] += 1
                j = _find_esc(kind, data, n, i)
        src = buf
    try:
        if max_bytes > 0 and o * 4 > max_bytes:
            total = o if ascii else _utf8_span(kind, src, 0, o)
            if total > max_bytes:
                budget = max_bytes // 2
                if ascii:
                    hc = hb = budget
                    tc = tb = max_bytes - budget
                else:
                    hc = hb = 0
                    while hc < o:
                        w = _char_bytes(PyUnicode_READ(kind, src, hc))
                        if hb + w > budget:
                            break
                        hb += w
                        hc += 1
                    budget = max_bytes - budget
                    tc = tb = 0
                    while tc < o:
                        w = _char_bytes(PyUnicode_READ(kind, src, o - 1 - tc))
                        if tb + w > budget:
                            break
                        tb += w
                        tc += 1
                cut[0] = True
                return (
                    PyUnicode_FromKindAndData(kind, src, hc)
                    + f"\n[... {total - hb - tb} bytes omitted ...]\n"
                    + PyUnicode_FromKindAndData(kind, <const char*>src + (o - tc) * kind, tc)
                )
        if buf == NULL:
            return text
        return PyUnicode_FromKindAndData(kind, buf, o)
    finally:
        PyMem_Free(buf)


cdef Py_ssize_t _check(object max_observation_bytes, object strip_ansi, str fname) except? -1:
    if not isinstance(max_observation_bytes, int) or isinstance(max_observation_bytes, bool):
        raise TypeError(
            f"{fname}: max_observation_bytes must be an int, "
            f"got {type(max_observation_bytes).__name__}"
        )
    if not isinstance(strip_ansi, bool):
        raise TypeError(f"{fname}: strip_ansi must be a bool, got {type(strip_ansi).__name__}")
    return max_observation_bytes


def clean_observation(text, *, max_bytes=4096, strip_ansi=True):
    """One observation as ``compress_trajectory`` keeps it: escapes removed, middle cut."""
    if not isinstance(text, str):
        raise TypeError(f"clean_observation: expected str, got {type(text).__name__}")
    cdef Py_ssize_t limit = _check(max_bytes, strip_ansi, "clean_observation")
    cdef Py_ssize_t escapes = 0
    cdef bint cut = False
    return _clean(<str>text, limit, strip_ansi, &escapes, &cut)


cdef bint _is_statem(object command, Py_ssize_t index) except -1:
    cdef object keystrokes
    if isinstance(command, Command):
        keystrokes = (<object>command).keystrokes
    else:
        keystrokes = getattr(command, "keystrokes", None)
    if not isinstance(command, Command) or not isinstance(keystrokes, str):
        raise TypeError(
            f"compress_trajectory: messages[{index}].commands holds {command!r}, "
            "not a Command with str keystrokes"
        )
    # ``harness.statem.is_statem_command`` without building strings: ``line =
    # keystrokes.removesuffix("\n").strip()`` is data[i:e]; then no "\n" in it, and it
    # is "statem" or starts with "statem ".
    cdef Py_ssize_t e = PyUnicode_GET_LENGTH(keystrokes), i = 0, t
    cdef int kind = PyUnicode_KIND(keystrokes)
    cdef const void* data = PyUnicode_DATA(keystrokes)
    if e and PyUnicode_READ(kind, data, e - 1) == 10:
        e -= 1
    while i < e and Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, i)):
        i += 1
    while e > i and Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, e - 1)):
        e -= 1
    if e - i < 6:
        return False
    for t in range(6):
        if PyUnicode_READ(kind, data, i + t) != <Py_UCS4>(<unsigned char>_STATEM[t]):
            return False
    if i + 6 < e and PyUnicode_READ(kind, data, i + 6) != 32:
        return False
    for t in range(i + 6, e):
        if PyUnicode_READ(kind, data, t) == 10:
            return False
    return True


def compress_trajectory(trajectory, *, max_observation_bytes=4096, strip_ansi=True,
                        collapse_repeats=True):
    """The trajectory without harness control text, with observations cleaned and cut."""
    if not isinstance(trajectory, Trajectory):
        raise TypeError(
            f"compress_trajectory: expected a Trajectory, got {type(trajectory).__name__}"
        )
    cdef Py_ssize_t limit = _check(max_observation_bytes, strip_ansi, "compress_trajectory")
    if not isinstance(collapse_repeats, bool):
        raise TypeError(
            "compress_trajectory: collapse_repeats must be a bool, "
            f"got {type(collapse_repeats).__name__}"
        )
    cdef bint strip = strip_ansi, collapse = collapse_repeats
    cdef list messages = trajectory.messages
    cdef list kept = []
    cdef list dropped = []
    cdef Py_ssize_t harness = 0, private = 0, statem = 0, statem_commands = 0
    cdef Py_ssize_t collapsed = 0, truncated = 0, escapes = 0, bytes_in = 0, bytes_out = 0
    cdef Py_ssize_t index, n_plain, n_commands
    cdef bint skipping = False, previous_kept_is_it = False, cut
    cdef object message, out, previous = None, commands, plain, c, c2
    cdef str content, origin, text
    for index in range(len(messages)):
        message = messages[index]
        if not isinstance(message, Message):
            raise TypeError(
                f"compress_trajectory: messages[{index}] is a {type(message).__name__}, "
                "not a Message"
            )
        c = _field(message, _CONTENT, "content")
        c2 = _field(message, _ORIGIN, "origin")
        if not isinstance(c, str) or not isinstance(c2, str):
            raise TypeError(
                f"compress_trajectory: messages[{index}] has a "
                f"{type(c).__name__} content and a "
                f"{type(c2).__name__} origin; both must be str"
            )
        content = c
        origin = c2
        bytes_in += _utf8_len(content)
        out = message
        if origin == "harness":
            harness += 1
            out = None
        elif origin == "private":
            private += 1
            out = None
        elif origin == "model":
            commands = _field(message, _COMMANDS, "commands")
            n_commands = len(commands)
            n_plain = 0
            for c in commands:
                n_plain += not _is_statem(c, index)
            plain = commands
            if n_plain != n_commands:
                plain = tuple([c for c in commands if not _is_statem(c, index)])
            if n_commands and not n_plain:
                statem += 1
                skipping = True
                out = None
            else:
                skipping = False
                if n_plain != n_commands:
                    statem_commands += n_commands - n_plain
                    out = _replace(message, "commands", plain)
        elif origin == "env":
            if skipping:
                statem += 1
                out = None
            else:
                cut = False
                text = _clean(content, limit, strip, &escapes, &cut)
                truncated += cut
                if collapse and len(text) and previous is not None and text == previous:
                    collapsed += 1
                    if previous_kept_is_it:
                        out = None
                    else:
                        out = _with_content(message, SAME_MARKER)
                else:
                    previous = text
                    if text is not content:
                        out = _with_content(message, text)
        elif origin == "task" and strip:
            text = _clean(content, 0, True, &escapes, &cut)
            if text is not content:
                out = _with_content(message, text)
        if out is None:
            dropped.append(index)
            continue
        previous_kept_is_it = origin == "env"
        bytes_out += _utf8_len(content if out is message else _field(out, _CONTENT, "content"))
        kept.append(out)
    result = Trajectory(
        task=trajectory.task, harness=trajectory.harness, model=trajectory.model, messages=kept
    )
    report = CompressionReport(
        messages_in=len(messages),
        messages_out=len(kept),
        dropped_harness=harness,
        dropped_private=private,
        dropped_statem=statem,
        statem_commands=statem_commands,
        collapsed=collapsed,
        truncated=truncated,
        ansi_sequences=escapes,
        bytes_in=bytes_in,
        bytes_out=bytes_out,
        dropped=tuple(dropped),
    )
    return result, report
