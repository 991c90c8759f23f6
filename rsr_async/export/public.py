"""The public conversation: what a deployed plain Terminus 2 model sees and says.

Rules, in message order (:func:`public_conversation`):

- ``private`` messages (runbooks) are dropped, always.
- ``task``, ``model`` and ``env`` messages are kept, their text exactly as recorded: the
  assistant content is the model's raw reply as it was sent.
- ``harness`` messages under Terminus 2 are kept: the confirmation prompt, parse-error
  feedback, the output-limit message and the handoff prompts are Terminus 2's own
  protocol, which a deployed Terminus 2 shows its model.
- ``harness`` messages under any other harness (StateM, RSRT) are kept only when the
  whole text is one of Terminus 2's protocol messages (rendered from
  ``rsr_async/harness/templates``; these harnesses speak the shared Terminus protocol);
  their own control text ("failed, try again", state prompts) is dropped.
- StateM: a model turn that runs any StateM command (one the harness caught:
  :func:`~rsr_async.harness.statem.is_statem_command`) is dropped with every message
  after it up to the next model message (its output). Stricter than
  :func:`~rsr_async._native.compress_trajectory`, which keeps a mixed turn for the
  planner: an exported reply cannot be edited (it is the raw text as sent), its
  observation mixes the outputs, and a plain Terminus 2 model must never learn to type
  ``statem`` commands. A ``statem`` the harness did not catch (``statem cur\\nls`` in one
  batch) went to bash, which answered ``command not found`` as it would a plain
  Terminus 2 model: that turn is ordinary shell work and stays.

Dropping messages can leave two messages of one role side by side; the conversation is
then repaired into a strict alternation: adjacent user messages are joined with a blank
line (nothing the model saw is lost); of adjacent assistant messages only the last is
kept, because the next observation answers its commands and a merged reply would no
longer be one parseable Terminus reply. Leading assistant messages and trailing user
messages are cut, so the conversation starts with the task and ends with the model.

Terminus 2's context handoff is kept as it was recorded, one linear conversation (summary
request, questions, answers, resume prompt), though the questions were asked in a fresh
context.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import cache

import msgspec

from ..harness.protocol import _template, render
from ..harness.statem import is_statem_command
from ..schema import Message, Role, Trajectory

__all__ = [
    "PublicMessage",
    "check_conversation",
    "drop_rejected",
    "is_terminus_protocol",
    "public_conversation",
    "public_messages",
    "rejected_replies",
]

PLAIN_HARNESS = "terminus2"
"""The harness whose own protocol text is exported as is."""


class PublicMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message of the public conversation, with the recorded model message behind it."""

    role: Role
    content: str
    source: Message | None = None
    """Assistant messages: the model message (commands, usage) for ATIF."""


_FIELD = "\x00FIELD\x00"


def _pattern(name: str, fields: Sequence[str] = ()) -> str:
    """The template as a regex, every field a wildcard (fields read from the template)."""
    names = {f for _, f, _, _ in string.Formatter().parse(_template(name)) if f}
    text = render(name, **dict.fromkeys(names | set(fields), _FIELD))
    return ".*".join(re.escape(part) for part in text.split(_FIELD))


@cache
def _protocol_patterns() -> re.Pattern[str]:
    confirm = _pattern("confirm", ["terminal_state"])
    warned = _pattern("warnings", ["warnings", "observation"]).rsplit(".*", 1)[0]
    texts = [
        f"(?:{warned})?{confirm}",
        _pattern("parse_error", ["feedback"]),
        _pattern("output_limit")
        + "(?:{})?".format(_pattern("output_limit_warnings", ["warnings"])),
        _pattern("handoff_summary", ["instruction"]),
        _pattern("handoff_questions", ["instruction", "summary", "screen"]),
        _pattern("handoff_answers", ["questions"]),
        _pattern("handoff_resume", ["answers"]) + r"(?:\n\n.*)?",
    ]
    return re.compile("|".join(f"(?:{t})" for t in texts), re.DOTALL)


def is_terminus_protocol(text: str) -> bool:
    """True when ``text`` is, as a whole, one of Terminus 2's own protocol messages."""
    return _protocol_patterns().fullmatch(text) is not None


@cache
def _rejection_heads() -> dict[str, str]:
    """How each Terminus 2 message that rejects the reply before it begins (text up to its
    first field): a parse error, a reply cut by the output-token limit."""
    heads = {}
    for reason, name in (("parse_error", "parse_error"), ("output_limit", "output_limit")):
        head = render(name, **dict.fromkeys(_fields(name), _FIELD)).split(_FIELD)[0]
        heads[reason] = head
    return heads


def _fields(name: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(_template(name)) if f}


def rejected_replies(conversation: Sequence[PublicMessage]) -> dict[int, str]:
    """Index of each assistant message Terminus 2 rejected -> why (``parse_error`` or
    ``output_limit``).

    Terminus 2 runs nothing of such a reply and answers it with its parse-error message
    ("Previous response had parsing errors: ...") or its output-limit message; the reply
    is then no example of what to say, so the export gives it training weight 0 (or drops
    it). Read from the message that follows, exactly as the model saw it.
    """
    heads = _rejection_heads()
    out: dict[int, str] = {}
    for index, message in enumerate(conversation[:-1]):
        if message.role != "assistant":
            continue
        following = conversation[index + 1].content
        for reason, head in heads.items():
            if following.startswith(head):
                out[index] = reason
                break
    return out


def drop_rejected(conversation: list[PublicMessage]) -> list[PublicMessage]:
    """The conversation without the replies Terminus 2 rejected and its answers to them.

    Each rejected reply goes with the rejection message after it, so the prompt before it
    is followed by the model's next, accepted reply: the alternation holds, and every
    kept reply answers exactly the prompt it answered in the episode.
    """
    rejected = rejected_replies(conversation)
    skip = set(rejected) | {i + 1 for i in rejected}
    return [m for i, m in enumerate(conversation) if i not in skip]


def public_conversation(
    trajectory: Trajectory, stats: Counter[str] | None = None
) -> list[PublicMessage]:
    """The public conversation of ``trajectory`` (rules in the module docstring).

    ``stats``, when given, counts what was dropped or repaired: ``private``, ``harness``,
    ``statem`` (turns and their output), ``merged_user``, ``dropped_assistant`` (earlier
    of two adjacent replies), ``trimmed``.
    """
    tally: Counter[str] = stats if stats is not None else Counter()
    keep_harness = trajectory.harness == PLAIN_HARNESS
    statem = trajectory.harness == "statem"
    kept: list[PublicMessage] = []
    skipping = False  # inside a statem-only turn's output
    for message in trajectory.messages:
        origin = message.origin
        if origin == "private":
            tally["private"] += 1
            continue
        if origin == "model":
            commands = message.commands
            skipping = statem and any(is_statem_command(c.keystrokes) for c in commands)
            if skipping:
                tally["statem"] += 1
                continue
            kept.append(PublicMessage(role="assistant", content=message.content, source=message))
            continue
        if skipping and origin in ("env", "harness"):
            tally["statem"] += 1
            continue
        if origin == "harness" and not keep_harness and not is_terminus_protocol(message.content):
            tally["harness"] += 1
            continue
        role: Role = "system" if message.role == "system" and not kept else "user"
        kept.append(PublicMessage(role=role, content=message.content))
    return _alternate(kept, tally)


def _alternate(messages: list[PublicMessage], tally: Counter[str]) -> list[PublicMessage]:
    out: list[PublicMessage] = []
    for message in messages:
        last = out[-1] if out else None
        if last is None or last.role != message.role:
            out.append(message)
        elif message.role == "assistant":
            tally["dropped_assistant"] += 1
            out[-1] = message
        else:
            tally["merged_user"] += 1
            out[-1] = PublicMessage(role="user", content=f"{last.content}\n\n{message.content}")
    head = 1 if out and out[0].role == "system" else 0
    while len(out) > head and out[head].role == "assistant":
        tally["trimmed"] += 1
        del out[head]
    while out and out[-1].role != "assistant":
        tally["trimmed"] += 1
        out.pop()
    return out


def public_messages(trajectory: Trajectory) -> list[dict[str, str]]:
    """The chat a deployed plain Terminus 2 model sees and says, as ``{role, content}``.

    Empty when nothing public is left (no model reply).
    """
    return [{"role": m.role, "content": m.content} for m in public_conversation(trajectory)]


def check_conversation(messages: Sequence[Mapping[str, object]]) -> None:
    """Raise ValueError unless ``messages`` is in TRL's conversational format.

    A list of ``{role, content}`` with string content, roles in system/user/assistant,
    an optional system message first, then user and assistant alternating, starting with
    user and ending with assistant. An assistant message may carry OpenAI fine-tuning's
    ``weight`` (0 or 1); no other message may.
    """
    if not messages:
        raise ValueError("the conversation is empty")
    start = 1 if messages[0].get("role") == "system" else 0
    for index, message in enumerate(messages):
        keys = set(message)
        if message.get("role") == "assistant" and "weight" in keys:
            if message["weight"] not in (0, 1) or isinstance(message["weight"], bool):
                raise ValueError(f"messages[{index}] has weight {message['weight']!r}, not 0 or 1")
            keys.discard("weight")
        if keys != {"role", "content"} or not isinstance(message["content"], str):
            raise ValueError(f"messages[{index}] is not a {{role, content}} pair of strings")
        if index < start:
            continue
        expected = "user" if (index - start) % 2 == 0 else "assistant"
        if message["role"] != expected:
            raise ValueError(
                f"messages[{index}] has role {message['role']!r}, expected {expected!r}"
            )
    if messages[-1]["role"] != "assistant" or len(messages) <= start:
        raise ValueError("the conversation does not end with an assistant message")
