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

Roles. A system or first user message starting with :data:`ROLE_PLANNER`,
:data:`ROLE_CRITIC` or :data:`ROLE_AUDITOR` selects that role.
"""

from __future__ import annotations

import hashlib
import json
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
    "ROLE_AUDITOR",
    "ROLE_CRITIC",
    "ROLE_PLANNER",
    "ScriptedModel",
    "load_solutions",
    "solve_probability",
    "split_blocks",
]

ROLE_PLANNER = "ROLE: planner"
"""A system or first user message starting with this asks for a runbook (markdown)."""
ROLE_CRITIC = "ROLE: critic"
"""... for a verdict: JSON ``{"verdict": "accept"|"reject", "reasons": [...]}``."""
ROLE_AUDITOR = "ROLE: auditor"
"""... for a leak audit: JSON ``{"leaks": [...]}``."""

Harness = Literal["terminus2", "statem", "rsrt"]
_MAX_LOOP = 4
_WRONG_COMMANDS = ("cat /app/answer.txt\n", "python3 main.py\n", "make test\n", "./run.sh\n")
_HEREDOC_END = "RSR_EOF"


def _unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from ``parts``."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def solve_probability(instruction: str, harness: str) -> float:
    """The scripted model's chance of solving a task under a harness, in [0.15, 0.95]."""
    return 0.15 + 0.80 * _unit("p", instruction.strip(), harness)


def load_solutions(tasks_dir: str | Path) -> dict[str, str]:
    """``instruction.md`` text -> sibling ``solution/solve.sh`` for Harbor task dirs below.

    Deliberately tiny and independent of the tasks room: it only feeds the test double.
    """
    solutions: dict[str, str] = {}
    for instruction in sorted(Path(tasks_dir).rglob("instruction.md")):
        solve = instruction.parent / "solution" / "solve.sh"
        if solve.is_file():
            text = instruction.read_text(encoding="utf-8").strip()
            if text:
                solutions[text] = solve.read_text(encoding="utf-8")
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
        head = " ".join(m["content"] for m in messages[:2] if m["role"] != "assistant").lower()
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
                turns += 1
                claims = claims + 1 if '"task_complete": true' in m["content"] else 0
            elif m["role"] == "user" and claims >= 2 and "fail" in m["content"].lower():
                failures += 1
                turns = 0
                claims = 0
        return failures, turns

    def solves(self, instruction: str, harness: str, *, seed: int | None = None, retry: int = 0) -> bool:
        """Whether the scripted actor will solve this task (for tests and expectations)."""
        seed_key = f"{self.seed}:{seed}" if seed is not None else str(self.seed)
        return self._solves(instruction.strip(), harness, seed_key, retry)

    @staticmethod
    def _solves(instruction: str, harness: str, seed_key: str, retry: int) -> bool:
        return _unit("solve", instruction, harness, seed_key, retry) < solve_probability(
            instruction, harness
        )

    def _actor_reply(self, messages: Sequence[ChatMessage], seed_key: str) -> str:
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
            script = self._script(task, harness, seed_key, failures)
        return script[min(turn, len(script) - 1)]

    def _script(self, task: tuple[str, str], harness: str, seed_key: str, retry: int) -> list[str]:
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
                [(_heredoc(c), min(30.0, 1.0 + 0.2 * c.count("\n")))],
                False,
            )
            for i, c in enumerate(chunks)
        ]
        if self._solves(instruction, harness, seed_key, retry):
            lead = [explore] if _unit("explore", *roll) < 0.5 else []
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
    def _commands_in(text: str) -> list[str]:
        found = [json.loads(f'"{k}"') for k in re.findall(r'"keystrokes":\s*"((?:[^"\\]|\\.)*)"', text)]
        found += [line[2:] for line in text.splitlines() if line.startswith("$ ")]
        return [c for c in found if c.strip()]

    def _planner(self, messages: Sequence[ChatMessage], seed_key: str) -> str:
        text = "\n".join(m["content"] for m in messages if m["role"] != "assistant")
        commands = self._commands_in(text)
        tools = sorted({c.split()[0] for c in commands if c.split()} - {"bash", "RSR_EOF"})
        milestones = [
            "1. Inspect the working directory and the files the task names.",
            *(f"{i + 2}. Carry out the next part of the work with {tool}." for i, tool in
              enumerate(tools[:4])),
            f"{len(tools[:4]) + 2}. Check the result against the task's requirements.",
        ]
        lines = [
            "# Runbook",
            "## End state",
            "- Every requirement stated in the task holds, checked from the shell.",
            "## Milestones",
            *milestones,
            "## Checks",
            "- After each milestone, list or print what it produced and compare with the task.",
            "## Recovery",
            "- If a command fails, read its error output, fix the cause, and rerun it.",
            "## Pitfalls",
            "- Do not claim completion before the checks pass.",
        ]
        critiqued = "reject" in text.lower()
        literals = [w for c in commands for w in re.findall(r"[A-Za-z0-9_./-]{6,}", c)]
        if literals and not critiqued and _unit("leak", text, seed_key) < 0.25:
            leak = literals[int(_unit("which", text, seed_key) * len(literals))]
            lines.append(f"- The expected value is `{leak}`.")
        return "\n".join(lines) + "\n"

    @staticmethod
    def _critic(messages: Sequence[ChatMessage]) -> str:
        text = "\n".join(m["content"] for m in messages if m["role"] != "assistant")
        reasons = [
            f"the literal `{lit}` cannot be derived from the instruction"
            for lit in dict.fromkeys(re.findall(r"`([^`\n]{4,})`", text))
            if text.count(lit) == 1
        ]
        if "expected value is" in text.lower() and not reasons:
            reasons.append("the runbook states an expected value instead of how to find it")
        verdict = "reject" if reasons else "accept"
        return json.dumps({"verdict": verdict, "reasons": reasons})

    def _auditor(self, messages: Sequence[ChatMessage]) -> str:
        text = "\n".join(m["content"] for m in messages)
        commands = self._commands_in(text)
        rest = re.sub(r'"keystrokes":\s*"((?:[^"\\]|\\.)*)"', "", text)
        rest = "\n".join(line for line in rest.splitlines() if not line.startswith("$ "))
        leaks = [
            token
            for c in commands
            for token in re.findall(r"[A-Za-z0-9_./-]{8,}", c)
            if any(ch.isdigit() for ch in token) and token not in rest
        ]
        return json.dumps({"leaks": list(dict.fromkeys(leaks))})
