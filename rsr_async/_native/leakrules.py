"""The second pass of the leak scan: is an unseen literal still derivable?

The first pass (``leakscan.pyx`` or its twin) finds candidates no public text contains as
a word. Most of those are no leak at all on ordinary terminal work: a path the model
typed before listing it, ``755``, ``sha256sum``, a sed program. This pass clears a
candidate when one of these rules holds, and names the rule that flagged it otherwise.
It runs only on first-pass candidates, so its cost is per flag, not per byte of output.
:class:`Judge` here is the pure twin's; ``leakjudge.pyx`` is its compiled twin (the
compiled scanner's), same verdicts, checked against each other by the tests; the rules'
constants and :class:`SandboxKnowledge` are shared by both.

Rules that clear a candidate (each has a test in ``tests/native/test_leakscan.py``):

``sandbox``
    The value is a name the sandbox holds: a command on the base image's ``PATH``, a
    standard-library module (or ``module.attribute``), a directory or ``/etc`` file of the
    base image (``sandbox_base.py``, recorded from the image by
    ``scripts/record_base_names.py``), or a path the caller knows is in the task image
    (:class:`SandboxKnowledge`), or anything under ``/proc``, ``/sys``, ``/dev``, ``/tmp``.
``own-path``
    A path the agent creates (``mkdir``, ``touch``, ``tee``, the target of ``>``/``>>``,
    the last operand of ``cp``/``mv``/``ln``/``install``, ``-o``/``--output``, ``git clone
    URL DIR``, ``python3 -m venv DIR``), or one under such a path, in this turn or earlier.
    Relative paths are resolved against the working directory (the prompt, then ``cd``).
``path-parts``
    A path whose longest known leading directory (the sandbox's, the agent's own, or one
    public text named) is followed only by components public text showed:
    ``/var/log/app/error.log`` after ``ls /var/log/app`` printed ``error.log``.
``wrapped``
    A value of 8+ characters (not a number) found in public text once line breaks, with
    the spaces, ``\\`` continuation marks and table borders around them, are removed: a
    hash wrapped by the terminal, a key split across cells of a one-column table. Being a
    substring there also covers an abbreviated commit id.
``everyday``
    A number in :data:`EVERYDAY_NUMBERS`: file modes, powers of two, well-known ports and
    HTTP codes, time units, round fractions, loopback addresses, common versions.
``computed``
    A number that is one arithmetic step from numbers in view: ``a + b``, ``a - b``,
    ``a * b``, ``a / b``, ``100 * a / b`` or ``a`` rounded, at the typed precision, with
    ``a``, ``b`` among the last :data:`OPERANDS` distinct numbers public text showed (and,
    for products and quotients, a few unit constants: 60, 100, 1000, 1024 …). Sums and
    differences must be exact.
``option``
    A name right after ``-`` or ``--``: a flag of the command, vocabulary.
``name``
    An identifier with no digit (``load_config``, ``defaultdict``): a name a programmer
    writes from convention, unless it is given as a value (right after ``=`` or ``:``).
``quoted-parts``
    A quoted string is tokenised at shell, sed, awk and regex syntax instead of taken
    whole; it is flagged only when a part with a digit (``w0rd`` in ``'p@ss!w0rd'``) was
    never shown. Parts that are candidates themselves are judged as words.
"""

from __future__ import annotations

import bisect
import posixpath
import re
from collections.abc import Iterable

from ..schema import Leak
from .sandbox_base import COMMANDS, MODULES, PATHS

__all__ = ["EVERYDAY_NUMBERS", "OPERANDS", "RULES", "Judge", "SandboxKnowledge"]

RULES: dict[str, str] = {
    "unseen-path": "a path that no public text showed, that the sandbox does not hold and "
    "that the agent did not create",
    "unseen-number": "a number that no public text showed, not an everyday constant and not "
    "one arithmetic step from numbers in view",
    "unseen-hex": "a hex string that no public text showed, whole or wrapped",
    "unseen-token": "a letters-and-digits token that no public text showed, whole or wrapped, "
    "and that is no command or module of the sandbox",
    "unseen-identifier": "a long name with digits, or a name given as a value, that no public "
    "text showed",
    "unseen-part": "a quoted string with a part holding a digit that no public text showed",
    "unseen-host": "a URL's host name that no public text showed",
    "unseen-quoted": "a quoted string that no public text contains (first pass only)",
}
"""What each flag's ``Leak.rule`` means: the test the value failed."""

EVERYDAY_NUMBERS: frozenset[str] = frozenset(
    # file modes
    "400 440 444 500 550 555 600 640 644 660 664 666 700 711 750 755 770 775 777 "
    "0400 0440 0444 0500 0550 0555 0600 0640 0644 0660 0664 0666 0700 0711 0750 0755 "
    "0770 0775 0777 1777 2755 2775 4755 "
    # powers of two
    "128 256 512 1024 2048 4096 8192 16384 32768 65535 65536 "
    # well-known ports
    "443 993 995 1080 1433 1521 2049 2375 2376 3000 3306 4000 4443 5000 5432 5672 5900 "
    "6379 6443 8000 8008 8080 8081 8443 8888 9000 9090 9092 9200 9300 11211 15672 27017 "
    # HTTP status codes
    "101 201 202 204 206 301 302 303 304 307 308 401 403 404 405 406 408 409 410 413 415 "
    "418 422 429 501 502 503 504 "
    # time units
    "1440 3600 86400 604800 "
    # round fractions and floats
    "0.0 0.001 0.01 0.05 0.1 0.2 0.25 0.3 0.5 0.75 0.8 0.9 0.95 0.99 1.0 1.5 2.0 2.5 3.0 "
    "5.0 10.0 100.0 3.14 3.1416 3.14159 2.718 2.71828 "
    # addresses
    "0.0.0.0 127.0.0.1 127.0.1.1 255.255.255.0 255.255.255.255 "
    # versions everyone types
    "2.7 3.8 3.9 3.10 3.11 3.12 3.13 0.1.0 1.0.0 2.0.0 1.1 1.2 2.1 1.0.1".split()
)
"""The allow-list of everyday constants: values a competent engineer types from memory."""

OPERANDS = 48
"""How many distinct recent numbers of public text the ``computed`` rule combines."""

_UNITS = (2.0, 3.0, 4.0, 5.0, 7.0, 8.0, 10.0, 12.0, 24.0, 60.0, 100.0, 1000.0, 1024.0, 3600.0)
_VIRTUAL = ("/proc/", "/sys/", "/dev/", "/tmp/", "/run/")
# Debian's merged /usr: these are links, which a directory listing of the image omits.
_ROOT_LINKS = frozenset({"/", "/tmp", "/bin", "/sbin", "/lib", "/lib64", "/usr/bin", "/usr/sbin"})
_BIN_DIRS = frozenset({"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin",
                       "/usr/local/sbin"})
_URL_PORT = re.compile(r"(\d{1,5})(/.*)?")
_SED_PROGRAM = re.compile(r"""(['"])(?:\d+(?:,\d+)?)?[sy]([/|#:,@]).*?\1""")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")
_NUMBER_CHUNK = 2048  # characters of a text the ``computed`` rule reads at a time, from its end
_ABSENT = 8  # parts found in no text that a search first checks a new part for
# Parts of a quoted string: a name (letters first, digits allowed: ``w0rd``, ``hunter2``)
# or a number (``18`` of the sed address ``18p``).
_PARTS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+(?:\.[0-9]+)?")
_PROMPT = re.compile(r"[\w.-]+@[\w.-]+:([~/][^\s#$]*)[#$] ")
# A line break with what surrounds it in wrapped output: a continuation mark or border
# before it, the empty leading cells of a table row (or a ``>`` prompt) after it.
_JOIN = re.compile(r"[ \t]*(?:\\|[|│┃║])?[ \t]*\r?\n(?:[ \t]*[|│┃║>])*[ \t]*")
_CREATES = re.compile(r"mkdir|touch|tee|>|\b(?:cp|mv|ln|install|rsync|cd|git|virtualenv)\b|venv|"
                      r"-[oOd]\b|--out|--target|--prefix|--dest")
_SEPARATORS = frozenset({"&&", "||", "|", ";", "&", "(", ")", "|&", ";;"})
_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>"})
_OUTPUT_FLAGS = frozenset({"-o", "-O", "--output", "--out", "--output-dir", "--outdir",
                           "--output-document", "--target", "--prefix", "--dest", "-d"})
_CREATE_ALL = frozenset({"mkdir", "touch", "tee"})
_CREATE_LAST = frozenset({"cp", "mv", "ln", "install", "rsync"})
_PREFIX_WORDS = frozenset({"sudo", "env", "time", "nohup", "exec", "command"})


class SandboxKnowledge:
    """Names that exist in the sandbox, so typing them is no leak.

    :meth:`standard` is the base image every task image is built on; :meth:`with_image`
    adds what the caller knows of one task image (say, ``find /app`` over it).
    """

    __slots__ = ("commands", "paths")

    def __init__(self, *, commands: Iterable[str] = (), paths: Iterable[str] = ()) -> None:
        for name, values in (("commands", commands), ("paths", paths)):
            if isinstance(values, str):
                raise TypeError(f"SandboxKnowledge: {name} must be an iterable of str, not one str")
        self.commands: frozenset[str] = frozenset(commands)
        self.paths: frozenset[str] = frozenset(p.rstrip("/") or "/" for p in paths)
        for name in (*self.commands, *self.paths):
            if not isinstance(name, str):
                raise TypeError(f"SandboxKnowledge: names must be str, got {type(name).__name__}")

    @classmethod
    def standard(cls) -> SandboxKnowledge:
        """The base image: its PATH commands, Python modules, directories and ``/etc`` files."""
        return _STANDARD

    def with_image(
        self, *, paths: Iterable[str] = (), commands: Iterable[str] = ()
    ) -> SandboxKnowledge:
        """This knowledge plus the files, directories and commands of one task image."""
        return SandboxKnowledge(commands=self.commands | frozenset(commands),
                                paths=self.paths | frozenset(paths))

    def holds_name(self, value: str) -> bool:
        """A command, or a standard-library module or ``module.attribute``. (The compiled
        second pass, ``leakjudge.pyx``, has a copy of this test: change both.)"""
        if value in self.commands:
            return True
        return value.split(".", 1)[0] in _MODULE_ROOTS and (
            value in MODULES or value.rsplit(".", 1)[0] in MODULES
        )

    def holds_path(self, path: str) -> bool:
        """A path of the image, a virtual file system's, or a command in a ``bin``
        directory. (``leakjudge.pyx`` has a copy of this test: change both.)"""
        if path in self.paths or path.startswith(_VIRTUAL) or path in _ROOT_LINKS:
            return True
        head, _, name = path.rpartition("/")
        return head in _BIN_DIRS and name in self.commands


_MODULE_ROOTS = frozenset(m.split(".", 1)[0] for m in MODULES)
_STANDARD = SandboxKnowledge(commands=COMMANDS | MODULES, paths=PATHS)


def _carries_digits(part: str) -> bool:
    """A part the first pass would weigh: a number with 3+ significant digits (or a dot),
    or a name of 3+ characters holding a digit."""
    if part.replace(".", "").isdigit():
        return "." in part or len(part.strip("0")) >= 3
    return len(part) >= 3 and any(c.isdigit() for c in part)


def _decimals(value: str) -> int:
    return len(value) - value.index(".") - 1 if "." in value else 0


def _within(sorted_values: list[float], target: float, tolerance: float) -> bool:
    """Some value lies strictly within ``tolerance`` of ``target`` (a tie is not a round)."""
    i = bisect.bisect_right(sorted_values, target - tolerance)
    return i < len(sorted_values) and sorted_values[i] < target + tolerance


_SHELL_WORD = re.compile(r"""'[^']*'|"(?:[^"\\]|\\.)*"|&&|\|\||>>|&>|[|;&()<>]|[^\s|;&()<>'"]+""")


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
        """``value`` is a substring of some text from ``texts[start]`` on."""
        return any(value in text for text in self._texts[start:])

    def _wrapped(self, value: str) -> bool:
        """``value`` is in some public text, whole or broken by line wraps.

        A break falls in one half of the value at most, so the other half is intact: only
        around its occurrences is the text joined (cheaper than joining every screen). The
        halves are looked for first: a value never shown (the usual case) has neither, and
        then the value itself, which holds both, cannot be whole anywhere either.
        """
        half = len(value) // 2
        n = len(value)
        shown = [(piece, offset) for piece, offset in ((value[:half], 0), (value[half:], half))
                 if self._seen_part(piece)]
        if len(shown) == 2 and self._seen_part(value):
            return True
        for piece, offset in shown:
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
        if not any(absent in part for absent in self._absent) and self._contains(part, searched):
            self._parts[part] = -1
            return True
        self._parts[part] = count
        self._absent = [*self._absent[-(_ABSENT - 1):], part]
        return False

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
                numbers = numbers + _NUMBER.findall(text, start, cut)[::-1]
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
        if not _CREATES.search(action):
            # No line can create a path then: the pattern's words hold no line break, and
            # ``\b`` sees a line's edge as it sees the break beside it.
            return
        for line in action.splitlines():
            if not _CREATES.search(line):
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
        command = posixpath.basename(args[0])
        operands = [a for a in args[1:] if not a.startswith("-")]
        if command == "cd":
            target = operands[0] if operands else "/root"
            self._cwd = self._resolve(target) if target != "-" else self._cwd
        elif command in _CREATE_ALL:
            made = [self._resolve(a) for a in operands]
            self._created.update(made)
            if command == "mkdir" and ("-p" in args or "--parents" in args):
                for path in made:  # and every parent the image did not have
                    while (path := posixpath.dirname(path)) not in ("/", ""):
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
            parent = posixpath.dirname(probe)
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
                rest = parts[cut:]
                if not rest or all(self._seen_part(p) for p in rest):
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
        for a in seen:
            if a != target and abs(a - target) < rounding:
                return "computed"  # a, rounded
            if _within(seen, target - a, exact) or _within(seen, a - target, exact):
                return "computed"
        for a in with_units:
            if a in (0.0, 1.0):
                continue
            # a * b, then a as the divisor of b / a and of 100 * b / a
            if (_within(with_units, target / a, rounding / a)
                    or _within(with_units, target * a, rounding * a)
                    or (a != 100.0 and _within(with_units, target * a / 100.0, rounding * a / 100.0))):
                return "computed"
        return None

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
        if kind == "identifier" and not any(c.isdigit() for c in value):
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
        if not any(kind == "path" for _, _, kind in found):
            return found
        programs = ([m.span() for m in _SED_PROGRAM.finditer(action)]
                    if "'" in action or '"' in action else [])  # a program is quoted
        out: list[tuple[int, str, str]] = []
        for position, value, kind in found:
            if kind != "path":
                out.append((position, value, kind))
                continue
            if any(start < position < end for start, end in programs):
                # Pattern text: each piece with a digit must have been shown.
                out.extend((position + m.start(), m.group(), "number" if m.group()[0].isdigit()
                            else "token") for m in _PARTS.finditer(value)
                           if _carries_digits(m.group()))
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
