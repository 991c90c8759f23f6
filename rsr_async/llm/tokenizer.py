"""A small deterministic tokenizer for the simulator and the scripted model.

Not a real model's vocabulary: it only has to be deterministic, roughly as coarse as a
BPE tokenizer (about 3 to 4 characters per token on prose), and *prefix-stable* at the
boundaries the chat template produces, so that the radix cache sees the same tokens for
the same prefix. Special tokens (``<|im_start|>``) are one token each. Token ids are a
CRC of the piece, so every process maps the same text to the same ids.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Sequence

__all__ = ["SimTokenizer"]

# Words are cut into runs of at most 4 alphanumerics; whitespace and punctuation are one
# character each, so a token never spans a template boundary (which always sits next to
# a newline or a special token).
_PIECE = re.compile(r"<\|[a-z_]+\|>|[^\W_]{1,4}|\s|[\W_]")


class SimTokenizer:
    """Text to token ids and back (for ids this tokenizer has produced)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._pieces: dict[int, str] = {}

    def _add(self, piece: str) -> int:
        token = zlib.crc32(piece.encode("utf-8", "surrogatepass")) & 0x7FFFFFFF
        self._ids[piece] = token
        self._pieces[token] = piece
        return token

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        ids = self._ids
        return [ids.get(p) or self._add(p) for p in _PIECE.findall(text)]

    def count(self, text: str) -> int:
        """Number of tokens in ``text`` (cheaper than ``len(encode(text))``)."""
        return len(_PIECE.findall(text))

    def pieces(self, text: str) -> list[str]:
        """The text of each token."""
        return _PIECE.findall(text)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ids this tokenizer has seen; unknown ids decode to nothing."""
        pieces = self._pieces
        return "".join(pieces.get(i, "") for i in ids)

    def truncate(self, text: str, max_tokens: int) -> tuple[str, int]:
        """The first ``max_tokens`` tokens of ``text`` as text, and the token count kept."""
        parts: Sequence[str] = _PIECE.findall(text)
        if len(parts) <= max_tokens:
            return text, len(parts)
        return "".join(parts[:max_tokens]), max_tokens
