# cython: language_level=3
"""Command similarity, compiled. Twin: ``similarity_py.py`` (same answers)."""

from cpython.unicode cimport PyUnicode_READ, PyUnicode_KIND, PyUnicode_DATA, PyUnicode_GET_LENGTH
from collections.abc import Sequence

__all__ = ["command_jaccard", "normalize_command"]


cdef inline bint _is_space(Py_UCS4 ch) noexcept:
    # Same set as str.split() with no argument.
    if ch < 128:
        return ch == 32 or (9 <= ch <= 13) or (28 <= ch <= 31)
    return ch == 0x85 or ch == 0xA0 or ch == 0x1680 or (0x2000 <= ch <= 0x200A) \
        or ch == 0x2028 or ch == 0x2029 or ch == 0x202F or ch == 0x205F or ch == 0x3000


cdef str _normalize(str text):
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
    cdef int kind = PyUnicode_KIND(text)
    cdef void* data = PyUnicode_DATA(text)
    cdef Py_ssize_t i = 0, start
    cdef list words = []
    while i < n:
        while i < n and _is_space(PyUnicode_READ(kind, data, i)):
            i += 1
        if i >= n:
            break
        start = i
        while i < n and not _is_space(PyUnicode_READ(kind, data, i)):
            i += 1
        words.append(text[start:i])
    return " ".join(words)


def normalize_command(command):
    """Collapse runs of whitespace to one space and strip both ends (``ls  -l\\n`` → ``ls -l``)."""
    if not isinstance(command, str):
        raise TypeError(f"normalize_command: expected str, got {type(command).__name__}")
    return _normalize(<str>command)


cdef set _command_set(object commands, str name):
    if isinstance(commands, str) or not isinstance(commands, Sequence):
        raise TypeError(f"command_jaccard: {name} must be a sequence of str")
    cdef set out = set()
    cdef str normalized
    for command in commands:
        if not isinstance(command, str):
            raise TypeError(f"command_jaccard: {name} holds a {type(command).__name__}, not str")
        normalized = _normalize(<str>command)
        if normalized:
            out.add(normalized)
    return out


def command_jaccard(a, b):
    """Jaccard index of the sets of normalised, non-empty commands; 1.0 when both are empty."""
    cdef set sa = _command_set(a, "a")
    cdef set sb = _command_set(b, "b")
    if not sa and not sb:
        return 1.0
    return <double>len(sa & sb) / <double>len(sa | sb)
