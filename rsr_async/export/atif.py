"""One exported trajectory as an ATIF document (Harbor's Agent Trajectory Interchange Format).

The shape follows what Harbor 0.25.0's own Terminus 2 writes: step 1 is the ``user`` task
prompt; every model reply is an ``agent`` step whose ``message`` is the raw reply (as
Harbor's ``raw_content`` mode writes for SFT), whose ``tool_calls`` are the commands it
ran (``bash_command`` with ``keystrokes`` and ``duration``; ``mark_task_complete``), and
whose ``observation`` is the next prompt the model was shown. Only the public
conversation goes in (:mod:`.public`): nothing private, nothing of StateM's or RSRT's
control text. Timestamps are left out (optional in ATIF; ours are relative to the
episode's start, and wall-clock times would make two exports differ). Validated against
Harbor's pydantic model by ``scripts/record_harbor_atif.py``, which records its JSON
schema to ``tests/export/golden/atif_schema.json`` for the tests.
"""

from __future__ import annotations

from typing import Any

from .. import __version__
from .public import PublicMessage

__all__ = ["ATIF_VERSION", "atif_document"]

ATIF_VERSION = "ATIF-v1.7"
AGENT_NAMES = {"terminus2": "terminus-2"}
"""Harbor's name for our harnesses, where Harbor has one."""


def _agent_step(
    step_id: int, episode: int, reply: PublicMessage, prompt: str | None
) -> dict[str, Any]:
    step: dict[str, Any] = {"step_id": step_id, "source": "agent", "message": reply.content}
    source = reply.source
    calls: list[dict[str, Any]] = []
    if source is not None:
        calls = [
            {
                "tool_call_id": f"call_{episode}_{i + 1}",
                "function_name": "bash_command",
                "arguments": {"keystrokes": c.keystrokes, "duration": c.duration},
            }
            for i, c in enumerate(source.commands)
        ]
        if source.task_complete:
            calls.append(
                {
                    "tool_call_id": f"call_{episode}_task_complete",
                    "function_name": "mark_task_complete",
                    "arguments": {},
                }
            )
        usage = source.usage
        if usage is not None:
            # No cached_tokens (optional in ATIF): how much of a prompt the server had
            # cached depends on its cache state, not on the trajectory, and the same
            # store must give byte-identical files (a resumed run's cache is cold).
            step["metrics"] = {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
            }
    if calls:
        step["tool_calls"] = calls
    if prompt is not None:
        # Harbor links the observation to a call only when one command ran.
        n_commands = len(source.commands) if source is not None else 0
        result: dict[str, Any] = {"content": prompt}
        if n_commands == 1:
            result["source_call_id"] = f"call_{episode}_1"
        step["observation"] = {"results": [result]}
    return step


def atif_document(
    conversation: list[PublicMessage],
    *,
    session_id: str,
    harness: str,
    model: str,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The ATIF document of a public conversation (as from :func:`.public_conversation`).

    ``conversation`` must be a valid alternation (optional system, then user/assistant,
    ending with assistant); ``extra`` goes to the root's ``extra`` as is.
    """
    steps: list[dict[str, Any]] = []
    index = 0
    if conversation and conversation[0].role == "system":
        steps.append({"step_id": 1, "source": "system", "message": conversation[0].content})
        index = 1
    steps.append(
        {"step_id": len(steps) + 1, "source": "user", "message": conversation[index].content}
    )
    replies = conversation[index + 1 :: 2]
    prompts = conversation[index + 2 :: 2]
    totals = {"prompt": 0, "completion": 0}
    for episode, reply in enumerate(replies):
        prompt = prompts[episode].content if episode < len(prompts) else None
        step = _agent_step(len(steps) + 1, episode, reply, prompt)
        metrics = step.get("metrics", {})
        totals["prompt"] += metrics.get("prompt_tokens", 0)
        totals["completion"] += metrics.get("completion_tokens", 0)
        steps.append(step)
    return {
        "schema_version": ATIF_VERSION,
        "session_id": session_id,
        "agent": {
            "name": AGENT_NAMES.get(harness, harness),
            "version": __version__,
            "model_name": model,
            "extra": {"producer": "rsr_async", "harness": harness},
        },
        "steps": steps,
        "notes": (
            "Public conversation only (task prompt, model replies, observations and the "
            "Terminus 2 protocol prompts); private guidance and harness control text removed."
        ),
        "final_metrics": {
            "total_prompt_tokens": totals["prompt"],
            "total_completion_tokens": totals["completion"],
            "total_steps": len(steps),
        },
        "extra": extra,
    }
