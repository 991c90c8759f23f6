"""Record every key of Harbor 0.26.0's task schema (``task.toml``), from its own pydantic
models, and the compose variables Harbor 0.26.0 and terminal-bench 0.2.18 set.

Runs on demand, not in CI: Harbor needs Python >= 3.12.

    python3.12 -m venv /tmp/harbor26 && /tmp/harbor26/bin/pip install harbor==0.26.0
    /tmp/harbor26/bin/pip install --no-deps terminal-bench==0.2.18 && /tmp/harbor26/bin/pip install docker tabulate ruamel.yaml streamlit sqlalchemy
    /tmp/harbor26/bin/python scripts/record_harbor_task_keys.py

Writes ``tests/tasks/fixtures/harbor_task_keys.json``:

- ``keys``: every dotted key reachable from ``harbor.models.task.config.TaskConfig``,
  walking nested models, lists of models (``steps[]``, ``verifier.collect[]``) and
  optionals, with the annotation Harbor gives it. Free-form tables (``metadata``, ``env``
  maps) end the walk.
- ``aliases``: the older spellings Harbor's ``model_validator(mode="before")`` hooks
  accept (``version``, ``[environment].memory``/``storage``), each confirmed here by
  feeding it to ``TaskConfig`` and reading the field it lands in.
- ``unknown_key_policy``: what Harbor does with a key it does not know (fed one).
- ``compose_variables``: the names Harbor's ``ComposeInfraEnvVars`` (upper-cased, as its
  ``to_env_dict`` does) and ``legacy_log_mount_env_vars`` set, and terminal-bench's
  ``DockerComposeEnvVars`` (``T_BENCH_`` + upper-cased field, as its ``to_env_dict``).

``tests/tasks/test_harbor_keys.py`` checks ``rsr_async.tasks.harbor_keys.HARBOR_TASK_KEYS``
and ``rsr_async.sandbox.compose``'s variable lists against this file, without Harbor.
"""

from __future__ import annotations

import json
import os
import sys
import types
import typing
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at import

from harbor.environments.docker.compose_env import (  # noqa: E402
    ComposeInfraEnvVars,
    legacy_log_mount_env_vars,
)
from harbor.models.task import config as task_config  # noqa: E402
from harbor.models.task.config import TaskConfig  # noqa: E402
from pydantic import BaseModel  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "tasks" / "fixtures" / "harbor_task_keys.json"


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Optional, Union, list; a
    forward reference such as ``list["MCPServerConfig"]`` resolved in Harbor's module)."""
    if isinstance(annotation, typing.ForwardRef | str):
        name = annotation.__forward_arg__ if isinstance(annotation, typing.ForwardRef) else annotation
        annotation = getattr(task_config, name, None)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    origin = typing.get_origin(annotation)
    if origin is dict or origin is typing.Literal:
        return []  # a free-form table (its keys are the task's own), or plain values
    if origin in (list, typing.Union, types.UnionType) or origin is not None:
        for arg in typing.get_args(annotation):
            found += _models_in(arg)
    return found


def _is_list(annotation: Any) -> bool:
    if typing.get_origin(annotation) is list:
        return True
    return any(_is_list(arg) for arg in typing.get_args(annotation)
               if typing.get_origin(annotation) in (typing.Union, types.UnionType))


def _walk(model: type[BaseModel], prefix: str, out: dict[str, str], seen: tuple[type, ...]) -> None:
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = field.annotation
        out[key] = str(annotation).replace("typing.", "").replace("harbor.models.task.config.", "")
        for sub in _models_in(annotation):
            if sub in seen:
                continue  # [verifier.environment] is an EnvironmentConfig: walked once below
            child = f"{key}[]." if _is_list(annotation) else f"{key}."
            _walk(sub, child, out, (*seen, sub))


def _aliases() -> dict[str, str]:
    """Older spellings: each fed to TaskConfig, the field it lands in read back."""
    found: dict[str, str] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = TaskConfig.model_validate({"version": "9.9"})
        if config.schema_version == "9.9":
            found["version"] = "schema_version"
        config = TaskConfig.model_validate({"environment": {"memory": "3G"}})
        if config.environment.memory_mb == 3072:
            found["environment.memory"] = "environment.memory_mb"
        config = TaskConfig.model_validate({"environment": {"storage": "5G"}})
        if config.environment.storage_mb == 5120:
            found["environment.storage"] = "environment.storage_mb"
    return found


def _unknown_key_policy() -> str:
    try:
        TaskConfig.model_validate({"environment": {"no_such_key": 1}, "no_such_table": {}})
    except Exception as exc:  # a refusal is the answer too
        return f"refused: {type(exc).__name__}"
    return "ignored"


def _compose_variables() -> dict[str, list[str]]:
    infra = ComposeInfraEnvVars(
        main_image_name="x", context_dir="x", prebuilt_image_name="x",
        egress_control_sidecar_image_name="x", egress_control_initial_network_mode="x",
        egress_control_initial_allowed_hosts="x", cpus=1, memory="1M",
    ).to_env_dict(include_os_env=False)
    mounts = [
        {"type": "bind", "source": "/h", "target": f"/logs/{kind}"}
        for kind in ("verifier", "agent", "artifacts")
    ]
    legacy = legacy_log_mount_env_vars(mounts, host_value="source")  # type: ignore[arg-type]
    recorded = {"harbor": sorted(infra), "harbor_log_mounts": sorted(legacy)}
    try:
        from terminal_bench.terminal.docker_compose_manager import DockerComposeEnvVars
    except ImportError as exc:
        print(f"terminal-bench not importable ({exc}); its variables are not recorded", file=sys.stderr)
        return recorded
    fields = {name: "x" for name in DockerComposeEnvVars.model_fields}
    recorded["terminal_bench"] = sorted(DockerComposeEnvVars(**fields).to_env_dict())
    recorded["terminal_bench_version"] = [version("terminal-bench")]
    return recorded


def main() -> int:
    keys: dict[str, str] = {}
    _walk(TaskConfig, "", keys, (TaskConfig,))
    recording = {
        "harbor": version("harbor"),
        "python": sys.version.split()[0],
        "keys": dict(sorted(keys.items())),
        "aliases": _aliases(),
        "unknown_key_policy": _unknown_key_policy(),
        "compose_variables": _compose_variables(),
    }
    OUT.write_text(json.dumps(recording, indent=1, sort_keys=True) + "\n")
    print(f"{len(keys)} keys, {len(recording['aliases'])} aliases -> {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
