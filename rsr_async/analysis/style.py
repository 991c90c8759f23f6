"""Execution style per trajectory (the paper's Table 3): how much an agent looks before
it acts, how much it manages workflow state, how often it claims completion.

The exploration classifier (:func:`classify_command`) is deliberately plain: a command is
``explore`` when every simple command in it only reads (inspection programs such as
``ls``, ``cat``, ``grep``, ``find`` without ``-delete``/``-exec`` of a writer, ``sed``
without ``-i``, read-only ``git`` subcommands, version queries) and nothing is written
through a redirection or ``tee``; ``state`` when the StateM harness runs it as one of its
commands (:func:`~rsr_async.harness.statem.is_statem_command`); ``act``
otherwise (edits, installs, builds, runs, heredoc scripts, special keys, ``sleep``).
``cd`` counts as exploration (navigation changes nothing on disk). The labelled list in
``tests/analysis/fixtures/commands.tsv`` is its test.
"""

from __future__ import annotations

import re
import shlex
from typing import Literal

from ..harness.statem import is_statem_command
from ..schema import EpisodeStyle, Trajectory

__all__ = ["Category", "classify_command", "episode_style"]

Category = Literal["explore", "state", "act"]

_READERS = frozenset(
    "ls ll la dir cat tac head tail less more find grep egrep fgrep rg ag ack pwd which whereis "
    "type file stat wc du df tree env printenv ps pgrep id whoami groups uname hostname date "
    "echo printf history diff cmp md5sum sha1sum sha256sum sort uniq cut awk gawk jq yq column "
    "nl od xxd hexdump strings readlink realpath basename dirname lsof netstat ss free uptime "
    "man help cd test [ true lsblk mount locale nproc getent whatis apropos sed zcat zless "
    "lscpu ip ifconfig cal tr fold fmt comm join paste expand look".split()
)
"""Programs that only read (``sed``, ``awk`` and ``find`` are checked further below)."""
_GIT_READERS = frozenset(
    "status log diff show blame reflog ls-files ls-tree rev-parse grep describe shortlog "
    "cat-file whatchanged".split()
)
_PREFIXES = frozenset({"sudo", "time", "command", "nice", "nohup", "timeout", "xargs"})
_VERSION_FLAGS = frozenset({"--version", "-V", "-v", "version", "--help", "-h"})
_SPECIAL_KEY = re.compile(r"^(?:[CM]-.|Enter|Escape|Tab|BSpace|Up|Down|Left|Right|Home|End)$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_DURATION = re.compile(r"^[0-9.]+[smhd]?$")


def _writes_by_redirect(command: str) -> bool:
    """Output redirected into a file other than /dev/null (``2>&1`` and ``>/dev/null``
    only tidy output)."""
    cleaned = re.sub(r"[0-9]?>{1,2}\s*/dev/null|[0-9]?>&[0-9]|&>\s*/dev/null", " ", command)
    return ">" in cleaned


def _segments(text: str) -> list[list[str]]:
    """The simple commands of a command line, as words (quotes respected): split at
    newlines, ``;``, ``&``, ``|``, ``&&`` and ``||``."""
    out: list[list[str]] = []
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            tokens = list(lexer)
        except ValueError:  # an unbalanced quote: fall back to plain words
            tokens = re.split(r"\s+|(?=[;&|])|(?<=[;&|])", line)
        current: list[str] = []
        for token in tokens:
            if token and set(token) <= set(";&|"):
                out.append(current)
                current = []
            elif token:
                current.append(token)
        out.append(current)
    return [words for words in out if words]


def _segment_reads(words: list[str]) -> bool:
    while words and (_ASSIGNMENT.match(words[0]) or words[0] in _PREFIXES):
        words = words[1:]
        # A prefix's own options and durations: `timeout -s KILL 5 cat x`, `xargs -0 grep`.
        while words and (words[0].startswith("-") or _DURATION.match(words[0])):
            words = words[1:]
    if not words:
        return True
    program = words[0].rsplit("/", 1)[-1]
    args = words[1:]
    if program == "sed":
        return not any(a.startswith("-i") or a == "--in-place" for a in args)
    if program == "find":
        if any(a in ("-delete", "-fprint", "-fprintf", "-fls") for a in args):
            return False
        for flag in ("-exec", "-execdir", "-ok"):
            if flag in args:
                rest = args[args.index(flag) + 1 :]
                return bool(rest) and _segment_reads(rest)
        return True
    if program in ("awk", "gawk"):
        return not any("system(" in a or "print >" in a for a in args)
    if program in _READERS:
        return True
    if program == "git":
        sub = next((a for a in args if not a.startswith("-")), "")
        if sub == "branch":
            return all(a.startswith("-") and a not in ("-d", "-D", "-m", "-M") for a in args[1:])
        if sub in ("remote", "config", "stash"):
            return any(a in ("-v", "--get", "--list", "-l", "list", "show") for a in args)
        return sub in _GIT_READERS
    if program in ("pip", "pip3") or (program.startswith("python") and args[:2] == ["-m", "pip"]):
        pip_args = args[2:] if program.startswith("python") else args
        return bool(pip_args) and pip_args[0] in ("list", "show", "freeze", "--version")
    if program in ("apt", "apt-cache", "dpkg", "dpkg-query"):
        return bool(args) and args[0] in ("list", "show", "search", "policy", "-l", "-L", "-s")
    if program in ("systemctl", "service"):
        return any(a in ("status", "is-active", "list-units", "cat") for a in args)
    if program == "sqlite3":
        query = " ".join(args[1:]).strip().lower()
        return query.startswith(("select", ".tables", ".schema", "pragma table_info"))
    return bool(args) and all(a in _VERSION_FLAGS for a in args)


def classify_command(keystrokes: str) -> Category:
    """``explore`` (only reads), ``state`` (``statem ...``) or ``act`` (see module doc)."""
    text = keystrokes.strip()
    if _SPECIAL_KEY.match(text):
        return "act"
    if is_statem_command(keystrokes):
        return "state"
    if "<<" in text or _writes_by_redirect(text) or re.search(r"(^|[|;&\s])tee\s", text):
        return "act"
    segments = _segments(text)
    if not segments:
        return "act"
    return "explore" if all(_segment_reads(words) for words in segments) else "act"


def episode_style(trajectory: Trajectory, *, turns: int | None = None) -> EpisodeStyle:
    """The style record of one trajectory; ``turns`` overrides the model-reply count
    (the harness knows which replies were handoff calls)."""
    replies = [m for m in trajectory.messages if m.origin == "model"]
    kinds = [classify_command(c.keystrokes) for m in replies for c in m.commands if c.keystrokes.strip()]
    claim_at: list[int] = []
    pending = False
    for index, message in enumerate(replies):
        if message.task_complete and pending:
            claim_at.append(index)
            pending = False
        else:
            pending = message.task_complete
    total = len(kinds)
    return EpisodeStyle(
        model_turns=len(replies) if turns is None else turns,
        commands=total,
        exploration_share=kinds.count("explore") / total if total else 0.0,
        state_share=kinds.count("state") / total if total else 0.0,
        claims=len(claim_at),
        rejected_claim=any(i < len(replies) - 1 for i in claim_at),
    )
