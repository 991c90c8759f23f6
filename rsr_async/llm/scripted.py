"""A scripted stand-in model: a deterministic TEST DOUBLE, never a model's result.

:class:`ScriptedModel` plays every role the pipeline asks of a model well enough to drive
the pipeline offline: the Terminus 2 / StateM / RSRT actor, the planner, the critic and
the leak auditor. It runs in-process (unit tests) and behind the simulator server (end-to-
end runs, benchmarks), with the same replies in both places. Numbers produced with it
measure the *engine*, never a model: do not report them as model results.

Actor behaviour. The model recognises its task by finding which known instruction text
occurs in the first user message. Whether it solves the task is decided by a hash of
(task, harness, seed): the solve probability per (task, harness) is itself a hash-derived
number in [0.15, 0.95], so different harnesses solve different task sets. Solving means
typing the task's reference solution (``solution/solve.sh``) over 1 to 3 turns, whole
top-level blocks per turn, each chunk inside ``bash <<'RSR_EOF'``, then claiming
completion and confirming it. Failing means one of the ways models fail: a wrong command
then giving up, giving up early, a malformed (non-JSON) reply once and then giving up
part-way, or looping on one command a few turns and then giving up. Progress is read from
the conversation (its own earlier assistant turns), so it is stateless across calls and
works behind HTTP. Under RSRT, after the hidden verifier says "failed", it rolls again.
When the last screen shows its command has not returned to the shell prompt yet (a slow
machine, long work), it waits (empty keystrokes, 1 s, then 2, 4 ... up to 30 s, at most
8 times) before its next step, as Terminus 2 tells models to poll: wait turns are no
steps of the script, so the same episode solves or fails the same way at any load.

Guided actor. With a private runbook in its context (a system message starting with
:data:`GUIDANCE_LEAD`, as the harness sends it) the actor closes
:data:`GUIDED_SOLVE_BOOST` of the gap between its solve chance and 1, and when the runbook
leaks a literal (:data:`LEAK_PHRASE`) it types that literal (``echo VALUE``) with its
first chunk: the leak the audit must catch end to end.

Roles. A system or first user message starting with :data:`ROLE_PLANNER`,
:data:`ROLE_CRITIC` or :data:`ROLE_AUDITOR` selects that role; the prompts under
``rsr_async/rsr/prompts/`` start that way, and their ``<instruction>``, ``<trajectory>``,
``<runbook>`` and ``<flagged>`` blocks are what the roles read.

- Planner: five canonical ``## `` sections whose milestones name the tools of the
  source's ``$`` command lines; a seeded :data:`PLANNER_LEAK_SHARE` of first drafts (not
  regenerations, recognised by their ``<rejected_runbook>`` block) states a literal of the
  task's reference solution outright (else of the source's commands; see
  :func:`split_literals`); a seeded fifth wraps the answer in prose and a code fence.
- Critic (judge): sees the instruction and the runbook; rejects every backticked literal
  the instruction does not contain and any "expected value is" statement.
- Auditor: a flagged value is leaked when it carries data (:func:`carries_data`: a
  number, or a run of two digits) and neither the instruction nor terminal output before
  its turn shows it; otherwise derivable.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from ..errors import ContextLengthError
from ..schema import Usage
from .base import ChatMessage, Completion
from .prompt import render_chatml
from .tokenizer import SimTokenizer

__all__ = [
    "GUIDANCE_LEAD",
    "LEAK_PHRASE",
    "PLANNER_LEAK_SHARE",
    "ROLE_AUDITOR",
    "ROLE_CRITIC",
    "ROLE_PLANNER",
    "ScriptedModel",
    "carries_data",
    "is_wait_reply",
    "load_solutions",
    "solve_probability",
    "split_blocks",
    "split_literals",
]

log = logging.getLogger(__name__)

ROLE_PLANNER = "ROLE: planner"
"""A system or first user message starting with this asks for a runbook (markdown)."""
ROLE_CRITIC = "ROLE: critic"
"""... for a verdict: JSON ``{"verdict": "accept"|"reject", "critique": "..."}``."""
ROLE_AUDITOR = "ROLE: auditor"
"""... for a leak audit: JSON ``{"rulings": [{"value", "verdict", "reason"}]}``."""

Harness = Literal["terminus2", "statem", "rsrt"]
_MAX_LOOP = 4
_WRONG_COMMANDS = ("cat /app/answer.txt\n", "python3 main.py\n", "make test\n", "./run.sh\n")
_HEREDOC_END = "RSR_EOF"
_STILL_RUNNING = "The previous command is still running."
"""The analysis of a wait turn: replies starting so are not steps of the script."""
_MAX_WAITS = 8
"""Consecutive wait turns before the script goes on regardless (a command that never
returns to the prompt, an interactive program): 1 + 2 + 4 + ... capped at 30 s, 121 s."""
_SHELL_PROMPT = re.compile(r"[#$]$")
"""How a screen's last line looks when the shell waits for input (``root@box:/app#``,
``$``); a running command's screen ends with its own echo or output instead."""
_SCREEN_HEADERS = ("New Terminal Output:", "Current Terminal Screen:")


def _unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from ``parts``."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def solve_probability(instruction: str, harness: str) -> float:
    """The scripted model's chance of solving a task under a harness, in [0.15, 0.95]."""
    return 0.15 + 0.80 * _unit("p", instruction.strip(), harness)


def load_solutions(tasks_dir: str | Path) -> dict[str, str]:
    """``instruction.md`` text -> sibling ``solution/solve.sh`` for Harbor task dirs (and
for each step of a multi-step one, ``steps/<name>/``).

    ``tasks_dir`` is a directory (every ``instruction.md`` below it) or a list file naming
    one task directory per line (``run`` writes one: exactly the tasks its loader
    accepted). A task that cannot be read (not UTF-8, a directory where a file belongs) is
    skipped with a warning naming it: one bad task must not stop the simulator, and with it
    every other task's episodes. Deliberately tiny and independent of the tasks room: it
    only feeds the test double.
    """
    source = Path(tasks_dir)
    if source.is_file():
        lines = source.read_text(encoding="utf-8").splitlines()
        dirs = [Path(line.strip()) for line in lines if line.strip()]
        # a multi-step task's steps each have their own instruction and solution
        instructions = [f for d in dirs for f in (d / "instruction.md", *sorted(d.glob("steps/*/instruction.md")))]
    else:
        instructions = sorted(source.rglob("instruction.md"))
    solutions: dict[str, str] = {}
    for instruction in instructions:
        solve = instruction.parent / "solution" / "solve.sh"
        if not solve.is_file():
            continue  # no reference solution: nothing for the stand-in to type
        try:
            if not instruction.is_file():
                raise IsADirectoryError(f"{instruction.name} is not a file")
            text = instruction.read_text(encoding="utf-8").strip()
            solution = solve.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("scripted model: skipped task %s: cannot read it: %s", instruction.parent, exc)
            continue
        if text:
            solutions[text] = solution
    return solutions


_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_OPENERS = re.compile(r"(?:^|[;&|]\s*|\bthen\s+|\bdo\s+)(if|case|for|while|until|select)\b")
_CLOSERS = re.compile(r"(?:^|[;&|]\s*)(fi|esac|done)\b")
_STATE_LINE = re.compile(r"^(set |cd |export |source |\. |[A-Za-z_][A-Za-z0-9_]*=)")


def split_blocks(script: str) -> list[str]:
    """Top-level blocks of a shell script (a heuristic, good for reference solutions).

    A block ends at a line outside any heredoc, compound command, brace group or line
    continuation. Comment-only and blank lines join the next block.
    """
    blocks: list[str] = []
    current: list[str] = []
    depth = 0
    heredoc: str | None = None
    for line in script.splitlines():
        current.append(line)
        stripped = line.strip()
        if heredoc is not None:
            if stripped == heredoc:
                heredoc = None
            else:
                continue
        else:
            match = _HEREDOC.search(line)
            if match:
                heredoc = match.group(2)
                continue
            code = stripped.split(" #", 1)[0]
            if code.startswith("#") or not code:
                continue
            depth += len(_OPENERS.findall(code)) - len(_CLOSERS.findall(code))
            depth += code.count("{") - code.count("}")
            depth += code.count("(") - code.count(")")
            if code.endswith(("\\", "&&", "||", "|")):
                continue
        if depth <= 0 and heredoc is None:
            depth = 0
            blocks.append("\n".join(current))
            current = []
    if current:
        blocks.append("\n".join(current))
    return [b for b in blocks if b.strip()]


def _chunks(script: str, count: int) -> list[str]:
    """``script`` as ``count`` (or fewer) runs of whole blocks, later ones carrying state."""
    blocks = split_blocks(script)
    if not blocks:
        return []
    count = max(1, min(count, len(blocks)))
    size = -(-len(blocks) // count)
    groups = [blocks[i : i + size] for i in range(0, len(blocks), size)]
    out: list[str] = []
    carried: list[str] = []
    for group in groups:
        # Each chunk runs in its own bash, so re-run earlier one-line state setters
        # (cd, set -e, exports, assignments) to give later chunks the same context.
        out.append("\n".join(carried + group))
        for block in group:
            code = [ln for ln in block.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
            if len(code) == 1 and _STATE_LINE.match(code[0].strip()):
                carried.append(code[0])
    return out


def _actor(analysis: str, plan: str, commands: Sequence[tuple[str, float]], done: bool) -> str:
    return json.dumps(
        {
            "analysis": analysis,
            "plan": plan,
            "commands": [{"keystrokes": k, "duration": d} for k, d in commands],
            "task_complete": done,
        },
        indent=2,
    )


def _give_up(why: str) -> list[str]:
    claim = _actor(why, "Mark the task complete.", [], True)
    confirm = _actor("Confirming completion.", "No further commands.", [], True)
    return [claim, confirm]


def _waiting(messages: Sequence[ChatMessage]) -> int | None:
    """How many wait turns in a row the actor has sent, when the last observation shows
    its command has not returned to the shell prompt yet; ``None`` when it has (or the
    last message is no terminal observation).

    A model reads the screen: with no prompt after its command, the command still runs
    (the machine is slow, the work is long), and claiming completion then would hand the
    verifier a half-done sandbox. Terminus 2 tells models to poll, so the actor polls.
    """
    if not messages or messages[-1]["role"] != "user":
        return None
    content = messages[-1]["content"]
    if not any(header in content for header in _SCREEN_HEADERS) or "task_complete" in content:
        return None  # a parse error, a verifier's verdict, a completion question
    lines = content.rstrip().splitlines()
    if not lines or _SHELL_PROMPT.search(lines[-1].rstrip()):
        return None
    waits = 0
    for m in reversed(messages[:-1]):
        if m["role"] != "assistant":
            continue
        if not is_wait_reply(m["content"]):
            return waits
        waits += 1
    return None  # no command of its own yet: the first screen is the task's


def is_wait_reply(reply: str) -> bool:
    """Whether ``reply`` is one of the stand-in's wait turns: they depend on how fast the
    machine ran its commands, so two runs of the same episode may differ by them."""
    return reply.startswith('{\n  "analysis": "' + _STILL_RUNNING)


def _wait(waits: int) -> str:
    return _actor(_STILL_RUNNING, "Wait for it to finish before going on.",
                  [("", min(30.0, float(2**waits)))], False)


def _heredoc(chunk: str) -> str:
    return f"bash <<'{_HEREDOC_END}'\n{chunk.rstrip()}\n{_HEREDOC_END}\n"


class ScriptedModel:
    """In-process :class:`~rsr_async.llm.base.ChatModel` test double (see module doc).

    ``solutions`` maps a task's instruction text to its reference ``solve.sh`` content.
    """

    def __init__(
        self,
        solutions: Mapping[str, str],
        *,
        seed: int = 0,
        model_name: str = "scripted-stand-in",
        context_length: int = 32768,
    ) -> None:
        # Longest first, so an instruction that contains another wins.
        self._solutions = sorted(
            ((k.strip(), v) for k, v in solutions.items() if k.strip()), key=lambda kv: -len(kv[0])
        )
        self.seed = seed
        self._model_name = model_name
        self._context_length = context_length
        self._tokenizer = SimTokenizer()
        self._task_cache: dict[str, tuple[str, str] | None] = {}

    @classmethod
    def from_tasks_dir(cls, tasks_dir: str | Path, **kwargs: object) -> ScriptedModel:
        """A model that knows the Harbor tasks under ``tasks_dir``."""
        return cls(load_solutions(tasks_dir), **kwargs)  # type: ignore[arg-type]

    @property
    def model_name(self) -> str:
        """Name recorded in trajectories."""
        return self._model_name

    @property
    def context_length(self) -> int:
        """Context window in tokens."""
        return self._context_length

    # -- the ChatModel call -------------------------------------------------------------

    async def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        affinity: str,
        max_tokens: int | None = None,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> Completion:
        """The scripted reply, with token counts from the simulator's tokenizer."""
        prompt_tokens = self._tokenizer.count(render_chatml(messages))
        if prompt_tokens >= self._context_length:
            raise ContextLengthError(
                f"scripted model: the prompt has {prompt_tokens} tokens, over the context "
                f"length of {self._context_length}; summarise or shorten the conversation",
                status=400,
            )
        limit = self._context_length - prompt_tokens
        if max_tokens is not None:
            limit = min(limit, max_tokens)
        full = self.reply(messages, seed=seed)
        text, completion_tokens = self._tokenizer.truncate(full, limit)
        finish: Literal["stop", "length"] = "length" if text != full else "stop"
        usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, requests=1)
        return Completion(text=text, finish_reason=finish, usage=usage, server="scripted")

    # -- replies --------------------------------------------------------------------------

    def reply(self, messages: Sequence[ChatMessage], *, seed: int | None = None) -> str:
        """The reply text for a conversation (pure function of messages, seeds, tasks)."""
        seed_key = f"{self.seed}:{seed}" if seed is not None else str(self.seed)
        head = [m["content"] for m in messages[:2] if m["role"] in ("system", "user")]
        for text in head:
            lead = text.lstrip()
            if lead.startswith(ROLE_PLANNER):
                return self._planner(messages, seed_key)
            if lead.startswith(ROLE_CRITIC):
                return self._critic(messages)
            if lead.startswith(ROLE_AUDITOR):
                return self._auditor(messages)
        return self._actor_reply(messages, seed_key)

    def _find_task(self, messages: Sequence[ChatMessage]) -> tuple[str, str] | None:
        first = next((m["content"] for m in messages if m["role"] == "user"), "")
        key = hashlib.blake2b(first.encode(), digest_size=16).hexdigest()
        if key not in self._task_cache:
            found = next(((i, s) for i, s in self._solutions if i in first), None)
            if len(self._task_cache) > 4096:
                self._task_cache.clear()
            self._task_cache[key] = found
        return self._task_cache[key]

    @staticmethod
    def harness_of(messages: Sequence[ChatMessage]) -> Harness:
        """Which harness is talking, judged from its prompt text."""
        head = " ".join(
            m["content"] for m in messages[:2]
            if m["role"] != "assistant" and not m["content"].startswith(GUIDANCE_LEAD)
        ).lower()
        if "statem" in head:
            return "statem"
        if "rsrt" in head:
            return "rsrt"
        return "terminus2"

    @staticmethod
    def _segments(messages: Sequence[ChatMessage]) -> tuple[int, int]:
        """(verifier failures so far, own turns since the last failure).

        A user message after two consecutive completion claims can only be a hidden
        verifier's "failed" (plain Terminus 2 ends the episode there).
        """
        failures = 0
        turns = 0
        claims = 0
        for m in messages:
            if m["role"] == "assistant":
                if is_wait_reply(m["content"]):
                    continue  # a wait is no step of the script
                turns += 1
                claims = claims + 1 if '"task_complete": true' in m["content"] else 0
            elif m["role"] == "user" and claims >= 2 and "fail" in m["content"].lower():
                failures += 1
                turns = 0
                claims = 0
        return failures, turns

    def solves(
        self, instruction: str, harness: str, *, seed: int | None = None, retry: int = 0,
        guided: bool = False,
    ) -> bool:
        """Whether the scripted actor will solve this task (for tests and expectations);
        ``guided``: with a private runbook in its context."""
        seed_key = f"{self.seed}:{seed}" if seed is not None else str(self.seed)
        return self._solves(instruction.strip(), harness, seed_key, retry, guided)

    @staticmethod
    def _solves(instruction: str, harness: str, seed_key: str, retry: int, guided: bool) -> bool:
        chance = solve_probability(instruction, harness)
        if guided:
            chance += (1.0 - chance) * GUIDED_SOLVE_BOOST
        return _unit("solve", instruction, harness, seed_key, retry) < chance

    @staticmethod
    def _guidance(messages: Sequence[ChatMessage]) -> str | None:
        """The private runbook message, when the harness gave one."""
        return next(
            (m["content"] for m in messages
             if m["role"] == "system" and m["content"].startswith(GUIDANCE_LEAD)),
            None,
        )

    def _actor_reply(self, messages: Sequence[ChatMessage], seed_key: str) -> str:
        waits = _waiting(messages)
        if waits is not None and waits < _MAX_WAITS:
            return _wait(waits)
        failures, turn = self._segments(messages)
        task = self._find_task(messages)
        if task is None:
            script = [
                _actor("I do not recognise this task; look around first.", "List files.",
                       [("ls -la\n", 0.1)], False),
                *_give_up("Nothing obvious to do; stopping here."),
            ]
        else:
            harness = self.harness_of(messages)
            guidance = self._guidance(messages)
            copied = None
            if guidance is not None:
                found = re.search(rf"{LEAK_PHRASE} `([^`\n]+)`", guidance)
                copied = found.group(1) if found else None
            script = self._script(
                task, harness, seed_key, failures, guided=guidance is not None, copied=copied
            )
        return script[min(turn, len(script) - 1)]

    def _script(
        self, task: tuple[str, str], harness: str, seed_key: str, retry: int, *,
        guided: bool = False, copied: str | None = None,
    ) -> list[str]:
        """The actor's whole episode. ``guided``: a runbook is in context (solves more
        often); ``copied``: a literal the runbook leaked, typed with the first chunk."""
        instruction, solution = task
        roll = (instruction, harness, seed_key, retry)
        explore = _actor(
            "Start by looking at the working directory.", "List files, then act.",
            [("ls -la\n", 0.1)], False,
        )
        chunks = _chunks(solution, 1 + int(_unit("chunks", *roll) * 3))
        typed = [
            _actor(
                f"Step {i + 1} of {len(chunks)} of the solution.",
                "Run the next part of the solution.",
                [
                    *([(f"echo {copied}\n", 0.1)] if copied and i == 0 else []),
                    (_heredoc(c), min(30.0, 1.0 + 0.2 * c.count("\n"))),
                ],
                False,
            )
            for i, c in enumerate(chunks)
        ]
        # Under RSRT a solver sometimes claims before its last chunk ran; the hidden tests
        # say "failed" and, on the retry, it types the rest and claims again.
        early = (
            harness == "rsrt" and not guided and _unit("early", instruction, seed_key) < 0.4
            and self._solves(instruction, harness, seed_key, 0, guided)
        )
        if early and retry == 0:
            return [*typed[:-1], *_give_up("Everything should be in place now.")]
        if early and retry == 1:
            return [typed[-1], *_give_up("The remaining part ran; now it is done.")]
        if self._solves(instruction, harness, seed_key, retry, guided):
            lead = [explore] if _unit("explore", *roll) < 0.5 else []
            if harness == "statem" and _unit("statem", *roll) < 0.7:
                lead.append(_actor(
                    "The workflow asks me to understand and plan first.", "Tick the items and move on.",
                    [("statem check read-task\n", 0.1), ("statem check inspected-environment\n", 0.1),
                     ("statem goto plan\n", 0.1), ("statem check wrote-plan\n", 0.1),
                     ("statem goto implement\n", 0.1)],
                    False,
                ))
            if _unit("stumble", *roll) < 0.1:
                lead.append("Let me think about this task before I answer.")
            return [*lead, *typed, *_give_up("The solution ran; the task should be done.")]
        mode = int(_unit("mode", *roll) * 4)
        if mode == 0:  # a wrong command, then gives up
            wrong = _WRONG_COMMANDS[int(_unit("wrong", *roll) * len(_WRONG_COMMANDS))]
            return [
                explore,
                _actor("This should do it.", "Run the program.", [(wrong, 1.0)], False),
                *_give_up("I believe the task is complete."),
            ]
        if mode == 1:  # gives up early, part-way through
            return [explore, *typed[: len(typed) // 2], *_give_up("That looks good enough.")]
        if mode == 2:  # malformed once, recovers the format, then stops part-way
            return [
                "I will now run the commands needed: ls -la and then check the files.",
                explore,
                *_give_up("Done, I think."),
            ]
        loops = 2 + int(_unit("loops", *roll) * (_MAX_LOOP - 1))
        again = _actor("Checking again.", "List files.", [("ls -la\n", 0.1)], False)
        return [explore, *([again] * loops), *_give_up("I cannot make progress; stopping.")]

    # -- other roles ----------------------------------------------------------------------

    @staticmethod
    def _section(text: str, tag: str) -> str:
        """The text inside ``<tag>…</tag>`` (the role prompts' delimiters), else ''."""
        match = re.search(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.DOTALL)
        return match.group(1) if match else ""

    @staticmethod
    def _transcript_commands(text: str) -> list[str]:
        """Commands of a transcript: ``$ `` lines, with their ``> `` continuation lines."""
        commands: list[str] = []
        for line in text.splitlines():
            if line.startswith("$ "):
                commands.append(line[2:])
            elif line.startswith("> ") and commands:
                commands[-1] += "\n" + line[2:]
        return [c for c in commands if c.strip()]

    def _planner(self, messages: Sequence[ChatMessage], seed_key: str) -> str:
        text = "\n".join(m["content"] for m in messages if m["role"] != "assistant")
        instruction = self._section(text, "instruction")
        source = self._section(text, "trajectory") or text
        commands = self._transcript_commands(source)
        tools = sorted({w for c in commands for w in _shell_words(c)
                        if _TOOL.fullmatch(w) and w not in _NOT_TOOLS})
        milestones = [
            "1. Inspect the working directory and the files the task names.",
            *(f"{i + 2}. Carry out the next part of the work with {tool}." for i, tool in
              enumerate(tools[:4])),
            f"{len(tools[:4]) + 2}. Check the result against the task's requirements.",
        ]
        lines = [
            "## " + _SECTIONS[0],
            "- Every requirement stated in the task holds, checked from the shell.",
            "## " + _SECTIONS[1],
            *milestones,
            "## " + _SECTIONS[2],
            "- After each milestone, list or print what it produced and compare with the task.",
            "## " + _SECTIONS[3],
            "- If a command fails, read its error output, fix the cause, and rerun it.",
            "## " + _SECTIONS[4],
            "- Do not claim completion before the checks pass.",
        ]
        # A seeded share of first drafts leaks a literal of the reference solution (or of
        # the source's commands) outright; a regeneration after a critique never does.
        regenerated = "<rejected_runbook>" in text
        task = self._find_task(messages)
        solution = task[1] if task else ""
        outputs = source.split("\nTerminal:\n")
        final_output = outputs[-1].split("\n### Turn ")[0] if len(outputs) > 1 else ""
        # The answer first: data the source's last output showed, then data in the
        # solution or the commands, then any solution literal shaped like a value.
        pool = (
            split_literals(final_output, instruction)
            or split_literals(solution + "\n" + "\n".join(commands), instruction)
            or split_literals(solution, instruction, data_only=False)
        )
        if pool and not regenerated and _unit("leak", text, seed_key) < PLANNER_LEAK_SHARE:
            leak = pool[int(_unit("which", text, seed_key) * len(pool))]
            lines.insert(1, f"- {LEAK_PHRASE} `{leak}`.")
        runbook = "\n".join(lines) + "\n"
        if _unit("mess", text, seed_key) < 0.2:  # the usual model mess around the answer
            runbook = f"Here is the runbook.\n\n```markdown\n{runbook}```\n\nGood luck!\n"
        return runbook

    def _critic(self, messages: Sequence[ChatMessage]) -> str:
        text = "\n".join(m["content"] for m in messages if m["role"] != "assistant")
        instruction = self._section(text, "instruction")
        runbook = self._section(text, "runbook") or text
        reasons = [
            f"the runbook states `{lit}`, which the instruction does not contain; "
            "say how to find it instead"
            for lit in dict.fromkeys(re.findall(r"`([^`\n]+)`", runbook))
            if lit not in instruction
        ]
        if _ANSWER_PHRASE.search(runbook) and not reasons:
            reasons.append("the runbook states an expected value instead of how to find it")
        verdict = "reject" if reasons else "accept"
        return json.dumps({"verdict": verdict, "critique": " ".join(reasons)})

    def _auditor(self, messages: Sequence[ChatMessage]) -> str:
        """Rules each flagged value from what the auditor prompt shows, honestly:

        a value is *leaked* when it carries data (see :func:`carries_data`) and neither the
        instruction nor any terminal output before the turn that typed it contains it;
        otherwise it is vocabulary (paths, names, flags, ``man1``, ``HTTP/1.1``, regexes)
        or general knowledge (``0.0.0.0``) a competent engineer writes from the task.
        """
        text = "\n".join(m["content"] for m in messages if m["role"] != "assistant")
        instruction = self._section(text, "instruction")
        transcript = self._section(text, "trajectory")
        rulings = []
        for match in _FLAGGED.finditer(self._section(text, "flagged")):
            value = ast.literal_eval(match.group(1))
            turn = int(match.group(3))
            cut = transcript.find(f"### Turn {turn}\n")
            before = transcript[: cut if cut >= 0 else len(transcript)]
            shown = "\n".join(
                line for line in before.splitlines() if not line.startswith(("$ ", "> ", "### Turn "))
            )
            if value in instruction or value in shown:
                verdict, reason = "derivable", "shown before it was typed"
            elif value in _WELL_KNOWN:
                verdict, reason = "derivable", "general knowledge"
            elif not carries_data(value):
                verdict, reason = "derivable", "no data in it: a name, path or pattern"
            else:
                verdict, reason = "leaked", "task data the agent had not seen and could not compute"
            rulings.append({"value": value, "verdict": verdict, "reason": reason})
        return json.dumps({"rulings": rulings})


PLANNER_LEAK_SHARE = 0.25
"""Share of first planner drafts that quote a solution literal outright (seeded)."""
LEAK_PHRASE = "The expected value is"
"""How a leaking scripted runbook states its literal (the guided actor copies it)."""
GUIDANCE_LEAD = "You have private guidance"
"""How the harness's private guidance message starts (``harness/templates/guidance.txt``)."""
GUIDED_SOLVE_BOOST = 0.6
"""A runbook closes this share of the gap between the actor's solve chance and 1."""

_SECTIONS = (
    "Final-state requirements",
    "Key milestones",
    "How to check progress",
    "Recovery strategies",
    "Common pitfalls",
)
_TOOL = re.compile(r"[a-z][a-z0-9_.+-]{1,30}")
_NOT_TOOLS = frozenset(
    "bash sh if then else elif fi for do done while until case esac in function return "
    "cd set export source local echo true false exit rsr_eof eof py pycheck".split()
)
_ANSWER_PHRASE = re.compile(r"expected (value|output|answer) is|the answer is|must be exactly", re.I)
_FLAGGED = re.compile(r"""^\d+\. ('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*") \((\w+), turn (\d+)\)""", re.M)
_LITERAL = re.compile(r"[A-Za-z0-9_./+-]+")


_WELL_KNOWN = frozenset({"0.0.0.0", "127.0.0.1", "255.255.255.0", "255.255.255.255", "::1"})


def carries_data(value: str) -> bool:
    """A number, or anything holding a run of two or more digits (a count, port, hash,
    version, date): what the scripted auditor treats as task data rather than naming."""
    return re.fullmatch(r"[\d.]+", value) is not None or re.search(r"\d\d", value) is not None


def _shell_words(command: str) -> list[str]:
    """First words of a command's shell lines; the bodies of nested heredocs (a Python
    script fed to ``python3 - <<'PY'``) are data, not commands."""
    words: list[str] = []
    lines = command.splitlines()
    outer = _HEREDOC.search(lines[0]) if lines else None
    wrapper = outer.group(2) if outer and lines[0].split()[:1] == ["bash"] else None
    body: str | None = None
    for i, line in enumerate(lines):
        stripped = line.strip()
        if body is not None:
            if stripped == body:
                body = None
            continue
        if stripped and stripped != wrapper:
            words.append(stripped.split(None, 1)[0])
        match = _HEREDOC.search(line)
        if match and not (i == 0 and wrapper):
            body = match.group(2)
    return words


def split_literals(script: str, instruction: str, *, data_only: bool = True) -> list[str]:
    """Value-like literals of ``script`` the instruction does not contain, first-seen order.

    Shaped like the leak scanner's candidates: a path, a number with a dot or three
    significant digits, an 8+ character token mixing letters and digits, or (with
    ``data_only=False``) a 10+ character identifier. ``data_only``: only those carrying a
    digit.
    """
    out: dict[str, None] = {}
    for raw in _LITERAL.findall(script):
        word = raw.lstrip(".-").rstrip("./-")
        if word in instruction or (data_only and not any(ch.isdigit() for ch in word)):
            continue
        if not data_only and len(word) >= 10 and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", word):
            out[word] = None
            continue
        number = re.fullmatch(r"[\d.]+", word) is not None
        if (
            ("/" in word and len(word) >= 4)
            or (number and ("." in word or len(word.strip("0")) >= 3))
            or (not number and len(word) >= 8 and re.fullmatch(r"[A-Za-z0-9+_-]+", word)
                and re.search(r"[A-Za-z]", word))
        ):
            out[word] = None
    return list(out)
