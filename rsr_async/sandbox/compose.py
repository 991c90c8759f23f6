"""Multi-container tasks: a Harbor task's ``environment/docker-compose.yaml``, parsed into a
frozen :class:`ComposeSpec` of the subset this engine runs, everything else refused by name.

Harbor (its Docker environment) runs ``docker compose`` with its own base files first and
the task's file last: the agent's container is the service named ``main`` (built from
``environment/`` with its ``Dockerfile`` unless the task's file says otherwise), the
project directory is ``environment/``, and ``${VAR}`` in the file is filled from Harbor's
variables (``CONTEXT_DIR``, ``MAIN_IMAGE_NAME``, ``CPUS``, ``MEMORY``, ``ENV_*_PATH``) and
the task's ``[environment].env``. The same holds here, without a subprocess: the pool
builds each service's image through the task-image path (offline, ``FROM ${BASE_IMAGE}``),
puts every service on one private per-episode network (internal: no route out) under its
service name, starts them in ``depends_on`` order and makes ``main`` the episode's sandbox.

Supported, per service: ``build`` (a context path, or ``context``/``dockerfile``/``args``),
``image`` (must already be on the Docker host: nothing is pulled), ``environment``,
``command``, ``entrypoint``, ``working_dir``, ``user``, ``hostname``, ``depends_on`` (list, or
map with ``condition`` ``service_started``/``service_healthy``/
``service_completed_successfully``), ``healthcheck`` and ``networks`` (names declared at the
top level, with ``aliases``; all of them are the one private network). Ignored, because
they mean nothing on a private network of one episode: ``expose``, ``ports`` (never
published on the host), ``container_name`` (concurrent episodes would collide),
``restart``, ``tty``, ``stdin_open``, ``init``, ``pull_policy`` and ``x-*`` extension fields.
Anything else (``volumes``, ``privileged``, ``network_mode``, ``cap_add``, ``devices`` …) is
refused when the task loads, in one line naming the task, the file and the key.

The ``main`` service runs the agent's shell, so its ``command``, ``entrypoint`` and ``user``
are refused: it always sleeps like every sandbox, as Harbor's ``sleep infinity``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml

from ..errors import TaskError
from ..schema import Task

__all__ = [
    "COMPOSE_FILE",
    "MAIN_SERVICE",
    "ComposeService",
    "ComposeSpec",
    "Dependency",
    "Healthcheck",
    "compose_file",
    "compose_variables",
    "load_compose",
    "task_compose",
]

COMPOSE_FILE = "docker-compose.yaml"
"""The file Harbor looks for in a task's ``environment/``."""
MAIN_SERVICE = "main"
"""Harbor's name for the service the agent works in."""

Condition = Literal["service_started", "service_healthy", "service_completed_successfully"]

_SERVICE_KEYS = frozenset({
    "build", "image", "environment", "command", "entrypoint", "working_dir", "user",
    "hostname", "depends_on", "healthcheck", "networks",
})
_IGNORED_SERVICE_KEYS = frozenset({
    "expose", "ports", "container_name", "restart", "tty", "stdin_open", "init", "pull_policy",
})
_MAIN_REFUSED = {
    "command": "the main service runs the agent's shell and always sleeps",
    "entrypoint": "the main service runs the agent's shell and always sleeps",
    "user": "the agent's shell runs as root, as under Harbor's main service",
    "healthcheck": "nothing waits for the main service",
}
_TOP_KEYS = frozenset({"services", "networks", "version", "name"})
_BUILD_KEYS = frozenset({"context", "dockerfile", "args"})
_HEALTH_KEYS = frozenset({"test", "interval", "timeout", "retries", "start_period", "disable"})
_NETWORK_KEYS = frozenset({"driver", "internal"})
_CONDITIONS: tuple[Condition, ...] = (
    "service_started", "service_healthy", "service_completed_successfully",
)

# Docker's own healthcheck defaults.
_DEFAULT_INTERVAL_S = 30.0
_DEFAULT_TIMEOUT_S = 30.0
_DEFAULT_RETRIES = 3


class Healthcheck(msgspec.Struct, frozen=True, kw_only=True):
    """A service's healthcheck, in seconds."""

    test: tuple[str, ...]
    """Docker's form: ``("CMD-SHELL", "…")`` or ``("CMD", argv…)``."""
    interval_s: float = _DEFAULT_INTERVAL_S
    timeout_s: float = _DEFAULT_TIMEOUT_S
    retries: int = _DEFAULT_RETRIES
    start_period_s: float = 0.0

    def docker(self) -> dict[str, Any]:
        """The Engine API's ``Healthcheck`` (durations in nanoseconds)."""
        return {
            "Test": list(self.test),
            "Interval": int(self.interval_s * 1e9),
            "Timeout": int(self.timeout_s * 1e9),
            "Retries": self.retries,
            "StartPeriod": int(self.start_period_s * 1e9),
        }

    def deadline_s(self) -> float:
        """How long Docker may take to call the service healthy or unhealthy."""
        return self.start_period_s + (self.retries + 1) * (self.interval_s + self.timeout_s)


class Dependency(msgspec.Struct, frozen=True, kw_only=True):
    """One ``depends_on`` entry."""

    service: str
    condition: Condition = "service_started"


class ComposeService(msgspec.Struct, frozen=True, kw_only=True):
    """One service, with paths made absolute and variables filled in."""

    name: str
    build_context: str | None = None
    """Absolute path of the build context (inside the task directory), or None."""
    dockerfile: str = "Dockerfile"
    """Relative to the build context."""
    build_args: dict[str, str] = msgspec.field(default_factory=dict)
    image: str | None = None
    """The image to run when there is no ``build`` (never pulled)."""
    environment: dict[str, str] = msgspec.field(default_factory=dict)
    command: tuple[str, ...] | None = None
    entrypoint: tuple[str, ...] | None = None
    working_dir: str | None = None
    user: str | None = None
    hostname: str | None = None
    aliases: tuple[str, ...] = ()
    """Names it answers to on the private network (its service name first)."""
    depends_on: tuple[Dependency, ...] = ()
    healthcheck: Healthcheck | None = None


class ComposeSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A task's services, in an order that starts every dependency first (``main`` last
    among those it depends on)."""

    path: str
    services: tuple[ComposeService, ...]

    @property
    def main(self) -> ComposeService:
        """The agent's service."""
        return next(s for s in self.services if s.name == MAIN_SERVICE)

    @property
    def sidecars(self) -> tuple[ComposeService, ...]:
        """Every service but ``main``, in start order."""
        return tuple(s for s in self.services if s.name != MAIN_SERVICE)

    def service(self, name: str) -> ComposeService:
        """The service called ``name``."""
        return next(s for s in self.services if s.name == name)


def compose_file(task: Task) -> Path | None:
    """The task's ``docker-compose.yaml`` when it is a Harbor compose task, else None."""
    if task.format != "harbor" or not task.environment_dir:
        return None
    path = Path(task.environment_dir) / COMPOSE_FILE
    return path if path.is_file() else None


def compose_variables(task: Task, *, cpus: float = 1.0, memory_mb: int = 2048) -> dict[str, str]:
    """What ``${VAR}`` may name: Harbor's compose variables and the task's env (the task's
    win, as in Harbor). The host's own environment is not used: a task must not change
    with the shell that runs it. Host log paths do not exist here (nothing is bound)."""
    env_dir = str(Path(task.environment_dir or task.path).resolve())
    variables = {
        "CONTEXT_DIR": env_dir,
        "MAIN_IMAGE_NAME": "hb__" + re.sub(r"[^a-z0-9._-]", "-", task.name.lower()),
        "CPUS": f"{task.cpus or cpus:g}",
        "MEMORY": f"{task.memory_mb or memory_mb}M",
        "ENV_VERIFIER_LOGS_PATH": "/logs/verifier",
        "ENV_AGENT_LOGS_PATH": "/logs/agent",
        "ENV_ARTIFACTS_PATH": "/logs/artifacts",
    }
    variables.update(task.env)
    return variables


def task_compose(task: Task) -> ComposeSpec | None:
    """The task's parsed compose file, or None when it has none (raises :class:`TaskError`)."""
    path = compose_file(task)
    if path is None:
        return None
    return load_compose(path, task=task, variables=compose_variables(task))


def load_compose(path: Path, *, task: Task, variables: Mapping[str, str]) -> ComposeSpec:
    """Parse ``path`` into a :class:`ComposeSpec`; :class:`TaskError` naming the key for
    anything outside the supported subset, a missing file or service, a cycle."""
    return _Parser(path, task, variables).spec()


# ----------------------------------------------------------------------------- parsing

_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*)|(?P<bad>\{[^}]*\}?))"
)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s|m|h)")
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class _Parser:
    def __init__(self, path: Path, task: Task, variables: Mapping[str, str]) -> None:
        self.path = path
        self.task = task
        self.variables = variables
        self.env_dir = path.parent.resolve()
        self.task_dir = Path(task.path).resolve()

    def error(self, where: str, message: str) -> TaskError:
        return TaskError(f"{COMPOSE_FILE}: {where}: {message}", task=self.task.name, path=str(self.path))

    # -- the file

    def spec(self) -> ComposeSpec:
        try:
            raw = yaml.safe_load(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise TaskError(f"cannot read {COMPOSE_FILE}: {exc}", task=self.task.name, path=str(self.path)) from exc
        except yaml.YAMLError as exc:
            detail = str(exc).replace("\n", " ")
            raise TaskError(f"{COMPOSE_FILE}: invalid YAML: {detail}", task=self.task.name, path=str(self.path)) from exc
        top = self.mapping(raw, "the file")
        self.refuse_unknown(top, "the file", _TOP_KEYS)
        networks = self.networks(top.get("networks"))
        raw_services = self.mapping(top.get("services"), "services")
        services: dict[str, ComposeService] = {}
        for name, body in raw_services.items():
            if not isinstance(name, str) or not re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*", name):
                raise self.error(f"services.{name}", "a service name must be letters, digits, '_', '.', '-'")
            services[name] = self.service(name, body, networks)
        if MAIN_SERVICE not in services:
            services[MAIN_SERVICE] = self.service(MAIN_SERVICE, {}, networks)
        return ComposeSpec(path=str(self.path), services=self.ordered(services))

    def networks(self, raw: object) -> frozenset[str]:
        table = self.mapping(raw, "networks")
        for name, body in table.items():
            where = f"networks.{name}"
            options = self.mapping(body, where)
            self.refuse_unknown(options, where, _NETWORK_KEYS, hint="every service shares one private network per episode")
            driver = options.get("driver", "bridge")
            if driver != "bridge":
                raise self.error(f"{where}.driver", f"{driver!r} is not supported (only bridge)")
        return frozenset(str(name) for name in table) | {"default"}

    # -- one service

    def service(self, name: str, body: object, networks: frozenset[str]) -> ComposeService:
        where = f"services.{name}"
        table = self.mapping(self.interpolate(body, where), where)
        self.refuse_unknown(table, where, _SERVICE_KEYS | _IGNORED_SERVICE_KEYS)
        if name == MAIN_SERVICE:
            for key, why in _MAIN_REFUSED.items():
                if key in table:
                    raise self.error(f"{where}.{key}", f"not supported: {why}")
        context, dockerfile, args = self.build(table.get("build"), f"{where}.build")
        image = self.string(table.get("image"), f"{where}.image")
        if context is None and image is None:
            if name != MAIN_SERVICE:
                raise self.error(where, "needs build or image")
            if (self.env_dir / "Dockerfile").is_file():
                context = str(self.env_dir)  # Harbor's build file: main builds from environment/
            elif self.task.docker_image:
                image = self.task.docker_image
            else:
                raise self.error(
                    f"services.{MAIN_SERVICE}",
                    "no build or image, and no environment/Dockerfile or docker_image to build it from",
                )
        return ComposeService(
            name=name,
            build_context=context,
            dockerfile=dockerfile,
            build_args=args,
            image=None if context is not None else image,
            environment=self.str_map(table.get("environment"), f"{where}.environment"),
            command=self.argv(table.get("command"), f"{where}.command"),
            entrypoint=self.argv(table.get("entrypoint"), f"{where}.entrypoint"),
            working_dir=self.string(table.get("working_dir"), f"{where}.working_dir"),
            user=self.string(table.get("user"), f"{where}.user"),
            hostname=self.string(table.get("hostname"), f"{where}.hostname"),
            aliases=(name, *self.aliases(table.get("networks"), f"{where}.networks", networks)),
            depends_on=self.depends_on(table.get("depends_on"), f"{where}.depends_on"),
            healthcheck=self.healthcheck(table.get("healthcheck"), f"{where}.healthcheck"),
        )

    def build(self, raw: object, where: str) -> tuple[str | None, str, dict[str, str]]:
        if raw is None:
            return None, "Dockerfile", {}
        if isinstance(raw, str):
            raw = {"context": raw}
        table = self.mapping(raw, where)
        self.refuse_unknown(table, where, _BUILD_KEYS)
        context_text = self.string(table.get("context", "."), f"{where}.context") or "."
        context = (self.env_dir / context_text).resolve()
        if not context.is_relative_to(self.task_dir):
            raise self.error(f"{where}.context", f"{context_text!r} leaves the task directory; refused")
        if not context.is_dir():
            raise self.error(f"{where}.context", f"{context_text!r} is not a directory")
        dockerfile = self.string(table.get("dockerfile"), f"{where}.dockerfile") or "Dockerfile"
        resolved = (context / dockerfile).resolve()
        if not resolved.is_relative_to(context):
            raise self.error(f"{where}.dockerfile", f"{dockerfile!r} must lie inside the build context")
        if not resolved.is_file():
            raise self.error(f"{where}.dockerfile", f"{resolved.relative_to(self.task_dir)} is missing")
        args = self.str_map(table.get("args"), f"{where}.args")
        return str(context), resolved.relative_to(context).as_posix(), args

    def aliases(self, raw: object, where: str, declared: frozenset[str]) -> tuple[str, ...]:
        if raw is None:
            return ()
        names: dict[str, Any]
        if isinstance(raw, list):
            names = {str(item): None for item in raw}
        else:
            names = dict(self.mapping(raw, where))
        aliases: list[str] = []
        for name, options in names.items():
            if name not in declared:
                raise self.error(f"{where}.{name}", "not declared under the top-level networks")
            table = self.mapping(options, f"{where}.{name}")
            self.refuse_unknown(table, f"{where}.{name}", frozenset({"aliases"}))
            aliases.extend(str(alias) for alias in table.get("aliases") or ())
        return tuple(aliases)

    def depends_on(self, raw: object, where: str) -> tuple[Dependency, ...]:
        if raw is None:
            return ()
        if isinstance(raw, list):
            return tuple(Dependency(service=str(name)) for name in raw)
        out: list[Dependency] = []
        for name, options in self.mapping(raw, where).items():
            table = self.mapping(options, f"{where}.{name}")
            self.refuse_unknown(table, f"{where}.{name}", frozenset({"condition", "required"}))
            if table.get("required", True) is not True:
                raise self.error(f"{where}.{name}.required", "only true is supported")
            condition = table.get("condition", "service_started")
            if condition not in _CONDITIONS:
                raise self.error(f"{where}.{name}.condition", f"{condition!r} is not one of {', '.join(_CONDITIONS)}")
            out.append(Dependency(service=str(name), condition=condition))
        return tuple(out)

    def healthcheck(self, raw: object, where: str) -> Healthcheck | None:
        if raw is None:
            return None
        table = self.mapping(raw, where)
        self.refuse_unknown(table, where, _HEALTH_KEYS)
        if table.get("disable") is True:
            return None
        test = table.get("test")
        if isinstance(test, str):
            argv: tuple[str, ...] = ("CMD-SHELL", test)
        elif isinstance(test, list) and test and test[0] in ("CMD", "CMD-SHELL", "NONE"):
            argv = tuple(str(item) for item in test)
        else:
            raise self.error(f"{where}.test", 'expected a string or a list starting "CMD" or "CMD-SHELL"')
        if argv[0] == "NONE":
            return None
        retries = table.get("retries", _DEFAULT_RETRIES)
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 1:
            raise self.error(f"{where}.retries", f"expected an integer >= 1, got {retries!r}")
        return Healthcheck(
            test=argv,
            interval_s=self.duration(table.get("interval"), f"{where}.interval", _DEFAULT_INTERVAL_S),
            timeout_s=self.duration(table.get("timeout"), f"{where}.timeout", _DEFAULT_TIMEOUT_S),
            retries=retries,
            start_period_s=self.duration(table.get("start_period"), f"{where}.start_period", 0.0),
        )

    # -- order

    def ordered(self, services: dict[str, ComposeService]) -> tuple[ComposeService, ...]:
        """Dependencies before dependants; unknown services, a healthy-wait on a service
        without a healthcheck, and cycles refused."""
        for service in services.values():
            for dep in service.depends_on:
                where = f"services.{service.name}.depends_on.{dep.service}"
                if dep.service not in services:
                    raise self.error(where, "no such service")
                if dep.service == MAIN_SERVICE:
                    raise self.error(where, "nothing may wait for the main service (it only sleeps)")
                if dep.condition == "service_healthy" and services[dep.service].healthcheck is None:
                    raise self.error(where, f"service_healthy, but {dep.service} has no healthcheck")
        order: list[ComposeService] = []
        state: dict[str, str] = {}

        def visit(name: str, chain: tuple[str, ...]) -> None:
            if state.get(name) == "done":
                return
            if state.get(name) == "visiting":
                raise self.error("depends_on", "a cycle: " + " -> ".join((*chain, name)))
            state[name] = "visiting"
            for dep in services[name].depends_on:
                visit(dep.service, (*chain, name))
            state[name] = "done"
            order.append(services[name])

        for name in sorted(services, key=lambda n: n == MAIN_SERVICE):
            visit(name, ())
        return tuple(order)

    # -- values

    def refuse_unknown(
        self, table: Mapping[str, Any], where: str, known: frozenset[str], *, hint: str = ""
    ) -> None:
        for key in table:
            if isinstance(key, str) and key.startswith("x-"):
                continue  # compose extension fields: ignored by compose itself
            if key not in known:
                tail = f" ({hint})" if hint else f"; supported: {', '.join(sorted(known))}"
                raise self.error(f"{where}.{key}" if where != "the file" else str(key),
                                 f"not supported{tail}")

    def mapping(self, raw: object, where: str) -> Mapping[str, Any]:
        if raw is None:
            return {}
        if not isinstance(raw, Mapping):
            raise self.error(where, f"expected a mapping, got {type(raw).__name__}")
        return raw

    def string(self, raw: object, where: str) -> str | None:
        if raw is None:
            return None
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            raise self.error(where, f"expected a string, got {raw!r}")
        return str(raw)

    def argv(self, raw: object, where: str) -> tuple[str, ...] | None:
        if raw is None:
            return None
        if isinstance(raw, str):
            try:
                return tuple(shlex.split(raw))
            except ValueError as exc:
                raise self.error(where, f"cannot split {raw!r}: {exc}") from exc
        if isinstance(raw, list):
            return tuple(str(item) for item in raw)
        raise self.error(where, f"expected a string or a list, got {raw!r}")

    def str_map(self, raw: object, where: str) -> dict[str, str]:
        if raw is None:
            return {}
        if isinstance(raw, list):
            out: dict[str, str] = {}
            for item in raw:
                key, sep, value = str(item).partition("=")
                if not sep:
                    raise self.error(where, f"{item!r}: expected KEY=VALUE (a value from the host is not passed in)")
                out[key] = value
            return out
        table = self.mapping(raw, where)
        for key, value in table.items():
            if value is None:
                raise self.error(f"{where}.{key}", "has no value (a value from the host is not passed in)")
        return {str(k): _scalar(v) for k, v in table.items()}

    def duration(self, raw: object, where: str, default: float) -> float:
        if raw is None:
            return default
        text = str(raw).strip()
        parts = _DURATION.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise self.error(where, f"{raw!r} is not a duration such as 500ms, 10s or 1m30s")
        return sum(float(n) * _UNITS[u] for n, u in parts)

    def interpolate(self, raw: object, where: str) -> object:
        """Fill ``${VAR}``/``$VAR`` (with ``:-``/``-`` defaults and ``:?``/``?`` errors) in
        every string; ``$$`` is a ``$``. An unset variable without a default is refused."""
        if isinstance(raw, str):
            return _VARIABLE.sub(lambda match: self.substitute(match, where), raw)
        if isinstance(raw, list):
            return [self.interpolate(item, where) for item in raw]
        if isinstance(raw, Mapping):
            return {key: self.interpolate(value, f"{where}.{key}") for key, value in raw.items()}
        return raw

    def substitute(self, match: re.Match[str], where: str) -> str:
        if match["escaped"]:
            return "$"
        if match["bad"]:
            raise self.error(where, f"${match['bad']} is not a valid variable reference")
        name = match["braced"] or match["bare"]
        value = self.variables.get(name)
        op, arg = match["op"], match["arg"] or ""
        if value is None or (value == "" and op is not None and op.startswith(":")):
            if op in ("-", ":-"):
                return arg
            if op in ("?", ":?"):
                raise self.error(where, f"${{{name}}}: {arg or 'must be set'}")
            raise self.error(
                where,
                f"variable {name} is not set (give it in task.toml [environment].env, or write $$ for a literal $)",
            )
        return value


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
