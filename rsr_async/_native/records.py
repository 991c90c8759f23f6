"""Records the native functions return, shared by the compiled modules and their twins."""

from __future__ import annotations

import msgspec

__all__ = ["CompressionReport"]


class CompressionReport(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What ``compress_trajectory`` removed or shortened, and how much text is left."""

    messages_in: int
    messages_out: int
    dropped_harness: int = 0
    """Harness control messages (origin ``harness``): confirmations, retries, parse errors."""
    dropped_private: int = 0
    """Private guidance (origin ``private``): never shown to a deployed model."""
    dropped_statem: int = 0
    """Model turns whose every command was a ``statem`` command, plus their observations."""
    statem_commands: int = 0
    """``statem`` commands taken out of model turns that also ran other commands."""
    collapsed: int = 0
    """Observations equal to the previous one: dropped when adjacent, else a short marker."""
    truncated: int = 0
    """Observations cut to their head and tail."""
    ansi_sequences: int = 0
    """Terminal escape sequences removed from task and observation text."""
    bytes_in: int = 0
    """UTF-8 bytes of every message's content before compression."""
    bytes_out: int = 0
    """UTF-8 bytes of every kept message's content after compression."""
    dropped: tuple[int, ...] = ()
    """Indexes (in the input) of the messages removed."""
