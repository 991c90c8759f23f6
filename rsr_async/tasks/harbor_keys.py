"""Every key of Harbor 0.26's task schema (``task.toml``), and what this engine does with it.

One table, :data:`HARBOR_TASK_KEYS`: each dotted key (``environment.cpus``; a list of
tables as ``steps[].name``) is *supported*, *supported with a difference* (said in its
note), or *refused at load* with the key named. A refused key refuses everything under
it; a supported table lists its children. Keys Harbor does not know are refused too:
Harbor 0.26 ignores them (its models do not forbid extras), so a misspelt
``timout_sec`` would silently do nothing there; here it is one clear line at load.

The table is checked against Harbor's own pydantic models without Harbor:
``scripts/record_harbor_task_keys.py`` walks ``harbor.models.task.config.TaskConfig`` and
records every key in ``tests/tasks/fixtures/harbor_task_keys.json``;
``tests/tasks/test_harbor_keys.py`` fails when a recorded key has no row here or a row
names no recorded key. ``README.md`` prints the same table (:func:`markdown_table`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from ..errors import TaskError

__all__ = [
    "HARBOR_TASK_KEYS",
    "KeyRule",
    "check_task_keys",
    "markdown_table",
]

Status = Literal["supported", "difference", "refused"]


class KeyRule(msgspec.Struct, frozen=True, kw_only=True):
    """What one task.toml key means here."""

    status: Status
    note: str = ""
    """The difference from Harbor, or why the key is refused."""
    values: tuple[object, ...] | None = None
    """When given: the only values accepted (others are refused, naming the value)."""
    free: bool = False
    """A free-form table (``metadata``, ``env``): its own keys are the task's."""


_S: Status = "supported"
_D: Status = "difference"
_R: Status = "refused"


def _rule(status: Status, note: str = "", **kw: Any) -> KeyRule:
    return KeyRule(status=status, note=note, **kw)


HARBOR_TASK_KEYS: dict[str, KeyRule] = {
    "schema_version": _rule(_S, "read; every Harbor 1.x schema is read the same way"),
    "version": _rule(_S, "Harbor's older name for schema_version; kept in metadata"),
    "source": _rule(_S, "kept in metadata"),
    "metadata": _rule(_S, "free-form: category, tags, difficulty become domain labels; the rest is kept", free=True),
    "task": _rule(_S),
    "task.name": _rule(_S, '"org/name" or a bare name'),
    "task.description": _rule(_S, "kept in metadata"),
    "task.version": _rule(_S, "kept in metadata (package_version)"),
    "task.authors": _rule(_S, "kept in metadata"),
    "task.authors[].name": _rule(_S),
    "task.authors[].email": _rule(_S),
    "task.keywords": _rule(_S, "kept in metadata"),
    "agent": _rule(_S),
    "agent.timeout_sec": _rule(_D, "unset means 600 s here (Harbor: no limit): every episode has a deadline"),
    "agent.user": _rule(_R, "the agent's shell runs as root (the image's default user is not switched)"),
    "agent.network_mode": _rule(_R, "per-phase network policies are not supported; use [environment]"),
    "agent.allowed_hosts": _rule(_R, "network allowlists are not supported (no egress control here)"),
    "verifier": _rule(_S),
    "verifier.timeout_sec": _rule(_S),
    "verifier.env": _rule(_S, free=True),
    "verifier.user": _rule(_S, "a name or uid (NAME[:GROUP]) from the sandbox's /etc/passwd"),
    "verifier.environment_mode": _rule(
        _S, '"shared" (default; the agent\'s processes stay alive) or "separate" (a fresh sandbox of the '
        "task's environment holding only the artifacts)", values=("shared", "separate"),
    ),
    "verifier.environment": _rule(_R, "a verifier environment of its own is not supported yet; "
                                  "environment_mode = \"separate\" without it grades in a fresh copy of [environment]"),
    "verifier.collect": _rule(_S, "run in the agent's sandbox after its turn, best effort (as in Harbor)"),
    "verifier.collect[].command": _rule(_S),
    "verifier.collect[].service": _rule(_S, 'only "main": hooks in compose sidecars are not supported yet',
                                        values=("main",)),
    "verifier.collect[].timeout_sec": _rule(_S),
    "verifier.collect[].user": _rule(_S),
    "verifier.network_mode": _rule(_R, "per-phase network policies are not supported; the verifier has no network"),
    "verifier.allowed_hosts": _rule(_R, "network allowlists are not supported (no egress control here)"),
    "environment": _rule(_S),
    "environment.build_timeout_sec": _rule(_S),
    "environment.docker_image": _rule(_D, "never pulled: it must be on the Docker host (or built from environment/)"),
    "environment.os": _rule(_S, "linux only", values=("linux", "LINUX", "Linux")),
    "environment.cpus": _rule(_S),
    "environment.memory_mb": _rule(_S),
    "environment.memory": _rule(_S, 'Harbor\'s older "2G" form of memory_mb'),
    "environment.storage_mb": _rule(_D, "a writable-layer limit where the Docker storage driver allows one"),
    "environment.storage": _rule(_S, 'Harbor\'s older "10G" form of storage_mb'),
    "environment.gpus": _rule(_S, "0 only: sandboxes get no GPU", values=(0,)),
    "environment.gpu_types": _rule(_R, "sandboxes get no GPU"),
    "environment.tpu": _rule(_R, "sandboxes get no TPU"),
    "environment.mcp_servers": _rule(_R, "MCP servers are not started for the agent here"),
    "environment.env": _rule(_D, "taken as written: ${VAR} is not read from the host's environment", free=True),
    "environment.skills_dir": _rule(_R, "agent skills are not installed here"),
    "environment.healthcheck": _rule(_R, "an environment healthcheck is not run here; use a compose service's healthcheck"),
    "environment.workdir": _rule(_S),
    "environment.allow_internet": _rule(
        _D, "network only when sandbox.allow_network also allows it; unset means no network (Harbor: network)"
    ),
    "environment.network_mode": _rule(
        _D, '"no-network", or "public" (= allow_internet = true, so still subject to sandbox.allow_network); '
        '"allowlist" is refused', values=("no-network", "public"),
    ),
    "environment.allowed_hosts": _rule(_R, "network allowlists are not supported (no egress control here)"),
    "solution": _rule(_S),
    "solution.env": _rule(_R, "the oracle runs with [environment].env only"),
    "steps": _rule(_D, "run one after another in one sandbox, as Harbor 0.26's MultiStepTrial runs them; "
                   "each step is a fresh chat on the same terminal; multi-step episodes are not rewritten"),
    "steps[].name": _rule(_S, "steps/<name>/ holds instruction.md, and optionally tests/, solution/, workdir/"),
    "steps[].agent": _rule(_S),
    "steps[].agent.timeout_sec": _rule(_S, "unset: the task's [agent].timeout_sec"),
    "steps[].agent.user": _rule(_R, "the agent's shell runs as root (the image's default user is not switched)"),
    "steps[].agent.network_mode": _rule(_R, "per-phase network policies are not supported; use [environment]"),
    "steps[].agent.allowed_hosts": _rule(_R, "network allowlists are not supported (no egress control here)"),
    "steps[].verifier": _rule(_S),
    "steps[].verifier.timeout_sec": _rule(_S, "unset: the task's [verifier].timeout_sec"),
    "steps[].verifier.env": _rule(_S, "over the task's [verifier].env", free=True),
    "steps[].verifier.user": _rule(_S, "unset: the task's [verifier].user"),
    "steps[].verifier.environment_mode": _rule(_S, "unset: the task's mode", values=("shared", "separate")),
    "steps[].verifier.environment": _rule(_R, "a verifier environment of its own is not supported yet"),
    "steps[].verifier.collect": _rule(_S, "after the task's hooks"),
    "steps[].verifier.collect[].command": _rule(_S),
    "steps[].verifier.collect[].service": _rule(_S, 'only "main"', values=("main",)),
    "steps[].verifier.collect[].timeout_sec": _rule(_S),
    "steps[].verifier.collect[].user": _rule(_S),
    "steps[].verifier.network_mode": _rule(_R, "per-phase network policies are not supported; the verifier has no network"),
    "steps[].verifier.allowed_hosts": _rule(_R, "network allowlists are not supported (no egress control here)"),
    "steps[].min_reward": _rule(_S, "a number (the reward key) or a table of key thresholds; below one, or a key "
                                "missing, and the remaining steps are not run", free=True),
    "steps[].healthcheck": _rule(_S, "run after the step's setup, before the agent (Docker HEALTHCHECK "
                                 "semantics); failing, the step is not graded and no later step runs"),
    "steps[].healthcheck.command": _rule(_S),
    "steps[].healthcheck.interval_sec": _rule(_S),
    "steps[].healthcheck.timeout_sec": _rule(_S),
    "steps[].healthcheck.start_period_sec": _rule(_S),
    "steps[].healthcheck.start_interval_sec": _rule(_S),
    "steps[].healthcheck.retries": _rule(_S),
    "steps[].artifacts": _rule(_S, "after the task's artifacts, for a separate verifier"),
    "steps[].artifacts[].source": _rule(_S, "an absolute path without '..'"),
    "steps[].artifacts[].destination": _rule(_D, "names Harbor's copy on the host; no host copy is kept here"),
    "steps[].artifacts[].exclude": _rule(_R, "excluding parts of an artifact is not supported yet"),
    "steps[].artifacts[].service": _rule(_S, 'only "main"', values=("main",)),
    "multi_step_reward_strategy": _rule(_S, '"mean" (default: per-key mean over the graded steps, a missing key '
                                        'counting 0) or "final" (the last run step\'s rewards)',
                                        values=("mean", "final")),
    "artifacts": _rule(_S, "copied from the agent's sandbox into a separate verifier's (with /logs/artifacts)"),
    "artifacts[].source": _rule(_S, "an absolute path without '..'"),
    "artifacts[].destination": _rule(_D, "names Harbor's copy on the host; no host copy is kept here"),
    "artifacts[].exclude": _rule(_R, "excluding parts of an artifact is not supported yet"),
    "artifacts[].service": _rule(_S, 'only "main": artifacts of compose sidecars are not supported yet',
                                 values=("main",)),
}
"""Every Harbor 0.26 ``task.toml`` key (and older alias Harbor still reads) → its rule."""


def _lookup(key: str) -> tuple[str, KeyRule] | None:
    """The row for ``key`` or for the nearest refused/free ancestor that covers it."""
    parts = key.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        rule = HARBOR_TASK_KEYS.get(prefix)
        if rule is None and prefix.endswith("[]"):  # an item of a list: the list's row
            prefix = prefix[:-2]
            rule = HARBOR_TASK_KEYS.get(prefix)
            if rule is not None and not (rule.status == "refused" or rule.free):
                return None
        if rule is None:
            continue
        if end == len(parts) or rule.status == "refused" or rule.free:
            return prefix, rule
        return None  # a supported table whose child has no row: unknown
    return None


def check_task_keys(data: Mapping[str, Any], *, task: str, path: Path) -> None:
    """Refuse, naming the key, anything in ``data`` (a parsed task.toml) that the table
    refuses, a value outside a key's accepted ones, and keys Harbor 0.26 does not know."""

    def bad(key: str, message: str) -> TaskError:
        return TaskError(f"task.toml [{key}]: {message}", task=task, path=str(path))

    def walk(table: Mapping[str, Any], prefix: str) -> None:
        for name, value in table.items():
            key = f"{prefix}{name}"
            found = _lookup(key)
            if found is None:
                raise bad(key, "not a Harbor 0.26 task key (Harbor ignores it, so it would do "
                          "nothing there either); remove or correct it")
            row, rule = found
            if rule.status == "refused" and row == key and value in ([], {}):
                continue  # an empty list or table asks for nothing (mcp_servers = [])
            if rule.status == "refused":
                raise bad(key, f"refused: {rule.note}" if row == key else f"refused with [{row}]: {rule.note}")
            if rule.free and row != key:
                continue
            if rule.values is not None and not any(
                value == allowed and type(value) is type(allowed) for allowed in rule.values
            ):
                shown = ", ".join(repr(v) for v in rule.values)
                raise bad(key, f"{value!r} is not supported (accepted: {shown}; {rule.note})")
            if rule.free:
                continue
            if isinstance(value, Mapping):
                walk(value, f"{key}.")
            elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
                for item in value:
                    walk(item, f"{key}[].")

    walk(data, "")


def markdown_table() -> str:
    """The table as README.md prints it."""
    words = {"supported": "supported", "difference": "supported with this difference",
             "refused": "refused at load"}
    lines = ["| task.toml key | here | note |", "|---|---|---|"]
    for key, rule in HARBOR_TASK_KEYS.items():
        values = f" (accepted: {', '.join(repr(v) for v in rule.values)})" if rule.values else ""
        lines.append(f"| `{key}` | {words[rule.status]} | {rule.note}{values} |")
    return "\n".join(lines)
