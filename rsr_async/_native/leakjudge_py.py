"""The leak scan's second pass (rules and constants documented in ``leakrules``): the pure
scanner's, and, compiled, the compiled scanner's.

This file is also compiled as it is, into ``_leakjudge_rules`` (Cython's pure Python mode:
``_leakjudge_rules.pxd`` gives the class, its methods, attributes and hot locals C types;
here they stay plain Python), so the rules below are written once and run both ways.
``leakjudge.pyx`` subclasses that compiled :class:`Judge`, replacing only the methods
marked "kernel" (substring search, the wrapped-value search, the number scan, the
create-word test, the ``computed`` arithmetic) with C over one-byte text. What that
compile asks of this source: no generator expressions (Cython compiles none inside a
typed method; a loop does the same), a method's arguments as the ``.pxd`` declares them,
and a new method declared there too, or it stays a Python-level call. What is written
here costs the compiled scanner too.
"""

import bisect
import posixpath
import re

from rsr_async._native.leakrules import (
    _ABSENT,
    _CREATE_ALL,
    _CREATE_LAST,
    _CREATES,
    _JOIN,
    _NUMBER,
    _NUMBER_CHUNK,
    _OUTPUT_FLAGS,
    _PARTS,
    _PREFIX_WORDS,
    _PROMPT,
    _REDIRECTS,
    _SED_PROGRAM,
    _SEPARATORS,
    _STANDARD,
    _UNITS,
    _URL_PORT,
    EVERYDAY_NUMBERS,
    OPERANDS,
    RULES,
    SandboxKnowledge,
)
from rsr_async.schema import Leak

__all__ = ["Judge"]


def _has_digit(text: str) -> bool:
    for c in text:
        if c.isdigit():
            return True
    return False


def _holds_any(text: str, pieces: list[str]) -> bool:
    """Some of ``pieces`` is a substring of ``text``."""
    for piece in pieces:
        if piece in text:
            return True
    return False


def _inside(position: int, spans: list[tuple[int, int]]) -> bool:
    """``position`` lies strictly inside one of ``spans``."""
    for start, end in spans:
        if start < position < end:
            return True
    return False


def _carries_digits(part: str) -> bool:
    """A part the first pass would weigh: a number with 3+ significant digits (or a dot),
    or a name of 3+ characters holding a digit."""
    if part.replace(".", "").isdigit():
        return "." in part or len(part.strip("0")) >= 3
    return len(part) >= 3 and _has_digit(part)


def _decimals(value: str) -> int:
    return len(value) - value.index(".") - 1 if "." in value else 0


def _within(sorted_values: list[float], target: float, tolerance: float) -> bool:
    """Some value lies strictly within ``tolerance`` of ``target`` (a tie is not a round)."""
    i = bisect.bisect_right(sorted_values, target - tolerance)
    return i < len(sorted_values) and sorted_values[i] < target + tolerance


_SHELL_WORD = re.compile(r"""'[^']*'|"(?:[^"\\]|\\.)*"|&&|\|\||>>|&>|[|;&()<>]|[^\s|;&()<>'"]+""")


def _dirname(path: str) -> str:
    """``posixpath.dirname`` of a str (its code, without ``os.fspath`` and the call)."""
    head = path[:path.rfind("/") + 1]
    if head and head != "/" * len(head):
        head = head.rstrip("/")
    return head


def _shell_words(line: str) -> list[str]:
    """Shell words and operators of one line, quotes removed (a regex, not a parser: a word
    glued to a quoted string comes out as two words, which no rule here minds)."""
    return [w[1:-1] if w[:1] in "'\"" and len(w) >= 2 else w for w in _SHELL_WORD.findall(line)]


class Judge:
    """The second pass for one episode; shares the scanner's list of public texts."""

    __slots__ = ("_absent", "_absent_count", "_created", "_cwd", "_derive", "_numbers",
                 "_operands", "_parts", "_pending", "_sandbox", "_texts")

    def __init__(self, texts: list[str], sandbox: SandboxKnowledge | None, derive: bool = True
                 ) -> None:
        if not isinstance(derive, bool):
            raise TypeError(f"LeakScanner: derive must be a bool, got {type(derive).__name__}")
        self._derive = derive
        if sandbox is not None and not isinstance(sandbox, SandboxKnowledge):
            raise TypeError(
                f"LeakScanner: sandbox must be a SandboxKnowledge, got {type(sandbox).__name__}"
            )
        self._texts = texts  # the scanner appends to it; read, never written here
        self._sandbox = sandbox if sandbox is not None else _STANDARD
        self._created: set[str] = set()
        self._cwd: str | None = None
        # text index -> (where reading stopped, the numbers of text[cut:], newest first)
        self._numbers: dict[int, tuple[int, list[str]]] = {}
        self._operands: tuple[int, list[float], list[float]] = (-1, [], [])
        self._parts: dict[str, int] = {}
        self._absent: list[str] = []  # parts no text holds, while there are _absent_count
        self._absent_count = 0
        self._pending: list[str] = []  # actions whose shell syntax is not read yet

    # -- public text, read lazily: only a candidate ever pays for it ------------------

    def _contains(self, value: str, start: int) -> bool:
        """Kernel: ``value`` is a substring of some text from ``texts[start]`` on."""
        for text in self._texts[start:]:
            if value in text:
                return True
        return False

    def _wrapped_near(self, value: str, piece: str, offset: int) -> bool:
        """Kernel: some text, around one of the first 64 occurrences of ``piece`` (which
        is ``value[offset:]``'s start), holds ``value`` once line wraps are joined."""
        n = len(value)
        for text in self._texts:
            at = text.find(piece)
            hits = 0
            while at >= 0 and hits < 64:
                window = text[max(0, at - offset - 4 * n - 64):at + 4 * n + 64]
                if value in _JOIN.sub("", window):
                    return True
                at = text.find(piece, at + 1)
                hits += 1
        return False

    def _numbers_back(self, text: str, start: int, cut: int) -> list[str]:
        """Kernel: ``_NUMBER.findall(text, start, cut)``, newest first."""
        return _NUMBER.findall(text, start, cut)[::-1]

    def _creates(self, line: str) -> bool:
        """Kernel: ``_CREATES.search(line)`` finds something."""
        return _CREATES.search(line) is not None

    def _computed(self, target: float, rounding: float, exact: float, seen: list[float],
                  with_units: list[float]) -> bool:
        """Kernel: ``target`` is one arithmetic step from the sorted numbers ``seen``
        (``with_units``: the same with the unit constants), within ``rounding`` (the
        typed precision; ``exact`` for sums and differences)."""
        for a in seen:
            if a != target and abs(a - target) < rounding:
                return True  # a, rounded
            if _within(seen, target - a, exact) or _within(seen, a - target, exact):
                return True
        for a in with_units:
            if a in (0.0, 1.0):
                continue
            # a * b, then a as the divisor of b / a and of 100 * b / a
            if (_within(with_units, target / a, rounding / a)
                    or _within(with_units, target * a, rounding * a)
                    or (a != 100.0 and _within(with_units, target * a / 100.0, rounding * a / 100.0))):
                return True
        return False

    def _wrapped(self, value: str) -> bool:
        """``value`` is in some public text, whole or broken by line wraps.

        A break falls in one half of the value at most, so the other half is intact: only
        around its occurrences is the text joined (cheaper than joining every screen). The
        halves are looked for first: a value never shown (the usual case) has neither, and
        then the value itself, which holds both, cannot be whole anywhere either.
        """
        half = len(value) // 2
        shown = [(piece, offset) for piece, offset in ((value[:half], 0), (value[half:], half))
                 if self._seen_part(piece)]
        if len(shown) == 2 and self._seen_part(value):
            return True
        for piece, offset in shown:
            if self._wrapped_near(value, piece, offset):
                return True
        return False

    def _seen_part(self, part: str) -> bool:
        """``part`` is a substring of some public text (memoised as texts only grow).

        A part holding one that no text holds (among the last few found absent, with no
        text added since) is not searched for: no text can hold it either.
        """
        searched = self._parts.get(part, 0)
        if searched < 0:
            return True
        count = len(self._texts)
        if self._absent_count != count:
            self._absent_count, self._absent = count, []
        if not _holds_any(part, self._absent) and self._contains(part, searched):
            self._parts[part] = -1
            return True
        self._parts[part] = count
        self._absent = [*self._absent[-(_ABSENT - 1):], part]
        return False

    def _all_seen(self, parts: list[str]) -> bool:
        """Every one of ``parts`` is in some public text (searched in order, to the first
        that is not)."""
        for part in parts:
            if not self._seen_part(part):
                return False
        return True

    def _working_directory(self) -> str | None:
        if self._cwd is None:
            for text in self._texts:
                match = _PROMPT.search(text) if "@" in text else None
                if match:
                    self._cwd = match.group(1).replace("~", "/root", 1)
                    break
        return self._cwd

    def _seen_numbers(self) -> tuple[list[float], list[float]]:
        """The last distinct numbers in view, and the same with the unit constants.

        Read from the newest text back, only as far as it takes to find enough of them:
        a text is read from its end, :data:`_NUMBER_CHUNK` characters at a time, each
        piece starting at a line start (no number spans a line break, and the pattern's
        look-arounds see a line break as they see the text's edge, so the pieces give
        the numbers the whole text would).
        """
        count = len(self._texts)
        if self._operands[0] == count:
            return self._operands[1], self._operands[2]
        recent: dict[str, None] = {}
        for index in range(count - 1, -1, -1):
            text = self._texts[index]
            cut, numbers = self._numbers.get(index, (len(text), []))
            read = 0
            while True:
                for number in numbers[read:]:  # newest first
                    recent.setdefault(number.lstrip("-"), None)
                read = len(numbers)
                if len(recent) >= OPERANDS or cut == 0:
                    break
                start = text.rfind("\n", 0, max(0, cut - _NUMBER_CHUNK)) + 1
                numbers = numbers + self._numbers_back(text, start, cut)
                cut = start
            self._numbers[index] = (cut, numbers)
            if len(recent) >= OPERANDS:
                break
        values = sorted({float(n) for n in list(recent)[:OPERANDS]})
        self._operands = (count, values, sorted(set(values) | set(_UNITS)))
        return values, self._operands[2]

    # -- the shell syntax of the action ---------------------------------------------

    def _resolve(self, path: str) -> str:
        if path.startswith("~"):
            path = "/root" + path[1:]
        if not path.startswith("/"):
            cwd = self._working_directory()
            if cwd is None:
                return posixpath.normpath(path)
            path = posixpath.join(cwd, path)
        return posixpath.normpath(path)

    def _read_commands(self, action: str) -> None:
        """Learn the paths this action creates and where it ``cd``s to."""
        if not self._creates(action):
            # No line can create a path then: the pattern's words hold no line break, and
            # ``\b`` sees a line's edge as it sees the break beside it.
            return
        for line in action.splitlines():
            if not self._creates(line):
                continue  # nothing here can create a path or change directory
            if "<<" in line and not line.lstrip().startswith(("cat", "tee", "python", "bash")):
                continue
            words = _shell_words(line)
            start = 0
            for i in range(len(words) + 1):
                if i == len(words) or words[i] in _SEPARATORS:
                    self._simple_command(words[start:i])
                    start = i + 1

    def _simple_command(self, words: list[str]) -> None:
        args: list[str] = []
        i = 0
        while i < len(words):
            word = words[i]
            if word in _REDIRECTS or (word in _OUTPUT_FLAGS and args):
                if i + 1 < len(words) and words[i + 1] not in _SEPARATORS:
                    if words[i + 1] not in ("<", "<<", "<<<"):
                        self._created.add(self._resolve(words[i + 1]))
                i += 2
                continue
            if word.startswith("--") and "=" in word:
                flag, _, value = word.partition("=")
                if flag in _OUTPUT_FLAGS and value:
                    self._created.add(self._resolve(value))
            if word in ("<", "<<", "<<<"):
                i += 2
                continue
            if not args and ("=" in word or word in _PREFIX_WORDS):
                i += 1
                continue
            args.append(word)
            i += 1
        if not args:
            return
        command = args[0].rpartition("/")[2]  # posixpath.basename
        operands = [a for a in args[1:] if not a.startswith("-")]
        if command == "cd":
            target = operands[0] if operands else "/root"
            self._cwd = self._resolve(target) if target != "-" else self._cwd
        elif command in _CREATE_ALL:
            made = [self._resolve(a) for a in operands]
            self._created.update(made)
            if command == "mkdir" and ("-p" in args or "--parents" in args):
                for path in made:  # and every parent the image did not have
                    while (path := _dirname(path)) not in ("/", ""):
                        if self._sandbox.holds_path(path):
                            break
                        self._created.add(path)
        elif command in _CREATE_LAST and len(operands) >= 2:
            self._created.add(self._resolve(operands[-1]))
        elif command == "git" and operands[:1] in (["clone"], ["init"]) and len(operands) >= 2:
            self._created.add(self._resolve(operands[-1].removesuffix(".git").rsplit("/", 1)[-1]
                                            if operands[0] == "clone" and len(operands) == 2
                                            else operands[-1]))
        elif command.startswith("python") and operands[:1] == ["venv"] and len(operands) >= 2:
            self._created.add(self._resolve(operands[-1]))
        elif command == "virtualenv" and operands:
            self._created.add(self._resolve(operands[-1]))

    # -- the rules ---------------------------------------------------------------------

    def note(self, action: str) -> None:
        """An action with no candidate: its shell syntax is read only if a later one needs it."""
        self._pending.append(action)

    def _catch_up(self) -> None:
        pending, self._pending = self._pending, []
        for action in pending:
            self._read_commands(action)

    def _own(self, path: str) -> bool:
        probe = path
        while True:
            if probe in self._created:
                return True
            parent = _dirname(probe)
            if parent == probe or not parent:
                return False
            probe = parent

    def _path_rule(self, value: str) -> str | None:
        self._catch_up()
        path = self._resolve(value)
        if self._sandbox.holds_path(path) or self._sandbox.holds_name(value):
            return "sandbox"
        if self._own(path):
            return "own-path"
        # The longest leading directory known to exist (the sandbox's, the agent's own, or
        # one public text named), then only components public text showed.
        parts = [p for p in path.split("/") if p]
        for cut in range(len(parts), -1, -1):
            head = "/" + "/".join(parts[:cut])
            if (cut == 0 or self._sandbox.holds_path(head) or head in self._created
                    or (cut > 1 and self._seen_part(head))):
                if self._all_seen(parts[cut:]):
                    return "path-parts"
                break
        # Last, as the dearest: a search of every screen for the path, whole or wrapped.
        return "wrapped" if len(value) >= 8 and self._wrapped(value) else None

    def _number_rule(self, value: str) -> str | None:
        if value in EVERYDAY_NUMBERS:
            return "everyday"
        if value.count(".") > 1:
            return None  # a version or an address: no arithmetic makes one
        target = float(value)
        # Rounding only where the typed precision allows it; sums and differences of
        # shown numbers are exact (a window of a whole unit would clear too much).
        # An integer must come out exactly: rounding to a whole number would let nearly
        # any count pass as some quotient of the numbers on screen.
        exact = 1e-9 * max(1.0, abs(target))
        decimals = _decimals(value)
        rounding = 0.5 * 10.0 ** -decimals if decimals else exact
        seen, with_units = self._seen_numbers()
        return "computed" if self._computed(target, rounding, exact, seen, with_units) else None

    def _word_rule(self, action: str, position: int, value: str, kind: str) -> str | None:
        before = action[max(0, position - 1):position]
        if kind in ("identifier", "token", "hex") and before == "-":
            return "option"
        if kind == "path":
            return self._path_rule(value)
        if kind == "number":
            return self._number_rule(value)
        if kind == "host":
            return "everyday" if value == "localhost" or self._seen_part(value) else None
        if self._sandbox.holds_name(value):
            return "sandbox"
        if self._wrapped(value):
            return "wrapped"
        if kind == "identifier" and not _has_digit(value):
            # ``KEY=value``, ``key: value``, ``"key": "value"``: a value, which may be data;
            # anywhere else (a call, an import, a grep) a name is vocabulary.
            lead = action[max(0, position - 3):position]
            if not (lead.endswith(("=", ":", "=\"", "='", ": ", ':"', ": \"", ": '"))):
                return "name"
        return None

    def _quoted_flag(self, value: str, judged: dict[str, bool]) -> str | None:
        """The first part of a quoted value that needs a source and has none."""
        part: str
        for part in _PARTS.findall(value):
            if part in judged:
                if judged[part]:
                    return part  # also flagged as a word of its own
                continue
            if not _carries_digits(part):
                continue  # syntax, a keyword, a short count: no data to leak
            if part in EVERYDAY_NUMBERS or self._seen_part(part):
                continue
            if part.isdigit() and self._number_rule(part):
                continue
            return part
        return None

    def _split_syntax(self, action: str, found: list[tuple[int, str, str]]
                      ) -> list[tuple[int, str, str]]:
        """Re-cut path-shaped words the shell syntax says are something else.

        ``host:8080/healthz`` is a port and a URL path; ``http://127.0.0.1`` names a host;
        ``s/old/new/`` in a quoted sed program is pattern text, so its pieces are parts.
        """
        if "path" not in [kind for _, _, kind in found]:
            return found
        programs = ([m.span() for m in _SED_PROGRAM.finditer(action)]
                    if "'" in action or '"' in action else [])  # a program is quoted
        out: list[tuple[int, str, str]] = []
        for position, value, kind in found:
            if kind != "path":
                out.append((position, value, kind))
                continue
            if _inside(position, programs):
                # Pattern text: each piece with a digit must have been shown.
                out.extend([(position + m.start(), m.group(), "number" if m.group()[0].isdigit()
                             else "token") for m in _PARTS.finditer(value)
                            if _carries_digits(m.group())])
                continue
            if action[position - 1:position] == ":" and position >= 1:
                if value.startswith("//"):
                    host, _, rest = value[2:].partition("/")
                    if host:
                        out.append((position + 2, host, "number" if host.replace(".", "").isdigit()
                                    else "host"))
                    if len(rest) >= 3:
                        out.append((position + 2 + len(host), "/" + rest, "path"))
                    continue
                port = _URL_PORT.fullmatch(value)
                if port:
                    if _carries_digits(port.group(1)):
                        out.append((position, port.group(1), "number"))
                    if port.group(2) and len(port.group(2)) >= 4:
                        out.append((position + len(port.group(1)), port.group(2), "path"))
                    continue
            out.append((position, value, kind))
        return out

    def judge(self, action: str, turn: int, found: list[tuple[int, str, str]]) -> list[Leak]:
        """Leaks among first-pass candidates ``(position, value, kind)``, in order."""
        if not self._derive:
            return [self._leak(turn, position, value, kind,
                               "unseen-quoted" if kind == "quoted" else f"unseen-{kind}",
                               f"{kind} {value!r}") for position, value, kind in found]
        self._pending.append(action)
        found = self._split_syntax(action, found)
        judged: dict[str, bool] = {}
        flags: dict[int, tuple[str, str]] = {}
        # Words first, so a quoted string's parts reuse their verdicts.
        for index, (position, value, kind) in enumerate(found):
            if kind != "quoted":
                cleared = self._word_rule(action, position, value, kind)
                judged[value] = cleared is None
                if cleared is None:
                    flags[index] = (f"unseen-{kind}", f"{kind} {value!r}")
        for index, (_position, value, kind) in enumerate(found):
            if kind == "quoted":
                part = self._quoted_flag(value, judged)
                if part is not None:
                    flags[index] = ("unseen-part", f"quoted {value!r}: its part {part!r}")
        return [self._leak(turn, *found[index], *flags[index]) for index in sorted(flags)]

    @staticmethod
    def _leak(turn: int, position: int, value: str, kind: str, rule: str, what: str) -> Leak:
        why = f"{rule}: {what} at turn {turn}, character {position}: {RULES[rule]} before this turn"
        return Leak(value=value, kind=kind, turn=turn, position=position, rule=rule, why=why)
