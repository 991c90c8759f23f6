"""One exported trajectory as an ATIF document (Harbor's Agent Trajectory Interchange Format).

The document is what Harbor 0.26.0's own Terminus 2 writes with ``trajectory_config =
{"raw_content": True}`` (its mode for SFT data): step 1 is the ``user`` task prompt;
every model reply is an ``agent`` step whose ``message`` is the raw reply, with **no**
``tool_calls`` (the commands are inside the reply; Harbor's ``traces export`` appends a
``<tool_call>`` block per call to the assistant text, so a step with both would train on
every command twice), and whose ``observation`` is the next prompt the model was shown.
So ``harbor traces export`` over our files gives exactly the conversations of
``sft.jsonl`` (``scripts/record_harbor_traces.py`` records that with Harbor's own code;
``tests/export/test_harbor_traces.py`` compares).

The agent is Harbor's ``terminus-2`` at Harbor's version for it (``2.0.0``) where the
harness is plain Terminus 2; which program wrote the file is in ``agent.extra``
(``producer``, ``producer_version``). A reply Terminus 2 rejected (unparseable, or cut by
the output limit) carries ``extra.weight = 0`` and ``extra.rejected`` (the reason), as its
message does in the JSONL files. Only the public conversation goes in (:mod:`.public`).
Timestamps are left out (optional in ATIF; wall-clock times would make two exports of the
same store differ), and so are cached tokens (they depend on the server's cache state).
Validated against Harbor's pydantic model by ``scripts/record_harbor_atif.py``, which
records its JSON schema to ``tests/export/golden/atif_schema.json`` for the tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._version import __version__
from .public import PublicMessage

__all__ = ["ATIF_VERSION", "HARBOR_AGENTS", "atif_document"]

ATIF_VERSION = "ATIF-v1.7"
HARBOR_AGENTS = {"terminus2": ("terminus-2", "2.0.0")}
"""Our harness -> Harbor's agent name and the version Harbor reports for it
(``Terminus2.version()`` in Harbor 0.26.0), where Harbor has the same agent."""


def _agent_step(
    step_id: int, reply: PublicMessage, prompt: str | None, model: str, rejected: str | None
) -> dict[str, Any]:
    step: dict[str, Any] = {
        "step_id": step_id,
        "source": "agent",
        "model_name": model,
        "message": reply.content,
    }
    if prompt is not None:
        step["observation"] = {"results": [{"content": prompt}]}
    usage = reply.source.usage if reply.source is not None else None
    if usage is not None:
        step["metrics"] = {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
        }
    if rejected is not None:
        step["extra"] = {"weight": 0, "rejected": rejected}
    return step


def atif_document(
    conversation: list[PublicMessage],
    *,
    session_id: str,
    harness: str,
    model: str,
    extra: dict[str, Any],
    rejected: Mapping[int, str] | None = None,
) -> dict[str, Any]:
    """The ATIF document of a public conversation (as from :func:`.public_conversation`).

    ``conversation`` must be a valid alternation (optional system, then user/assistant,
    ending with assistant); ``rejected`` maps the index of each reply Terminus 2 rejected
    to why (:func:`.rejected_replies`); ``extra`` goes to the root's ``extra`` as is.
    """
    rejected = rejected or {}
    steps: list[dict[str, Any]] = []
    index = 0
    if conversation and conversation[0].role == "system":
        steps.append({"step_id": 1, "source": "system", "message": conversation[0].content})
        index = 1
    steps.append(
        {"step_id": len(steps) + 1, "source": "user", "message": conversation[index].content}
    )
    totals = {"prompt": 0, "completion": 0}
    for at in range(index + 1, len(conversation), 2):
        prompt = conversation[at + 1].content if at + 1 < len(conversation) else None
        step = _agent_step(len(steps) + 1, conversation[at], prompt, model, rejected.get(at))
        metrics = step.get("metrics", {})
        totals["prompt"] += metrics.get("prompt_tokens", 0)
        totals["completion"] += metrics.get("completion_tokens", 0)
        steps.append(step)
    name, version = HARBOR_AGENTS.get(harness, (harness, __version__))
    return {
        "schema_version": ATIF_VERSION,
        "session_id": session_id,
        "agent": {
            "name": name,
            "version": version,
            "model_name": model,
            "extra": {"producer": "rsr_async", "producer_version": __version__, "harness": harness},
        },
        "steps": steps,
        "notes": (
            "Public conversation only (task prompt, model replies, observations and the "
            "Terminus 2 protocol prompts); private guidance and harness control text removed. "
            "Raw-content mode: each reply as sent, its commands inside it (no tool_calls)."
        ),
        "final_metrics": {
            "total_prompt_tokens": totals["prompt"],
            "total_completion_tokens": totals["completion"],
            "total_steps": len(steps),
        },
        "extra": extra,
    }
