"""The second pass of the leak scan: is an unseen literal still derivable?

The first pass (``leakscan.pyx`` or its twin) finds candidates no public text contains as
a word. Most of those are no leak at all on ordinary terminal work: a path the model
typed before listing it, ``755``, ``sha256sum``, a sed program. This pass clears a
candidate when one of these rules holds, and names the rule that flagged it otherwise.
It runs only on first-pass candidates, so its cost is per flag, not per byte of output.

This module holds the rules' documentation, their constants and :class:`SandboxKnowledge`;
the pass itself, ``Judge``, is written once, in ``leakjudge_py.py``: the pure scanner runs
that file as Python; the compiled scanner runs the same source compiled (typed by
``_leakjudge_rules.pxd``), with ``leakjudge.pyx`` replacing only its kernels, the methods
that read public text byte by byte, with C over one-byte text. The tests check the two
against each other.

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

import re
from collections.abc import Iterable

from .sandbox_base import COMMANDS, MODULES, PATHS

__all__ = ["EVERYDAY_NUMBERS", "OPERANDS", "RULES", "SandboxKnowledge"]

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
        """A command, or a standard-library module or ``module.attribute``."""
        if value in self.commands:
            return True
        return value.split(".", 1)[0] in _MODULE_ROOTS and (
            value in MODULES or value.rsplit(".", 1)[0] in MODULES
        )

    def holds_path(self, path: str) -> bool:
        """A path of the image, a virtual file system's, or a command in a ``bin``
        directory."""
        if path in self.paths or path.startswith(_VIRTUAL) or path in _ROOT_LINKS:
            return True
        head, _, name = path.rpartition("/")
        return head in _BIN_DIRS and name in self.commands


_MODULE_ROOTS = frozenset(m.split(".", 1)[0] for m in MODULES)
_STANDARD = SandboxKnowledge(commands=COMMANDS | MODULES, paths=PATHS)
