"""Multi-container tasks: a Harbor task's ``environment/docker-compose.yaml`` or a legacy
terminal-bench task's root ``docker-compose.yaml``, parsed into a frozen
:class:`ComposeSpec` of the subset this engine runs, everything else refused by name.

Harbor 0.26 (its Docker environment) runs ``docker compose`` with its own base files first
and the task's file last: the agent's container is the service named ``main`` (built from
``environment/`` with its ``Dockerfile`` unless the task's file says otherwise), the project
directory is ``environment/``. terminal-bench 0.2.18 runs the task's own file alone: the
agent's container is the service named ``client``, the project directory is the task's.
The same holds here, without a subprocess: the pool builds each service's image through the
task-image path (offline, ``FROM ${BASE_IMAGE}``), puts every service on one private
per-episode network (internal: no route out) under its service name, starts them in
``depends_on`` order and makes the agent's service the episode's sandbox (inside the spec
it is always called ``main``; a terminal-bench ``client`` also answers to ``client``).

Variables (``${VAR}``, ``$VAR``, ``${VAR:-default}``, ``${VAR:?error}``, ``$$``) are filled
the way each tool fills them (:func:`compose_variables`, recorded from their code):

- Harbor 0.26 (``environments/docker/compose_env.py``, ``ComposeInfraEnvVars``):
  ``MAIN_IMAGE_NAME``, ``CONTEXT_DIR``, ``CPUS``, ``MEMORY``, ``PREBUILT_IMAGE_NAME`` (only
  with ``docker_image``), and for task-authored log mounts ``HOST_{VERIFIER_LOGS,AGENT_LOGS,
  ARTIFACTS}_PATH`` / ``ENV_…_PATH``; the task's ``[environment].env`` is merged *under*
  them (``merge_compose_env``: Harbor's own names win a collision).
- terminal-bench 0.2.18 (``terminal/docker_compose_manager.py``, ``DockerComposeEnvVars``):
  ``T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME``, ``T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME``,
  ``T_BENCH_TASK_DOCKER_NAME_PREFIX``, ``T_BENCH_CONTAINER_LOGS_PATH`` (``/logs``),
  ``T_BENCH_CONTAINER_AGENT_LOGS_PATH`` (``/agent-logs``), ``T_BENCH_TEST_DIR`` (``/tests``),
  ``T_BENCH_TASK_LOGS_PATH``, ``T_BENCH_TASK_AGENT_LOGS_PATH``.

An unset variable becomes an empty string, as ``docker compose`` makes it under both tools.
One difference: both tools also pass the host's whole environment; here it is never used,
so a task does not change with the shell that runs it.

Supported, per service: ``build`` (a context path, or ``context``/``dockerfile``/``args``/
``target``), ``image`` (must already be on the Docker host: nothing is pulled; beside a
``build`` it only names the built image, as in compose), ``environment``, ``command``,
``entrypoint``, ``working_dir``, ``user``, ``hostname``, ``depends_on`` (list, or map with
``condition`` ``service_started``/``service_healthy``/``service_completed_successfully``),
``healthcheck``, ``networks`` (names declared at the top level, with ``aliases``; all of
them are the one private network) and ``deploy.resources.limits`` (``cpus``, ``memory``).
The base keys Harbor's and terminal-bench's templates restate are taken with their meaning
here:

- log mounts (``${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}`` and the agent and
  artifacts ones; terminal-bench's ``${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}``
  and its agent-logs one) on the agent's service are dropped: the verifier's logs are read
  from the container by our verifier, nothing is bound from the host;
- ``deploy.resources.limits`` map to ours: on the agent's service ``${CPUS}``/``${MEMORY}``
  restate the task's limits, a literal value sets them (and must agree with
  ``[environment]``); on another service they are its container's limits;
- ``network_mode: none`` is what every service here has anyway (no route out); the service
  still joins the episode's private network;
- a keep-alive ``command`` on the agent's service (``sleep infinity``, ``tail -f
  /dev/null``, either under ``sh -c``) is replaced by ours, which is the same.

Ignored, because they mean nothing on a private network of one episode: ``expose``,
``ports`` (never published on the host), ``container_name`` (concurrent episodes would
collide), ``restart``, ``tty``, ``stdin_open``, ``init``, ``pull_policy`` and ``x-*``
extension fields. Anything else (other ``volumes``, ``privileged``, another
``network_mode``, ``cap_add``, ``devices`` …) is refused when the task loads, in one line
naming the task, the file and the key.

The agent's service runs the agent's shell, so any other ``command``, and its
``entrypoint`` and ``user``, are refused: it always sleeps like every sandbox.

A terminal-bench file whose only service is ``client``, built from the task's own
``Dockerfile`` (as the template every terminal-bench task ships), is no multi-container
task: :func:`task_compose` returns None for it and the task runs as a plain sandbox, the
service's ``environment`` (``TEST_DIR``) given to it through ``Task.env`` by the loader.
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
    "AGENT_SERVICES",
    "COMPOSE_FILE",
    "HARBOR_UNSET_VARIABLES",
    "HARBOR_VARIABLES",
    "MAIN_SERVICE",
    "TERMINAL_BENCH_VARIABLES",
    "ComposeService",
    "ComposeSpec",
    "Dependency",
    "Healthcheck",
    "compose_file",
    "compose_variables",
    "load_compose",
    "plain_client_environment",
    "task_compose",
]

COMPOSE_FILE = "docker-compose.yaml"
"""The file Harbor looks for in a task's ``environment/``, terminal-bench in the task's root."""
MAIN_SERVICE = "main"
"""Harbor's name for the service the agent works in; every spec calls it so."""
AGENT_SERVICES = {"harbor": "main", "terminal-bench": "client"}
"""The agent's service, by task format: Harbor's ``main``, terminal-bench's ``client``."""

HARBOR_VARIABLES = (
    "MAIN_IMAGE_NAME", "CONTEXT_DIR", "PREBUILT_IMAGE_NAME", "CPUS", "MEMORY",
    "HOST_VERIFIER_LOGS_PATH", "ENV_VERIFIER_LOGS_PATH", "HOST_AGENT_LOGS_PATH",
    "ENV_AGENT_LOGS_PATH", "HOST_ARTIFACTS_PATH", "ENV_ARTIFACTS_PATH",
)
"""What Harbor 0.26 sets for a task's compose file (``ComposeInfraEnvVars`` and
``legacy_log_mount_env_vars``; the egress-control ones only with a network allowlist,
which is refused here). Checked against Harbor's code by ``scripts/record_harbor_task_keys.py``."""
HARBOR_UNSET_VARIABLES = (
    "EGRESS_CONTROL_SIDECAR_IMAGE_NAME", "EGRESS_CONTROL_INITIAL_NETWORK_MODE",
    "EGRESS_CONTROL_INITIAL_ALLOWED_HOSTS",
)
"""Harbor sets these only for its egress-control sidecar (a network allowlist), which
this engine refuses: here they are unset, so blank, as under Harbor without one."""
TERMINAL_BENCH_VARIABLES = (
    "T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME", "T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME",
    "T_BENCH_TASK_DOCKER_NAME_PREFIX", "T_BENCH_CONTAINER_LOGS_PATH",
    "T_BENCH_CONTAINER_AGENT_LOGS_PATH", "T_BENCH_TEST_DIR", "T_BENCH_TASK_LOGS_PATH",
    "T_BENCH_TASK_AGENT_LOGS_PATH",
)
"""What terminal-bench 0.2.18 sets (``DockerComposeEnvVars``), likewise checked."""

# Host side, container side of the log mounts each tool's template writes (raw text).
_LOG_MOUNTS = {
    "harbor": frozenset(
        f"${{HOST_{kind}_PATH}}:${{ENV_{kind}_PATH}}"
        for kind in ("VERIFIER_LOGS", "AGENT_LOGS", "ARTIFACTS")
    ),
    "terminal-bench": frozenset({
        "${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}",
        "${T_BENCH_TASK_AGENT_LOGS_PATH}:${T_BENCH_CONTAINER_AGENT_LOGS_PATH}",
    }),
}
_KEEP_ALIVE = (("sleep", "infinity"), ("tail", "-f", "/dev/null"))
_SHELLS = frozenset({"sh", "bash", "/bin/sh", "/bin/bash"})

Condition = Literal["service_started", "service_healthy", "service_completed_successfully"]

_SERVICE_KEYS = frozenset({
    "build", "image", "environment", "command", "entrypoint", "working_dir", "user",
    "hostname", "depends_on", "healthcheck", "networks", "volumes", "deploy", "network_mode",
})
_IGNORED_SERVICE_KEYS = frozenset({
    "expose", "ports", "container_name", "restart", "tty", "stdin_open", "init", "pull_policy",
})
_MAIN_REFUSED = {
    "entrypoint": "the agent's service runs the agent's shell and always sleeps",
    "user": "the agent's shell runs as root, as under Harbor's main service",
    "healthcheck": "nothing waits for the agent's service",
}
_TOP_KEYS = frozenset({"services", "networks", "version", "name"})
_BUILD_KEYS = frozenset({"context", "dockerfile", "args", "target"})
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
    build_target: str | None = None
    """The Dockerfile stage to build (``build.target``), None for the last."""
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
    cpus: float | None = None
    """``deploy.resources.limits.cpus``; None: the sandbox default (on ``main``: the task's)."""
    memory_mb: int | None = None
    """``deploy.resources.limits.memory`` in MiB; None likewise."""


class ComposeSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A task's services, in an order that starts every dependency first (``main`` last
    among those it depends on)."""

    path: str
    services: tuple[ComposeService, ...]
    agent_service: str = MAIN_SERVICE
    """The file's own name for the agent's service (``main`` or terminal-bench's ``client``)."""

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

    def is_plain(self, context: Path) -> bool:
        """True when this is a single agent's service built from ``context``'s own
        ``Dockerfile`` with nothing else: what a plain sandbox of that task already is
        (but for the service's ``environment``)."""
        if len(self.services) != 1:
            return False
        main = self.main
        return (
            main.build_context == str(context.resolve())
            and main.dockerfile == "Dockerfile"
            and not main.build_args
            and main.build_target is None
            and main.working_dir is None
            and main.hostname is None
            and main.cpus is None
            and main.memory_mb is None
            and main.aliases == (self.agent_service,)
        )


def compose_file(task: Task) -> Path | None:
    """The task's ``docker-compose.yaml`` (Harbor: in ``environment/``; terminal-bench: in
    the task's directory, which is its ``environment_dir``), None when it has none."""
    if task.format not in AGENT_SERVICES or not task.environment_dir:
        return None
    path = Path(task.environment_dir) / COMPOSE_FILE
    return path if path.is_file() else None


def _image_name(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]", "-", text.lower())


def compose_variables(task: Task, *, cpus: float = 1.0, memory_mb: int = 2048) -> dict[str, str]:
    """What ``${VAR}`` may name, as the task's tool would set it.

    Harbor: its infrastructure variables over the task's ``[environment].env`` (Harbor's
    names win, as in its ``merge_compose_env``). terminal-bench: its ``T_BENCH_*`` set.
    The host's own environment is not used (both tools pass it; a task must not change
    with the shell that runs it). Host log paths are empty: nothing is bound from the
    host, and the log mounts that name them are dropped by the parser."""
    env_dir = str(Path(task.environment_dir or task.path).resolve())
    if task.format == "terminal-bench":
        # trial_handler: docker_image_name_prefix = f"tb__{task_id}".replace(".", "-").
        prefix = f"tb__{task.name}".replace(".", "-")
        return {
            "T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME": f"{prefix}__client",
            "T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME": task.name.replace(".", "-"),
            "T_BENCH_TASK_DOCKER_NAME_PREFIX": prefix,
            "T_BENCH_CONTAINER_LOGS_PATH": "/logs",
            "T_BENCH_CONTAINER_AGENT_LOGS_PATH": "/agent-logs",
            "T_BENCH_TEST_DIR": "/tests",
            "T_BENCH_TASK_LOGS_PATH": "",
            "T_BENCH_TASK_AGENT_LOGS_PATH": "",
        }
    variables = dict(task.env)
    variables.update({
        "CONTEXT_DIR": env_dir,
        "MAIN_IMAGE_NAME": "hb__" + _image_name(task.name),
        "CPUS": f"{task.cpus or cpus:g}",
        "MEMORY": f"{task.memory_mb or memory_mb}M",
        "HOST_VERIFIER_LOGS_PATH": "",
        "HOST_AGENT_LOGS_PATH": "",
        "HOST_ARTIFACTS_PATH": "",
        "ENV_VERIFIER_LOGS_PATH": "/logs/verifier",
        "ENV_AGENT_LOGS_PATH": "/logs/agent",
        "ENV_ARTIFACTS_PATH": "/logs/artifacts",
    })
    if task.docker_image:
        variables["PREBUILT_IMAGE_NAME"] = task.docker_image
    return variables


def task_compose(task: Task, *, cpus: float = 1.0, memory_mb: int = 2048) -> ComposeSpec | None:
    """The task's parsed compose file, or None when it has none or when it is a
    terminal-bench file that is only the plain ``client`` (raises :class:`TaskError`)."""
    path = compose_file(task)
    if path is None:
        return None
    spec = load_compose(path, task=task, variables=compose_variables(task, cpus=cpus, memory_mb=memory_mb))
    if task.format == "terminal-bench" and spec.is_plain(Path(task.path)):
        return None
    return spec


def plain_client_environment(task: Task) -> dict[str, str] | None:
    """For a terminal-bench task whose compose file is only the plain ``client``: that
    service's ``environment`` (the loader gives it to the sandbox as ``Task.env``). None
    for any other task."""
    path = compose_file(task)
    if path is None or task.format != "terminal-bench":
        return None
    spec = load_compose(path, task=task, variables=compose_variables(task))
    return dict(spec.main.environment) if spec.is_plain(Path(task.path)) else None


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
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?", re.IGNORECASE)
_SIZE_MB = {"": 1 / (1024 * 1024), "k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0 * 1024}


class _Parser:
    def __init__(self, path: Path, task: Task, variables: Mapping[str, str]) -> None:
        self.path = path
        self.task = task
        self.variables = variables
        self.env_dir = path.parent.resolve()
        self.task_dir = Path(task.path).resolve()
        self.agent = AGENT_SERVICES.get(task.format, MAIN_SERVICE)

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
            if name == MAIN_SERVICE and self.agent != MAIN_SERVICE:
                raise self.error(f"services.{name}", f"the agent's service is {self.agent!r} in this "
                                 "format; a service may not be called 'main' beside it")
            services[name] = self.service(name, body, networks)
        if self.agent not in services:
            if self.agent != MAIN_SERVICE:
                raise self.error("services", f"no {self.agent!r} service: terminal-bench runs the agent in it")
            services[MAIN_SERVICE] = self.service(MAIN_SERVICE, {}, networks)
        if self.agent != MAIN_SERVICE:
            services = self.rename_agent(services)
        return ComposeSpec(path=str(self.path), services=self.ordered(services), agent_service=self.agent)

    def rename_agent(self, services: dict[str, ComposeService]) -> dict[str, ComposeService]:
        """terminal-bench's ``client`` becomes ``main`` (what the pool runs the agent in),
        still answering to ``client`` on the network."""
        renamed: dict[str, ComposeService] = {}
        for name, service in services.items():
            deps = tuple(
                Dependency(service=MAIN_SERVICE if d.service == self.agent else d.service,
                           condition=d.condition)
                for d in service.depends_on
            )
            new_name = MAIN_SERVICE if name == self.agent else name
            renamed[new_name] = msgspec.structs.replace(service, name=new_name, depends_on=deps)
        return renamed

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
        is_agent = name == self.agent
        raw = self.mapping(body, where)
        self.refuse_unknown(raw, where, _SERVICE_KEYS | _IGNORED_SERVICE_KEYS)
        # Read before interpolation: whether a value restates the template is in its text.
        self.volumes(raw.get("volumes"), f"{where}.volumes", is_agent=is_agent)
        restated = self.restated_limits(raw.get("deploy"), f"{where}.deploy")
        table = self.mapping(self.interpolate(raw, where), where)
        if is_agent:
            for key, why in _MAIN_REFUSED.items():
                if key in table:
                    raise self.error(f"{where}.{key}", f"not supported: {why}")
            command = self.argv(table.get("command"), f"{where}.command")
            if command is not None and not _keeps_alive(command):
                raise self.error(
                    f"{where}.command",
                    "not supported: the agent's service runs the agent's shell and always "
                    "sleeps (only a keep-alive such as `sleep infinity` is accepted, and replaced by ours)",
                )
        self.network_mode(table.get("network_mode"), f"{where}.network_mode")
        cpus, memory_mb = self.limits(table.get("deploy"), f"{where}.deploy", restated)
        context, dockerfile, args, target = self.build(table.get("build"), f"{where}.build")
        image = self.string(table.get("image"), f"{where}.image")
        if context is None and is_agent and (self.env_dir / "Dockerfile").is_file():
            # Harbor's base file builds main from environment/ (an `image:` beside it only
            # names the result); terminal-bench's template builds client from the task's.
            context = str(self.env_dir)
        if context is None and image is None:
            if not is_agent:
                raise self.error(where, "needs build or image")
            if self.task.docker_image:
                image = self.task.docker_image
            else:
                raise self.error(
                    where, "no build or image, and no Dockerfile or docker_image to build it from",
                )
        return ComposeService(
            name=name,
            build_context=context,
            dockerfile=dockerfile,
            build_args=args,
            build_target=target,
            image=None if context is not None else image,
            environment=self.str_map(table.get("environment"), f"{where}.environment"),
            command=None if is_agent else self.argv(table.get("command"), f"{where}.command"),
            entrypoint=self.argv(table.get("entrypoint"), f"{where}.entrypoint"),
            working_dir=self.string(table.get("working_dir"), f"{where}.working_dir"),
            user=self.string(table.get("user"), f"{where}.user"),
            hostname=self.string(table.get("hostname"), f"{where}.hostname"),
            aliases=(name, *self.aliases(table.get("networks"), f"{where}.networks", networks)),
            depends_on=self.depends_on(table.get("depends_on"), f"{where}.depends_on"),
            healthcheck=self.healthcheck(table.get("healthcheck"), f"{where}.healthcheck"),
            cpus=cpus,
            memory_mb=memory_mb,
        )

    def volumes(self, raw: object, where: str, *, is_agent: bool) -> None:
        """Only the template's log mounts, on the agent's service: dropped (ours)."""
        if raw is None:
            return
        if not isinstance(raw, list):
            raise self.error(where, f"expected a list, got {type(raw).__name__}")
        allowed = _LOG_MOUNTS.get(self.task.format, frozenset())
        for index, entry in enumerate(raw):
            text = entry.strip() if isinstance(entry, str) else None
            if text is not None and text.endswith((":rw", ":ro")):
                text = text[:-3]
            if not is_agent or text not in allowed:
                raise self.error(
                    f"{where}[{index}]",
                    f"{entry!r}: not supported (nothing is mounted from the host; only the "
                    f"template's log mounts on the agent's service are accepted: {', '.join(sorted(allowed))})",
                )

    def restated_limits(self, raw: object, where: str) -> frozenset[str]:
        """Which limits are written as Harbor's ``${CPUS}``/``${MEMORY}``."""
        limits = self.mapping(self.mapping(self.mapping(raw, where).get("resources"), f"{where}.resources")
                              .get("limits"), f"{where}.resources.limits")
        return frozenset(
            key for key, variable in (("cpus", "${CPUS}"), ("memory", "${MEMORY}"))
            if str(limits.get(key, "")).strip() == variable
        )

    def limits(self, raw: object, where: str, restated: frozenset[str]) -> tuple[float | None, int | None]:
        deploy = self.mapping(raw, where)
        self.refuse_unknown(deploy, where, frozenset({"resources"}))
        resources = self.mapping(deploy.get("resources"), f"{where}.resources")
        self.refuse_unknown(resources, f"{where}.resources", frozenset({"limits"}),
                            hint="only limits map to this engine's containers")
        limits = self.mapping(resources.get("limits"), f"{where}.resources.limits")
        self.refuse_unknown(limits, f"{where}.resources.limits", frozenset({"cpus", "memory"}))
        cpus: float | None = None
        memory_mb: int | None = None
        if "cpus" in limits and "cpus" not in restated:
            try:
                cpus = float(limits["cpus"])
            except (TypeError, ValueError):
                cpus = 0.0
            if not (0 < cpus < float("inf")):
                raise self.error(f"{where}.resources.limits.cpus", f"expected a number > 0, got {limits['cpus']!r}")
        if "memory" in limits and "memory" not in restated:
            memory_mb = self.memory(limits["memory"], f"{where}.resources.limits.memory")
        return cpus, memory_mb

    def memory(self, raw: object, where: str) -> int:
        text = str(raw).strip()
        match = _SIZE.fullmatch(text)
        mb = int(float(match[1]) * _SIZE_MB[match[2].lower()]) if match else 0
        if mb < 1:
            raise self.error(where, f"{raw!r} is not a size of at least 1M such as 512M or 2G")
        return mb

    def network_mode(self, raw: object, where: str) -> None:
        if raw is None:
            return
        if raw != "none":
            raise self.error(
                where,
                f"{raw!r} is not supported (only \"none\": every service here has no route out "
                "and shares the episode's private network)",
            )

    def build(self, raw: object, where: str) -> tuple[str | None, str, dict[str, str], str | None]:
        if raw is None:
            return None, "Dockerfile", {}, None
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
        target = self.string(table.get("target"), f"{where}.target") or None
        if target is not None and not re.search(
            rf"^\s*FROM\s+\S+\s+AS\s+{re.escape(target)}\s*$",
            resolved.read_text(encoding="utf-8", errors="replace"), re.IGNORECASE | re.MULTILINE,
        ):
            raise self.error(f"{where}.target", f"{resolved.name} has no stage named {target!r}")
        return str(context), resolved.relative_to(context).as_posix(), args, target

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
        every string; ``$$`` is a ``$``. An unset variable without a default is empty, as
        ``docker compose`` makes it."""
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
            return ""  # docker compose's blank string for an unset variable, under both tools
        return value


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _keeps_alive(argv: tuple[str, ...]) -> bool:
    """``sleep infinity`` / ``tail -f /dev/null``, bare or under ``sh -c``/``bash -c``:
    the keep-alive Harbor's and terminal-bench's templates give the agent's service."""
    if len(argv) == 3 and argv[0] in _SHELLS and argv[1] == "-c":
        try:
            argv = tuple(shlex.split(argv[2]))
        except ValueError:
            return False
    if argv[:1] == ("exec",):
        argv = argv[1:]
    return argv in _KEEP_ALIVE
