"""A radix tree over token ids with a capacity and LRU eviction: the simulator's cache.

Same idea as SGLang's RadixCache: a request's prompt is matched against the tree (the
matched length is its ``cached_tokens``), then the prompt plus the generated tokens are
inserted. When the tree holds more tokens than its capacity, least recently used leaves
are evicted first (a leaf's tokens are freed as a unit; a parent becomes a leaf when its
last child goes).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

__all__ = ["RadixCache"]


class _Node:
    __slots__ = ("children", "key", "last_access", "parent")

    def __init__(self, key: list[int], parent: _Node | None, stamp: int) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[int, _Node] = {}
        self.last_access = stamp


def _common(a: Sequence[int], b: Sequence[int], start: int) -> int:
    """Length of the common prefix of ``a`` and ``b[start:]``."""
    n = min(len(a), len(b) - start)
    if a[:n] == b[start : start + n]:
        return n
    i = 0
    while i < n and a[i] == b[start + i]:
        i += 1
    return i


class RadixCache:
    """Prefix cache over token ids, bounded to ``capacity`` tokens."""

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"radix cache capacity must be > 0 tokens, got {capacity}")
        self.capacity = capacity
        self._clock = itertools.count(1)
        self._root = _Node([], None, 0)
        self.size = 0
        """Tokens held now."""
        self.evicted = 0
        """Tokens evicted so far."""

    def match(self, tokens: Sequence[int]) -> int:
        """Length of the longest cached prefix of ``tokens``; touches the matched path."""
        stamp = next(self._clock)
        node = self._root
        pos = 0
        while pos < len(tokens):
            child = node.children.get(tokens[pos])
            if child is None:
                break
            n = _common(child.key, tokens, pos)
            child.last_access = stamp
            pos += n
            if n < len(child.key):
                break
            node = child
        return pos

    def insert(self, tokens: Sequence[int]) -> int:
        """Add ``tokens`` (a prompt plus its output); returns how many were new."""
        stamp = next(self._clock)
        node = self._root
        pos = 0
        added = 0
        while pos < len(tokens):
            child = node.children.get(tokens[pos])
            if child is None:
                new = _Node(list(tokens[pos:]), node, stamp)
                node.children[tokens[pos]] = new
                added = len(tokens) - pos
                break
            n = _common(child.key, tokens, pos)
            child.last_access = stamp
            if n < len(child.key):
                # Split the edge: the shared part becomes an inner node.
                inner = _Node(child.key[:n], node, stamp)
                child.key = child.key[n:]
                child.parent = inner
                inner.children[child.key[0]] = child
                node.children[tokens[pos]] = inner
                node = inner
            else:
                node = child
            pos += n
        self.size += added
        if self.size > self.capacity:
            self._evict(self.size - self.capacity)
        return added

    def _evict(self, need: int) -> None:
        leaves: list[tuple[int, int, _Node]] = []
        tie = itertools.count()
        stack = [self._root]
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            elif node is not self._root:
                leaves.append((node.last_access, next(tie), node))
        heapq.heapify(leaves)
        freed = 0
        while freed < need and leaves:
            _, _, leaf = heapq.heappop(leaves)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.key[0]]
            freed += len(leaf.key)
            if parent is not self._root and not parent.children:
                heapq.heappush(leaves, (parent.last_access, next(tie), parent))
        self.size -= freed
        self.evicted += freed

    def clear(self) -> None:
        """Drop everything (``/flush_cache``)."""
        self._root = _Node([], None, 0)
        self.size = 0
