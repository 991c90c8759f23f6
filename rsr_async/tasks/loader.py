"""Load one task directory, Harbor or legacy terminal-bench, into a :class:`Task`.

Harbor (Terminal-Bench 2.x)::

    instruction.md  task.toml  environment/Dockerfile  tests/test.sh  solution/solve.sh

Legacy terminal-bench::

    task.yaml  Dockerfile  run-tests.sh  tests/  solution.sh

Harbor 0.25 names a task ``[task] name = "org/name"``; older tasks give a bare name or
none (the directory's). The short name (after ``org/``) is :attr:`Task.name`, the whole
one :attr:`Task.qualified_name`. As Harbor does, leading canary lines (``<!-- ... canary
... -->``, ``# ... canary ...``) are cut from the instruction: they mark data provenance
and are not for the agent.

Multi-step Harbor 0.26 tasks (``[[steps]]``) load into :attr:`Task.steps`: each step's
``steps/<name>/instruction.md``, its ``tests/`` (over the task's), ``solution/``,
``workdir/`` (with ``setup.sh``), timeouts, verifier settings and ``min_reward``, each
resolved against the task's as Harbor resolves them; the task-level ``instruction.md``
is then not read (Harbor ignores it too). A legacy task's ``parser_name`` must be one
terminal-bench ships (:data:`~rsr_async.tasks.parsers.PARSERS`).

Both become the same record. Domain labels (category, tags, difficulty) come from
Harbor's free-form ``[metadata]`` table or the legacy YAML's top-level keys; anything
else in those tables is kept in ``Task.metadata``. Every error names the task and file.

A task's own faults are refused here, so they are reported as a malformed task rather
than charged to a model or to the infrastructure later:

- timeouts, ``cpus``, ``memory_mb`` and ``storage_mb`` must be finite, > 0 and at most
  :data:`MAX_TIMEOUT_S` (a week), :data:`MAX_CPUS`, :data:`MAX_MEMORY_MB` and
  :data:`MAX_STORAGE_MB` (1 TiB each);
- an instruction over :data:`MAX_INSTRUCTION_BYTES` (1 MiB);
- a symlink anywhere in the task directory that resolves outside it (it would put a host
  file into the prompt, the stored trajectory, the image or the verifier);
- a ``docker-compose.yaml`` (Harbor: in ``environment/``; terminal-bench: in the task's
  directory) outside the supported subset (:mod:`rsr_async.sandbox.compose`), named by key.
- a ``task.toml`` key that :data:`~rsr_async.tasks.harbor_keys.HARBOR_TASK_KEYS` refuses,
  a value it does not accept, or a key Harbor 0.26's schema does not have, named by key.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import yaml

from ..errors import TaskError
from ..sandbox.compose import COMPOSE_FILE, plain_client_environment, task_compose
from ..schema import CollectHook, StepHealthcheck, Task, TaskStep
from .harbor_keys import check_task_keys
from .parsers import PARSERS

__all__ = [
    "HARBOR_PACKAGE_NAME",
    "MAX_INSTRUCTION_BYTES",
    "detect_format",
    "is_task_dir",
    "load_task",
    "strip_canary",
]

HARBOR_MARKER = "task.toml"
LEGACY_MARKER = "task.yaml"

# Harbor's own defaults (harbor.models.task.config); legacy terminal-bench's task.yaml ones.
# Harbor 0.25 leaves [agent].timeout_sec unset (no limit); an episode here always has one.
HARBOR_AGENT_TIMEOUT_S = 600.0
HARBOR_VERIFIER_TIMEOUT_S = 600.0
HARBOR_BUILD_TIMEOUT_S = 600.0
LEGACY_AGENT_TIMEOUT_S = 360.0
LEGACY_TEST_TIMEOUT_S = 60.0

MAX_INSTRUCTION_BYTES = 1 << 20
"""Longest instruction a task may have (1 MiB, UTF-8). At ~4 bytes a token that is ~250k
tokens: 8x the default 32,768-token context and past what served checkpoints take, while
Terminal-Bench instructions are a few KB. A longer one can only end as a context failure
charged to the model; it is the task's fault, so the loader refuses it. A constant, not a
setting: whether a task is well formed must not depend on the run that loads it."""


_NAME_PART = r"[a-zA-Z0-9][a-zA-Z0-9._-]*"
HARBOR_PACKAGE_NAME = re.compile(rf"^{_NAME_PART}/{_NAME_PART}$")
"""Harbor 0.25's ``org/name`` (``harbor.constants.ORG_NAME_PATTERN``; ``..`` is refused too)."""

_CANARY_LINE = re.compile(r"<!--.*canary.*-->|#.*canary.*", re.IGNORECASE)


def strip_canary(text: str) -> str:
    """Drop the canary comment lines that open ``text`` and the blank lines after them, as
    Harbor's ``Task`` does before an instruction reaches the agent."""
    lines = text.split("\n")
    start = 0
    while start < len(lines) and _CANARY_LINE.fullmatch(lines[start].strip()):
        start += 1
    while start < len(lines) and not lines[start].strip():
        start += 1
    return "\n".join(lines[start:])


def is_task_dir(path: Path) -> bool:
    """True when ``path`` holds a ``task.toml`` (Harbor) or ``task.yaml`` (legacy)."""
    return (path / HARBOR_MARKER).is_file() or (path / LEGACY_MARKER).is_file()


def detect_format(path: Path) -> str:
    """``"harbor"`` or ``"terminal-bench"``; raises TaskError when it is neither."""
    if (path / HARBOR_MARKER).is_file():
        return "harbor"
    if (path / LEGACY_MARKER).is_file():
        return "terminal-bench"
    raise TaskError(
        "not a task directory: expected task.toml (Harbor) or task.yaml (terminal-bench)",
        task=path.name,
        path=str(path),
    )


def load_task(path: Path) -> Task:
    """Load the task in directory ``path``.

    Raises :class:`TaskError` (with ``task`` and ``path`` naming the offending file) when a
    config file does not parse, a field has the wrong type, or the instruction or tests
    are missing.
    """
    path = Path(path).resolve()
    if not path.is_dir():
        raise TaskError("task directory not found", task=path.name, path=str(path))
    task_format = detect_format(path)
    _check_symlinks(path, path.name)  # before any file of the task is read
    if task_format == "harbor":
        return _load_harbor(path)
    return _load_legacy(path)


# -- helpers -------------------------------------------------------------------------


def _read_text(file: Path, task: str, *, limit: int | None = None) -> str:
    try:
        if limit is not None and file.is_file() and (size := file.stat().st_size) > limit:
            raise TaskError(
                f"{file.name} is {size} bytes, over the {limit}-byte limit for an instruction "
                "(MAX_INSTRUCTION_BYTES); shorten it",
                task=task,
                path=str(file),
            )
        return file.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise TaskError(f"missing {file.name}", task=task, path=str(file)) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"cannot read {file.name}: {exc}", task=task, path=str(file)) from exc


def _is_positive(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _check_symlinks(root: Path, task: str) -> None:
    """Refuse any symlink under ``root`` that resolves outside it (or cannot be resolved):
    ``instruction.md -> /etc/hostname`` would put a host file into the prompt and the
    stored trajectory, and a link in tests/, solution/ or the build context would copy
    one into a container."""
    for current, dirs, files in os.walk(root):  # does not follow symlinked directories
        for entry in (*dirs, *files):
            link = Path(current, entry)
            if not link.is_symlink():
                continue
            try:
                target = link.resolve()
            except (OSError, RuntimeError) as exc:  # a loop
                raise TaskError(
                    f"{link.relative_to(root)} is a symlink that cannot be resolved ({exc}); refused",
                    task=task, path=str(link),
                ) from exc
            if not target.is_relative_to(root):
                raise TaskError(
                    f"{link.relative_to(root)} is a symlink to {target}, outside the task "
                    "directory; refused (copy the file into the task instead)",
                    task=task, path=str(link),
                )


MAX_TIMEOUT_S = 7 * 24 * 3600.0
"""Longest timeout a task may set (any ``*timeout_sec``): a week. A larger one is a typo
that would hold a sandbox forever (``1e300`` overflows the event loop's clock)."""
MAX_CPUS = 1024.0
"""Most CPUs a task may ask for; Docker refuses more than the host has at container start."""
MAX_MEMORY_MB = 1 << 20
"""Most memory a task may ask for (1 TiB, in MiB)."""
MAX_STORAGE_MB = 1 << 20
"""Most disk a task may ask for (1 TiB, in MiB)."""


def _maximum(key: str) -> float:
    """The largest value a numeric task field may take (refused at load, naming the key)."""
    if key.endswith("timeout_sec"):
        return MAX_TIMEOUT_S
    return {"cpus": MAX_CPUS, "memory_mb": MAX_MEMORY_MB, "storage_mb": MAX_STORAGE_MB}.get(key, math.inf)


def _at_most(top: float) -> str:
    return f" and at most {int(top)}" if math.isfinite(top) else ""


class _Fields:
    """Typed access to one table of a config file; errors name the file and key."""

    def __init__(self, table: object, where: str, task: str, file: Path):
        if table is None:
            table = {}
        if not isinstance(table, Mapping):
            raise TaskError(f"{where}: expected a table, got {type(table).__name__}", task=task, path=str(file))
        self.table: Mapping[str, Any] = table
        self.where = where
        self.task = task
        self.file = file

    def _bad(self, key: str, expected: str, value: object) -> TaskError:
        return TaskError(
            f"{self.where}.{key}: expected {expected}, got {value!r}", task=self.task, path=str(self.file)
        )

    def number(self, key: str, default: float | None) -> float | None:
        """A finite number > 0 (timeouts, cpus): NaN, inf, 0 and negatives are refused, since
        each would fail or hang every attempt of the task."""
        value = self.table.get(key, default)
        if value is None:
            return None
        top = _maximum(key)
        if not _is_positive(value) or value > top:
            raise self._bad(key, f"a number > 0{_at_most(top)}", value)
        return float(value)

    def integer(self, key: str) -> int | None:
        """A finite number > 0, as an integer (memory_mb, storage_mb)."""
        value = self.table.get(key)
        if value is None:
            return None
        top = _maximum(key)
        if not _is_positive(value) or int(value) < 1 or value > top:
            raise self._bad(key, f"an integer > 0{_at_most(top)}", value)
        return int(value)

    def string(self, key: str, default: str | None = None) -> str | None:
        value = self.table.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise self._bad(key, "a string", value)
        return str(value)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.table.get(key, default)
        if not isinstance(value, bool):
            raise self._bad(key, "true or false", value)
        return value

    def str_map(self, key: str) -> dict[str, str]:
        value = self.table.get(key) or {}
        if not isinstance(value, Mapping):
            raise self._bad(key, "a table of strings", value)
        return {str(k): str(v) for k, v in value.items()}

    def tags(self, key: str = "tags") -> tuple[str, ...]:
        value = self.table.get(key) or ()
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list | tuple):
            raise self._bad(key, "a list of strings", value)
        return tuple(str(v) for v in value)


def _allow_internet(fields: _Fields) -> bool:
    """Harbor 0.26's ``network_mode`` ("public" / "no-network"; the table refuses
    "allowlist") decides when given, else the older ``allow_internet``; unset: no network."""
    mode = fields.string("network_mode")
    if mode is not None:
        return mode == "public"
    return fields.boolean("allow_internet", False)


def _memory_mb(fields: _Fields) -> int | None:
    """``memory_mb = 2048`` or Harbor's older ``memory = "2G"`` form."""
    return _size_mb(fields, "memory_mb", "memory")


def _size_mb(fields: _Fields, key: str, legacy: str) -> int | None:
    """``<key> = 2048`` (MiB) or Harbor's older ``<legacy> = "2G"`` form."""
    mb = fields.integer(key)
    if mb is not None:
        return mb
    text = fields.string(legacy)
    if text is None:
        return None
    units = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
    raw = text.strip().lower().rstrip("b")
    try:
        mb = int(float(raw[:-1]) * units[raw[-1]]) if raw and raw[-1] in units else int(float(raw))
    except (ValueError, OverflowError):  # "nanG", "infG"
        mb = 0
    if not 1 <= mb <= MAX_MEMORY_MB:
        raise fields._bad(legacy, f'a size from 1M to {MAX_MEMORY_MB}M, such as "2G" or {key} = 2048', text)
    return mb


# -- Harbor --------------------------------------------------------------------------


def _harbor_name(fields: _Fields, dir_name: str) -> tuple[str, str]:
    """(short name, qualified name) from ``[task].name``: ``org/name`` or a bare name."""
    raw = fields.string("name")
    if raw is None:
        return dir_name, dir_name
    name = raw.strip()
    if "/" in name:
        if not HARBOR_PACKAGE_NAME.match(name) or ".." in name:
            raise fields._bad(
                "name", '"org/name" (letters, digits, ".", "_" and "-", each part starting '
                'with a letter or digit, no "..")', raw
            )
        return name.split("/", 1)[1], name
    if not name:
        raise fields._bad("name", 'a non-empty name ("org/name" for Harbor 0.25)', raw)
    return name, name


_STEP_NAME_BAD = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f]')
_WINDOWS_DEVICE = re.compile(r"^(CON|PRN|AUX|NUL|CONIN\$|CONOUT\$|(?:COM|LPT)[1-9\u00b9\u00b2\u00b3])$", re.IGNORECASE)


def _step_name(raw: object, where: str, task: str, config_file: Path) -> str:
    """Harbor 0.26's rule for a step name (``models/task/step_name.py``): one portable
    directory name."""
    name = raw if isinstance(raw, str) else ""
    if (
        not name.strip()
        or name in {".", ".."}
        or name.endswith((".", " "))
        or _STEP_NAME_BAD.search(name)
        or _WINDOWS_DEVICE.fullmatch(name.partition(".")[0].rstrip(" "))
        or len(name.encode()) > 255
    ):
        raise TaskError(
            f"{where}.name: {raw!r} is not a step name (a non-empty portable directory name: no "
            "path separators, control or Windows-reserved characters, no trailing dot or space, "
            "at most 255 bytes)",
            task=task, path=str(config_file),
        )
    return name


def _min_reward(raw: object, where: str, task: str, config_file: Path) -> dict[str, float] | None:
    if raw is None:
        return None
    if isinstance(raw, Mapping):
        items = list(raw.items())
    else:
        items = [("reward", raw)]
    out: dict[str, float] = {}
    for key, value in items:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise TaskError(f"{where}.min_reward: expected a number or a table of numbers, got {raw!r}",
                            task=task, path=str(config_file))
        out[str(key)] = float(value)
    return out


def _steps(
    data: Mapping[str, Any], path: Path, task: str, config_file: Path, base: dict[str, Any]
) -> tuple[TaskStep, ...]:
    """Harbor 0.26's ``[[steps]]``: each step's instruction, tests, solution, setup files,
    timeouts, verifier settings and ``min_reward``, resolved against the task's (``base``:
    the task-level values) as Harbor's ``MultiStepTrial`` resolves them."""
    raw_steps = data.get("steps")
    if raw_steps is None:
        return ()
    if not isinstance(raw_steps, list) or not raw_steps:
        raise TaskError(f"steps: expected a non-empty array of tables ([[steps]]), got {raw_steps!r}",
                        task=task, path=str(config_file))
    steps: list[TaskStep] = []
    seen: dict[str, str] = {}
    for index, raw in enumerate(raw_steps):
        where = f"steps[{index}]"
        fields = _Fields(raw, where, task, config_file)
        name = _step_name(fields.table.get("name"), where, task, config_file)
        key = unicodedata.normalize("NFC", name).casefold()
        if key in seen:
            raise TaskError(f"{where}.name: {name!r} repeats step {seen[key]!r} (names must differ, "
                            "case and Unicode normalisation included)", task=task, path=str(config_file))
        seen[key] = name
        step_dir = path / "steps" / name
        if not step_dir.is_dir():
            raise TaskError(f"{where}: step {name!r} has no directory steps/{name}/", task=task,
                            path=str(step_dir))
        instruction_file = step_dir / "instruction.md"
        instruction = strip_canary(_read_text(instruction_file, task, limit=MAX_INSTRUCTION_BYTES)).strip()
        if not instruction:
            raise TaskError(f"steps/{name}/instruction.md is empty", task=task, path=str(instruction_file))
        tests = step_dir / "tests"
        if not (tests / "test.sh").is_file() and not (path / "tests" / "test.sh").is_file():
            raise TaskError(f"step {name!r} has no test script: expected steps/{name}/tests/test.sh or "
                            "tests/test.sh", task=task, path=str(tests / "test.sh"))
        solve = step_dir / "solution" / "solve.sh"
        if (step_dir / "solution").is_dir() and not solve.is_file():
            raise TaskError(f"steps/{name}/solution/ has no solve.sh (Harbor's oracle fails on it)",
                            task=task, path=str(solve))
        agent = _Fields(fields.table.get("agent"), f"{where}.agent", task, config_file)
        verifier = _Fields(fields.table.get("verifier"), f"{where}.verifier", task, config_file)
        separate = _separate_verifier({"artifacts": fields.table.get("artifacts")}, verifier, task, config_file)
        mode = verifier.string("environment_mode") or base["verifier_mode"]
        workdir = step_dir / "workdir"
        healthcheck = None
        if fields.table.get("healthcheck") is not None:
            check = _Fields(fields.table.get("healthcheck"), f"{where}.healthcheck", task, config_file)
            command = check.string("command")
            if not command:
                raise check._bad("command", "a non-empty command", command)
            retries = check.table.get("retries", 3)
            if isinstance(retries, bool) or not isinstance(retries, int) or not 1 <= retries <= 1000:
                raise check._bad("retries", "an integer from 1 to 1000", retries)
            healthcheck = StepHealthcheck(
                command=command,
                interval_s=check.number("interval_sec", 5.0) or 5.0,
                timeout_s=check.number("timeout_sec", 30.0) or 30.0,
                # 0 (Harbor's default) is allowed here, unlike other durations
                start_period_s=(check.number("start_period_sec", None) or 0.0)
                if check.table.get("start_period_sec") else 0.0,
                start_interval_s=check.number("start_interval_sec", 5.0) or 5.0,
                retries=retries,
            )
        steps.append(TaskStep(
            name=name,
            instruction=instruction,
            tests_dir=str(tests) if tests.is_dir() else None,
            solution_path=str(solve) if solve.is_file() else base["solution_path"],
            workdir_dir=str(workdir) if workdir.is_dir() else None,
            agent_timeout_s=agent.number("timeout_sec", base["agent_timeout_s"]) or base["agent_timeout_s"],
            verifier_timeout_s=verifier.number("timeout_sec", base["verifier_timeout_s"])
            or base["verifier_timeout_s"],
            verifier_env={**base["verifier_env"], **verifier.str_map("env")},
            verifier_user=verifier.string("user") or base["verifier_user"],
            verifier_mode="separate" if mode == "separate" else "shared",
            verifier_collect=(*base["verifier_collect"], *separate["verifier_collect"]),
            artifacts=tuple(dict.fromkeys((*base["artifacts"], *separate["artifacts"]))),
            healthcheck=healthcheck,
            min_reward=_min_reward(fields.table.get("min_reward"), where, task, config_file),
        ))
    return tuple(steps)


def _separate_verifier(
    data: Mapping[str, Any], verifier: _Fields, name: str, config_file: Path
) -> dict[str, Any]:
    """Harbor 0.26's ``[verifier].environment_mode``, ``[[verifier.collect]]`` and the
    task-level ``artifacts``, as :class:`~rsr_async.schema.Task` fields. What has no
    meaning here yet is refused by key, never ignored."""

    def refuse(key: str, why: str) -> TaskError:
        return TaskError(f"{key}: {why}", task=name, path=str(config_file))

    mode = verifier.string("environment_mode")
    if mode not in (None, "shared", "separate"):
        raise verifier._bad("environment_mode", '"shared" or "separate"', mode)
    if verifier.table.get("environment") is not None:
        if mode == "shared":
            raise refuse("[verifier].environment_mode", "'shared' is incompatible with [verifier.environment] "
                         "(Harbor's rule): omit the environment or set environment_mode = 'separate'")
        raise refuse("[verifier.environment]", "a verifier environment of its own is not supported yet; "
                     "environment_mode = 'separate' without it grades in a fresh copy of the task's environment")
    hooks: list[CollectHook] = []
    raw_hooks = verifier.table.get("collect") or []
    if not isinstance(raw_hooks, list):
        raise verifier._bad("collect", "an array of tables ([[verifier.collect]])", raw_hooks)
    for index, raw in enumerate(raw_hooks):
        hook = _Fields(raw, f"verifier.collect[{index}]", name, config_file)
        service = hook.string("service") or "main"
        if service != "main":
            raise refuse(f"[[verifier.collect]] #{index + 1} service", f"{service!r}: hooks in compose "
                         "sidecars are not supported yet (only service 'main')")
        command = hook.string("command")
        if not command:
            raise hook._bad("command", "a non-empty command", command)
        hooks.append(CollectHook(command=command, timeout_s=hook.number("timeout_sec", 60.0) or 60.0,
                                 user=hook.string("user")))
    artifacts: list[str] = []
    raw_artifacts = data.get("artifacts") or []
    if not isinstance(raw_artifacts, list):
        raise refuse("artifacts", f"expected a list of paths or tables, got {raw_artifacts!r}")
    for index, raw in enumerate(raw_artifacts):
        if isinstance(raw, str):
            source = raw
        elif isinstance(raw, Mapping):
            entry = _Fields(raw, f"artifacts[{index}]", name, config_file)
            source = entry.string("source") or ""
            if (entry.string("service") or "main") != "main":
                raise refuse(f"artifacts[{index}].service", "artifacts of compose sidecars are not supported yet")
            if entry.table.get("exclude"):
                raise refuse(f"artifacts[{index}].exclude", "excluding parts of an artifact is not supported yet")
        else:
            raise refuse(f"artifacts[{index}]", f"expected a path or a table with source, got {raw!r}")
        if not source.startswith("/") or ".." in source.split("/"):
            raise refuse(f"artifacts[{index}]", f"{source!r} is not an absolute path without '..'")
        artifacts.append(source)
    return {"verifier_mode": mode or "shared", "verifier_collect": tuple(hooks), "artifacts": tuple(artifacts)}


def _load_harbor(path: Path) -> Task:
    dir_name = path.name
    config_file = path / HARBOR_MARKER
    try:
        data = tomllib.loads(_read_text(config_file, dir_name))
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"invalid TOML: {exc}", task=dir_name, path=str(config_file)) from exc

    task_table = _Fields(data.get("task"), "task", dir_name, config_file)
    name, qualified_name = _harbor_name(task_table, dir_name)
    check_task_keys(data, task=name, path=config_file)
    meta = _Fields(data.get("metadata"), "metadata", name, config_file)
    verifier = _Fields(data.get("verifier"), "verifier", name, config_file)
    agent = _Fields(data.get("agent"), "agent", name, config_file)
    environment = _Fields(data.get("environment"), "environment", name, config_file)

    multi_step = bool(data.get("steps"))
    tests_dir = path / "tests"
    instruction = ""
    if not multi_step:  # a multi-step task's instructions and tests are its steps' (below)
        instruction = strip_canary(_read_text(path / "instruction.md", name, limit=MAX_INSTRUCTION_BYTES)).strip()
        if not instruction:
            raise TaskError("instruction.md is empty", task=name, path=str(path / "instruction.md"))
        if not (tests_dir / "test.sh").is_file():
            raise TaskError(
                "missing tests/test.sh (the verifier script)", task=name, path=str(tests_dir / "test.sh")
            )

    docker_image = environment.string("docker_image") or None
    env_dir = path / "environment"
    has_env = (env_dir / "Dockerfile").is_file() or (env_dir / "docker-compose.yaml").is_file()
    if not has_env and docker_image is None:
        raise TaskError(
            "missing environment/Dockerfile (and no [environment].docker_image)",
            task=name,
            path=str(env_dir / "Dockerfile"),
        )

    solution = path / "solution" / "solve.sh"
    metadata = {k: v for k, v in meta.table.items() if k not in ("category", "tags", "difficulty")}
    description = task_table.string("description")
    if description:
        metadata["description"] = description
    version = data.get("version")
    if version is not None:
        metadata["version"] = str(version)
    # The rest of Harbor's [task] package record, and `source`: kept, never dropped.
    for key, label in (("version", "package_version"), ("authors", "authors"), ("keywords", "keywords")):
        if key in task_table.table:
            metadata[label] = task_table.table[key]
    if "source" in data:
        metadata["source"] = str(data["source"])

    agent_timeout_s = agent.number("timeout_sec", HARBOR_AGENT_TIMEOUT_S) or HARBOR_AGENT_TIMEOUT_S
    verifier_timeout_s = verifier.number("timeout_sec", HARBOR_VERIFIER_TIMEOUT_S) or HARBOR_VERIFIER_TIMEOUT_S
    separate = _separate_verifier(data, verifier, name, config_file)
    solution_path = str(solution) if solution.is_file() else None
    steps = _steps(data, path, name, config_file, {
        "agent_timeout_s": agent_timeout_s, "verifier_timeout_s": verifier_timeout_s,
        "verifier_env": verifier.str_map("env"), "verifier_user": verifier.string("user"),
        "solution_path": solution_path, **separate,
    })
    if steps:
        instruction = steps[0].instruction
    strategy = data.get("multi_step_reward_strategy") or "mean"  # harbor_keys checked its value
    task = Task(
        name=name,
        qualified_name=qualified_name,
        path=str(path),
        instruction=instruction,
        format="harbor",
        category=meta.string("category", "") or "",
        tags=meta.tags(),
        difficulty=meta.string("difficulty", "") or "",
        metadata=metadata,
        agent_timeout_s=agent_timeout_s,
        verifier_timeout_s=verifier_timeout_s,
        build_timeout_s=environment.number("build_timeout_sec", HARBOR_BUILD_TIMEOUT_S)
        or HARBOR_BUILD_TIMEOUT_S,
        docker_image=docker_image,
        environment_dir=str(env_dir) if has_env else None,
        cpus=environment.number("cpus", None),
        memory_mb=_memory_mb(environment),
        storage_mb=_size_mb(environment, "storage_mb", "storage"),
        allow_internet=_allow_internet(environment),
        workdir=environment.string("workdir"),
        env=environment.str_map("env"),
        verifier_env=verifier.str_map("env"),
        verifier_user=verifier.string("user"),
        **separate,
        tests_dir=str(tests_dir),
        test_script="test.sh",
        solution_path=solution_path,
        steps=steps,
        multi_step_reward="final" if strategy == "final" else "mean",
    )
    return _with_compose(task)


# -- compose -------------------------------------------------------------------------


def _with_compose(task: Task) -> Task:
    """``task`` with what its compose file says of the agent's container, the file refused
    now (by key) if it is outside the supported subset, not at build.

    A terminal-bench file that is only the template's ``client`` gives its
    ``environment`` (``TEST_DIR``) to the plain sandbox. Limits written on the agent's
    service as literals (not Harbor's ``${CPUS}``/``${MEMORY}``) become the task's, and
    must agree with ``[environment]`` where both are given."""
    client_env = plain_client_environment(task)
    if client_env is not None:
        return msgspec.structs.replace(task, env={**client_env, **task.env})
    spec = task_compose(task)
    if spec is None:
        return task
    main = spec.main
    where = f"{COMPOSE_FILE}: services.{spec.agent_service}.deploy.resources.limits"
    changes: dict[str, Any] = {}
    for key, ours, theirs in (("cpus", task.cpus, main.cpus), ("memory", task.memory_mb, main.memory_mb)):
        if theirs is None:
            continue
        if ours is not None and ours != theirs:
            raise TaskError(
                f"{where}.{key}: {theirs:g} disagrees with task.toml [environment] ({ours:g}); "
                "give the limit in one place",
                task=task.name, path=spec.path,
            )
        changes["cpus" if key == "cpus" else "memory_mb"] = theirs
    return msgspec.structs.replace(task, **changes) if changes else task


# -- legacy terminal-bench -----------------------------------------------------------


def _legacy_instruction(data: Mapping[str, Any]) -> str:
    instruction = data.get("instruction")
    if isinstance(instruction, str):
        return instruction
    # Older terminal-bench tasks keep a list of {key, description}; "base" is the main one.
    for item in data.get("descriptions") or ():
        if isinstance(item, Mapping) and item.get("key", "base") == "base":
            return str(item.get("description") or "")
    return ""


def _load_legacy(path: Path) -> Task:
    name = path.name
    config_file = path / LEGACY_MARKER
    try:
        data = yaml.safe_load(_read_text(config_file, name))
    except yaml.YAMLError as exc:
        raise TaskError(f"invalid YAML: {exc}", task=name, path=str(config_file)) from exc
    fields = _Fields(data, "task.yaml", name, config_file)

    instruction = _legacy_instruction(fields.table).strip()
    if not instruction:
        raise TaskError("task.yaml has no instruction", task=name, path=str(config_file))
    if (size := len(instruction.encode())) > MAX_INSTRUCTION_BYTES:
        raise TaskError(
            f"the instruction is {size} bytes, over the {MAX_INSTRUCTION_BYTES}-byte limit for an "
            "instruction (MAX_INSTRUCTION_BYTES); shorten it",
            task=name,
            path=str(config_file),
        )

    run_tests = path / "run-tests.sh"
    if not run_tests.is_file():
        # terminal-bench 0.2.x copies and runs /tests/run-tests.sh unconditionally (and
        # Harbor's terminal-bench mapper reads it): there is no default to fall back on.
        raise TaskError(
            "missing run-tests.sh (the verifier script; terminal-bench has no default)",
            task=name,
            path=str(run_tests),
        )
    parser = fields.string("parser_name", "pytest") or "pytest"
    if parser not in PARSERS:
        raise fields._bad("parser_name", f"a terminal-bench parser ({', '.join(PARSERS)})", parser)
    tests_dir = path / "tests"
    if not tests_dir.is_dir():
        raise TaskError("missing tests/ directory", task=name, path=str(tests_dir))

    has_env = (path / "Dockerfile").is_file() or (path / "docker-compose.yaml").is_file()
    if not has_env:
        raise TaskError("missing Dockerfile", task=name, path=str(path / "Dockerfile"))

    # terminal-bench's oracle takes solution.sh, else solution.yaml (keystrokes for tmux).
    solution = next((s for s in (path / "solution.sh", path / "solution.yaml") if s.is_file()), None)
    labels = ("instruction", "descriptions", "category", "tags", "difficulty")
    metadata = {k: v for k, v in fields.table.items() if k not in labels}
    task = Task(
        name=name,
        path=str(path),
        qualified_name=name,
        instruction=instruction,
        format="terminal-bench",
        test_parser=parser,
        category=fields.string("category", "") or "",
        tags=fields.tags(),
        difficulty=fields.string("difficulty", "") or "",
        metadata=metadata,
        agent_timeout_s=fields.number("max_agent_timeout_sec", LEGACY_AGENT_TIMEOUT_S)
        or LEGACY_AGENT_TIMEOUT_S,
        verifier_timeout_s=fields.number("max_test_timeout_sec", LEGACY_TEST_TIMEOUT_S)
        or LEGACY_TEST_TIMEOUT_S,
        build_timeout_s=HARBOR_BUILD_TIMEOUT_S,
        environment_dir=str(path),
        tests_dir=str(tests_dir),
        test_script="run-tests.sh",
        solution_path=str(solution) if solution else None,
    )
    return _with_compose(task)
