"""What a terminal does with bytes, without Docker: keystrokes in, clean text and a screen out.

Pure and synchronous, so the shell session's hot path is cheap and these rules are tested
without a container: Terminus keystroke names to pty bytes, ANSI/carriage-return clean-up,
Terminus' head/tail truncation, and :class:`TerminalBuffer`, which holds one shell's
output with bounded memory and finds the prompt marker in it.
"""

from __future__ import annotations

import codecs
import re
import time
from typing import Any

import pyte
from wcwidth import wcwidth

__all__ = [
    "HISTORY_LINES",
    "SCREEN_COLUMNS",
    "SCREEN_LINES",
    "TerminalBuffer",
    "clean_output",
    "decode_control_output",
    "enter_count",
    "new_content",
    "parse_keystrokes",
    "tmux_quote",
    "truncate_output",
]

SCREEN_COLUMNS = 160
SCREEN_LINES = 40
"""The pane size Terminus' tmux sessions use; the pty and the emulated screen agree."""

HISTORY_LINES = 10_000_000
"""The ``history-limit`` Harbor sets, globally and *after* creating its pane, so its own
pane keeps tmux's default of 2000 lines (the option applies to new panes only)."""

_NAMED_KEYS: dict[str, bytes] = {
    "enter": b"\r",
    "escape": b"\x1b",
    "esc": b"\x1b",
    "tab": b"\t",
    "btab": b"\x1b[Z",
    "space": b" ",
    "bspace": b"\x7f",
    "up": b"\x1b[A",
    "down": b"\x1b[B",
    "right": b"\x1b[C",
    "left": b"\x1b[D",
    "home": b"\x1b[H",
    "end": b"\x1b[F",
    "pageup": b"\x1b[5~",
    "pgup": b"\x1b[5~",
    "ppage": b"\x1b[5~",
    "pagedown": b"\x1b[6~",
    "pgdn": b"\x1b[6~",
    "npage": b"\x1b[6~",
    "insert": b"\x1b[2~",
    "ic": b"\x1b[2~",
    "delete": b"\x1b[3~",
    "dc": b"\x1b[3~",
    "f1": b"\x1bOP",
    "f2": b"\x1bOQ",
    "f3": b"\x1bOR",
    "f4": b"\x1bOS",
    "f5": b"\x1b[15~",
    "f6": b"\x1b[17~",
    "f7": b"\x1b[18~",
    "f8": b"\x1b[19~",
    "f9": b"\x1b[20~",
    "f10": b"\x1b[21~",
    "f11": b"\x1b[23~",
    "f12": b"\x1b[24~",
}
_CTRL_SYMBOLS = {"@": 0, "[": 27, "\\": 28, "]": 29, "^": 30, "_": 31, "?": 127, " ": 0}


def _control(char: str) -> bytes | None:
    if len(char) != 1:
        return None
    if char.isascii() and char.isalpha():
        return bytes([ord(char.lower()) - ord("a") + 1])
    code = _CTRL_SYMBOLS.get(char)
    return None if code is None else bytes([code])


def _key(name: str) -> bytes | None:
    """Bytes of one tmux key name (``C-c``, ``M-x``, ``Enter``, ``^D``), or None."""
    if len(name) >= 2 and name[0] == "^":
        return _control(name[1:])
    lowered = name.lower()
    if lowered.startswith("c-") and len(name) > 2:
        return _control(name[2:])
    if lowered.startswith("m-") and len(name) > 2:
        rest = _key(name[2:]) or (name[2:].encode() if len(name) == 3 else None)
        return None if rest is None else b"\x1b" + rest
    return _NAMED_KEYS.get(lowered)


def parse_keystrokes(keys: str) -> bytes:
    """Terminus keystrokes to the bytes a terminal would send.

    As with ``tmux send-keys`` (what Terminus uses), a string that is exactly one key
    name (``C-c``, ``C-d``, ``C-z``, ``Escape``, ``Enter``, ``Up``, ``Tab``, ``M-x``, ``F5``)
    is that key; anything else is literal text, where a newline is the Enter key.
    """
    key = _key(keys) if 0 < len(keys) <= 12 else None
    if key is not None:
        return key
    return keys.replace("\r\n", "\n").replace("\n", "\r").encode("utf-8", errors="replace")


def enter_count(data: bytes) -> int:
    """How many new prompts these keystrokes can produce at most in bash.

    Enter, C-c, C-d and C-z each end a line or a program; the shell session compares
    this with the prompts it sees to return early without a quiet period.
    """
    return sum(data.count(b) for b in (b"\r", b"\n", b"\x03", b"\x04", b"\x1a"))


def tmux_quote(text: str) -> str:
    """``text`` as one double-quoted tmux command argument (a control-mode command is one
    line, so newlines and other controls go as escapes; ``$`` and ``~`` stay literal)."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in '"\\$':
            out.append("\\" + char)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\{code:03o}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def decode_control_output(payload: bytes) -> bytes:
    """The bytes of a control-mode ``%output`` line (tmux writes controls and ``\\`` as
    three-digit octal escapes, everything else raw)."""
    if b"\\" not in payload:
        return payload
    return codecs.escape_decode(payload)[0]


def new_content(previous: str | None, current: str) -> str | None:
    """Harbor's ``TmuxSession._find_new_content``: what is new in a ``capture-pane -S -``
    against the previous capture, or None when the previous one cannot be found in it.

    Kept exactly, quirk included: the cut is made at the offset of the previous
    capture's last newline *within the previous capture*, which is where it sits in
    the current one only while the history has not scrolled out or been cleared.
    """
    pb = "" if previous is None else previous.strip()
    if pb in current:
        idx = current.index(pb)
        if "\n" in pb:
            idx = pb.rfind("\n")
        return current[idx:]
    return None


def truncate_output(text: str, max_bytes: int = 10000) -> str:
    """Terminus 2's rule: over ``max_bytes`` of UTF-8, keep the first and last half.

    The marker names the limit and how many interior bytes were left out, exactly as
    Terminus 2 writes it.
    """
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    half = max_bytes // 2
    head = data[:half].decode("utf-8", errors="ignore")
    tail = data[-half:].decode("utf-8", errors="ignore") if half else ""
    omitted = len(data) - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
    return (
        f"{head}\n[... output limited to {max_bytes} bytes; "
        f"{omitted} interior bytes omitted ...]\n{tail}"
    )


_ESCAPES = re.compile(
    r"""
    \x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?     # OSC (titles, hyperlinks), BEL- or ST-ended
    | \x1b[PX^_][^\x1b]*(?:\x1b\\)?        # DCS, SOS, PM, APC strings
    | \x1b\[[0-?]*[\x20-/]*[@-~]           # CSI: colours, cursor moves, modes
    | \x1b[\x20-/]+[0-~]                   # charset selection and friends
    | \x1b[0-~]                            # two-byte escapes (keypad modes, RI, ...)
    | \x1b$                                # an escape cut at the end
    """,
    re.VERBOSE,
)
# C0 controls a reader never wants, keeping \t \n \r \b for the line rules below.
_CONTROLS = re.compile(r"[\x00-\x07\x0b\x0c\x0e-\x1f\x7f]")
_BACKSPACE = re.compile(r"[^\n\x08]\x08")


def _resolve_line(line: str) -> str:
    """Carriage returns overwrite from column 0, as a terminal would show the line."""
    if "\r" not in line:
        return line
    shown = ""
    for part in line.split("\r"):
        shown = part + shown[len(part) :]
    return shown


def clean_output(text: str) -> str:
    """Raw terminal text as a person would read it in scrollback.

    Escape sequences are removed, backspaces erase, ``\\r`` rewrites the line (progress
    bars keep their last state) and other control bytes are dropped.
    """
    text = _ESCAPES.sub("", text)
    if "\x08" in text:
        while True:
            text, n = _BACKSPACE.subn("", text)
            if not n:
                break
        text = text.replace("\x08", "")
    text = _CONTROLS.sub("", text)
    text = text.replace("\r\n", "\n")
    if "\r" in text:
        text = "\n".join(_resolve_line(line) for line in text.split("\n"))
    return text


class TerminalBuffer:
    """One shell's output: unread text, the emulated screen, and prompt markers.

    Memory stays bounded under a flood: unread output keeps its first ``keep_bytes`` and
    last ``keep_bytes`` (the interior is counted, then dropped), and bytes waiting for
    the screen keep only the most recent ``screen_backlog`` (a screen cannot show more
    than its last lines, so older bytes only matter to full-screen programs, which redraw).

    The prompt marker is an OSC sequence ``ESC ] 777 ; <token> ; <kind><status> BEL`` that
    the shell prints at the end of each prompt; it never reaches the text or the screen.
    """

    def __init__(
        self,
        token: str,
        *,
        columns: int = SCREEN_COLUMNS,
        lines: int = SCREEN_LINES,
        keep_bytes: int = 256 * 1024,
        screen_backlog: int = 256 * 1024,
        keep_text: bool = True,
    ) -> None:
        self._marker = f"\x1b]777;{token};".encode()
        self._carry = b""
        self._head = bytearray()
        self._tail = bytearray()
        self._dropped = 0
        self._keep = keep_bytes
        self._screen_pending = bytearray()
        self._screen_backlog = screen_backlog
        self._keep_text = keep_text
        self._screen_reset = False
        self._screen_text: str | None = None
        self._screen = pyte.Screen(columns, lines)
        self._stream = pyte.ByteStream(self._screen)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.prompts = 0
        """PS1 markers seen so far."""
        self.last_kind = ""
        """Kind of the last marker: ``P`` (PS1, waiting for a command) or ``C`` (PS2)."""
        self.last_status: int | None = None
        """Exit status of the last command, as the last PS1 marker reported it."""
        self.last_jobs = 0
        """Jobs the shell had (``\\j``: running or stopped) at the last PS1 marker."""
        self.markers = 0
        """PS1 and PS2 markers seen so far (each Enter at bash's prompt gives one)."""
        self.printed_since_marker = True
        """True when printable output arrived after the last marker."""
        self.last_output_at = time.monotonic()
        self.total_bytes = 0

    def feed(self, data: bytes) -> None:
        """Take raw bytes from the pty."""
        self.total_bytes += len(data)
        self.last_output_at = time.monotonic()
        data = self._carry + data
        self._carry = b""
        while True:
            start = data.find(self._marker)
            if start < 0:
                break
            end = data.find(b"\x07", start + len(self._marker))
            if end < 0 or end - start > len(self._marker) + 16:
                if end < 0 and len(data) - start <= len(self._marker) + 16:
                    self._carry = data[start:]
                    data = data[:start]
                    break
                # Not a marker of ours after all (cut or forged): keep it as output.
                self._text(data[: start + 1])
                data = data[start + 1 :]
                continue
            self._text(data[:start])
            body = data[start + len(self._marker) : end].decode("ascii", errors="replace")
            self._mark(body)
            data = data[end + 1 :]
        if not self._carry:
            # A marker may be cut at the chunk's end: hold back a possible prefix of it.
            cut = data.rfind(b"\x1b", max(0, len(data) - len(self._marker)))
            if cut >= 0 and self._marker.startswith(data[cut:]):
                self._carry = data[cut:]
                data = data[:cut]
        self._text(data)

    def _mark(self, body: str) -> None:
        kind = body[:1]
        status, _, jobs = body[1:].partition(";")
        self.last_kind = kind
        self.printed_since_marker = False
        self.markers += 1
        if kind == "P":
            self.prompts += 1
            self.last_status = int(status) if status.isdigit() else None
            self.last_jobs = int(jobs) if jobs.isdigit() else 0

    def _text(self, data: bytes) -> None:
        if not data:
            return
        if not self.printed_since_marker and _printable(data):
            self.printed_since_marker = True
        if not self._keep_text:
            return
        self._pend_screen(data)
        if self._dropped == 0 and len(self._head) < self._keep:
            room = self._keep - len(self._head)
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            if len(self._tail) > 2 * self._keep:
                excess = len(self._tail) - self._keep
                self._dropped += excess
                del self._tail[:excess]

    def _pend_screen(self, data: bytes) -> None:
        pending = self._screen_pending
        pending += data
        if len(pending) > 2 * self._screen_backlog:
            del pending[: len(pending) - self._screen_backlog]
            self._screen_reset = True

    def take_text(self) -> str:
        """Cleaned output since the last call (the interior of a flood is summarised)."""
        head = self._decoder.decode(bytes(self._head))
        text = clean_output(head)
        if self._dropped:
            tail_text = clean_output(bytes(self._tail).decode("utf-8", errors="replace"))
            text = (
                f"{text}\n[... {self._dropped} bytes of output not kept ...]\n{tail_text}"
            )
            self._decoder.reset()
        elif self._tail:
            text += clean_output(self._decoder.decode(bytes(self._tail)))
        self._head.clear()
        self._tail.clear()
        self._dropped = 0
        return text

    def has_text(self) -> bool:
        """Whether output arrived since the last :meth:`take_text`."""
        return bool(self._head or self._tail or self._dropped)

    def screen(self) -> str:
        """The emulated screen: its lines, trailing blanks removed (cached until new output)."""
        if self._screen_text is not None and not self._screen_pending and not self._screen_reset:
            return self._screen_text
        if self._screen_reset:
            self._screen.reset()
            self._screen_reset = False
        if self._screen_pending:
            self._stream.feed(bytes(self._screen_pending))
            self._screen_pending.clear()
        rows = [row.rstrip() for row in render_screen(self._screen)]
        while rows and not rows[-1]:
            rows.pop()
        self._screen_text = "\n".join(rows)
        return self._screen_text


_WIDE_FROM = "\u1100"
"""The lowest code point wcwidth can call double-width: rows below it need no width check."""


def render_screen(screen: pyte.Screen) -> list[str]:
    """``screen.display``, without its per-cell ``wcwidth`` calls (an order of magnitude
    faster on the usual ASCII screen; rows that may hold wide characters take pyte's path).
    """
    columns = screen.columns
    blank = " " * columns
    out: list[str] = []
    for y in range(screen.lines):
        line = screen.buffer.get(y)  # .get: the buffer is a defaultdict; do not grow it
        if not line:
            out.append(blank)
            continue
        cells = [" "] * columns
        for x, char in line.items():
            if 0 <= x < columns:
                cells[x] = char.data
        text = "".join(cells)
        if text and max(text) >= _WIDE_FROM:
            text = _render_wide(line, columns)
        out.append(text)
    return out


def _render_wide(line: Any, columns: int) -> str:
    # pyte's own rule: the cell after a double-width character is a stub and is skipped.
    parts: list[str] = []
    skip = False
    for x in range(columns):
        if skip:
            skip = False
            continue
        data = line[x].data
        skip = bool(data) and wcwidth(data[0]) == 2
        parts.append(data)
    return "".join(parts)


def _printable(data: bytes) -> bool:
    """Whether ``data`` shows anything (not only escape sequences)."""
    text = data.decode("utf-8", errors="replace")
    return bool(clean_output(text).strip())
