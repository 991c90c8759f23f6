"""Settings as data: frozen msgspec Structs, loaded from TOML files in ``configs/``.

A config file is partial: it names only what it changes, and is laid over the defaults
(``Config()``, which ``configs/default.toml`` spells out). Several files are laid in
order, then ``--set section.key=value`` overrides from the command line. Any unknown key,
wrong type or bad value raises :class:`~rsr_async.errors.ConfigError` naming the file,
the key path and what was expected.

Each field's docstring is the string just below it.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta

from ._layout import shipped_dir
from .errors import ConfigError

__all__ = [
    "CONFIG_DIR",
    "add_config_arguments",
    "check_harness_name",
    "ClusterConfig",
    "Config",
    "EngineConfig",
    "HARNESS_NAMES",
    "HarnessConfig",
    "LLMConfig",
    "RsrConfig",
    "RunConfig",
    "SandboxConfig",
    "SimConfig",
    "load_config",
    "model_url_problem",
]

CONFIG_DIR = shipped_dir("configs")


PIPELINE_STAGES = ("discover", "rewrite", "verify", "export")
"""The stages of ``run --stages``, in pipeline order."""


# Every numeric setting carries the bound it needs, checked wherever a config is loaded
# (files, --set, flags, a stored run's config): a 0 that would make every episode wait
# for a slot, or a negative deadline, fails at load time naming the key instead.
# Upper bounds too: ``run.concurrency = 99999999999999999999`` or a deadline of 1e300 s
# is a typo, and would fail far from the key (an overflow in the event loop's clock, a
# semaphore sized past memory) if it were let through.
MAX_COUNT = 1_000_000
"""Largest count of slots, items, tries or turns (:data:`AtLeastOne`, :data:`Count`)."""
MAX_TOKENS = 1_000_000_000
"""Largest token count (context windows, caches)."""
MAX_SECONDS = 31_536_000.0
"""Largest deadline, delay, rate or latency (:data:`Positive`, :data:`NonNegative`): a
year in seconds, past any real setting, well inside the event loop's clock."""
AtLeastOne = Annotated[int, Meta(ge=1, le=MAX_COUNT)]
"""A count of slots, items or tries where 0 would stall or do nothing."""
Count = Annotated[int, Meta(ge=0, le=MAX_COUNT)]
"""A count where 0 is meaningful (no retries, no warm containers)."""
Tokens = Annotated[int, Meta(ge=0, le=MAX_TOKENS)]
"""A number of tokens, where 0 means none or unknown."""
Positive = Annotated[float, Meta(gt=0, le=MAX_SECONDS)]
"""A rate or a deadline: 0 or less would never let anything through."""
NonNegative = Annotated[float, Meta(ge=0, le=MAX_SECONDS)]
"""A delay, backoff or latency, where 0 means none."""
Seed = Annotated[int, Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
"""A seed: it is stored in SQLite, whose integers are 64-bit."""
Cpus = Annotated[float, Meta(gt=0, le=1024)]
"""CPUs of one sandbox (Docker refuses more than the host has when the container starts)."""
Share = Annotated[float, Meta(ge=0, le=1)]
"""A share or probability."""
Port = Annotated[int, Meta(ge=0, le=65535)]
"""A TCP port; 0 means off or pick a free one, as the field says."""


class _Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A config section: every float must be finite (TOML spells ``nan`` and ``inf``, which
    would pass a lower bound and then hang or crash far from the file that set them)."""

    section: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{self.section}.{name}: expected a finite number, got {value!r}")


class RunConfig(_Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What to run."""

    section: ClassVar[str] = "run"

    run_dir: str = ""
    """Run directory (store, event log, summary). Empty: ``runs/<timestamp>``."""
    dataset: tuple[str, ...] = ()
    """Task directories or list files. Empty: the bundled suite (``rsr_async/tasks/bundled``)."""
    harnesses: tuple[str, ...] = ("terminus2",)
    """Harnesses for the discover stage."""
    attempts: AtLeastOne = 1
    """Attempts per (task, harness)."""
    concurrency: AtLeastOne = 64
    """Episodes in flight at once."""
    model_concurrency: AtLeastOne = 256
    """Model-only jobs (planner, critic, auditor) in flight at once; they hold no sandbox."""
    stages: tuple[str, ...] = ("discover",)
    """Pipeline stages ``run`` performs, in order: discover, rewrite, verify, export."""
    seed: Seed = 0
    """Base seed; each episode derives its own from its job key."""
    prewarm: bool = True
    """Start the first wave's sandboxes (up to ``concurrency``) before any episode starts:
    Docker's slow starts are paid up front and the whole wave runs at once."""

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = [s for s in self.stages if s not in PIPELINE_STAGES]
        if unknown or not self.stages:
            what = f"unknown stage {unknown[0]!r}" if unknown else "no stage"
            raise ValueError(f"run.stages: {what}; expected some of {', '.join(PIPELINE_STAGES)}")


class SandboxConfig(_Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Sandboxes: which backend runs them, and the Docker backend's settings."""

    section: ClassVar[str] = "sandbox"

    backend: str = "docker"
    """Which sandboxes run the episodes, by name in :data:`rsr_async.sandbox.backends.BACKENDS`:
    ``docker`` (containers on ``docker_urls``) or ``fake`` (in-process fakes that grade by
    what the agent typed: a test double, never a model's results). An unknown name is
    refused, naming the known ones, before anything starts."""
    docker_urls: tuple[str, ...] = ("unix:///var/run/docker.sock",)
    """Docker hosts (unix:// or tcp://); episodes spread over them by load."""
    base_image: str = "rsr-base:bookworm"
    """Offline base image built by ``images bootstrap`` (debootstrap + docker import)."""
    debian_mirror: str = "http://deb.debian.org/debian"
    """Mirror debootstrap reads when bootstrapping the base image."""
    debian_suite: str = "bookworm"
    """Debian release of the base image."""
    starts_per_s: Positive = 8.0
    """Rate limit on container starts per Docker host."""
    max_concurrent_starts: AtLeastOne = 16
    """Container creations/starts in flight at once per Docker host."""
    default_cpus: Cpus = 1.0
    """CPU limit when the task sets none."""
    default_memory_mb: Annotated[int, Meta(ge=6, le=1 << 20)] = 2048
    """Memory limit (MiB) when the task sets none."""
    pids_limit: AtLeastOne = 1024
    """Maximum processes per sandbox (stops fork bombs)."""
    allow_network: bool = False
    """Allow network for tasks that ask for it (both must agree)."""
    allow_uncapped_storage: bool = False
    """Run tasks that set ``storage_mb`` on a Docker host whose storage driver cannot cap a
    container's disk (``StorageOpt size`` needs overlay2 on xfs with pquota, devicemapper,
    btrfs or zfs; not overlay2 on ext4, not fuse-overlayfs). There only ``/tmp`` is capped
    (a tmpfs) and ``/app``, ``/var`` … can fill the host's disk, so such a run is refused
    at the start, naming the tasks and the host, unless this is true."""
    warm_pool: Count = 0
    """Containers kept started ahead of demand per image (0: none)."""
    max_concurrent_verifiers: AtLeastOne = 8
    """Hidden-test runs at once: they are CPU-heavy, and a verifier's timeout must measure
    its own run, not the wait for a core."""
    stop_agent_before_tests: bool = False
    """Kill every process the agent left before the hidden tests run (off: Harbor's
    shared mode, the agent's servers and daemons stay up for the tests that probe them;
    on: such tasks grade 0). Rewards are out of the agent's reach either way."""
    build_concurrency: AtLeastOne = 2
    """Image builds in flight at once."""
    api_timeout_s: Positive = 120.0
    """Deadline for one Docker API call."""
    host_retry_s: Positive = 5.0
    """Seconds a Docker host that stopped answering stays out of placement before the
    next ``/_ping`` (asked when an episode is placed); it is used again once it answers."""
    command_timeout_s: Positive = 600.0
    """Default deadline for ``run(cmd)`` inside a sandbox."""
    shell_quiet_s: NonNegative = 0.05
    """Quiet after a prompt before ``wait`` returns, when keys were typed into a running program."""
    image_files_cache: str = "~/.cache/rsr_async/image-files"
    """Directory keeping each task image's file listing (for the leak audit) by image id,
    so only the first run on a host lists an image; ``""``: every run lists again."""
    compose_subnets: str = "10.231.0.0/16"
    """Address range the compose episodes' private networks take their small subnets from
    (see :mod:`rsr_async.sandbox.subnets`); ``""``: Docker's default pools (about 31
    networks per host, so about 31 compose episodes at once)."""
    compose_subnet_prefix: Annotated[int, Meta(ge=8, le=29)] = 28
    """Size of one episode's subnet (/28: 13 containers); a compose task with more
    services gets a larger block."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.docker_urls:
            raise ValueError("sandbox.docker_urls: expected at least one Docker URL")
        if self.compose_subnets:
            try:
                subnets = ipaddress.IPv4Network(self.compose_subnets)
            except ValueError as exc:
                raise ValueError(
                    f"sandbox.compose_subnets: {self.compose_subnets!r} is not an IPv4 network "
                    f"({exc}); e.g. 10.231.0.0/16, or \"\" for Docker's default pools"
                ) from None
            if subnets.prefixlen > self.compose_subnet_prefix:
                raise ValueError(
                    f"sandbox.compose_subnet_prefix: /{self.compose_subnet_prefix} blocks do not "
                    f"fit in sandbox.compose_subnets {subnets}"
                )


def model_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a model server's address, or None if it can.

    The one check of ``run --llm-url``, ``llm.urls`` and ``eval --model NAME=URL``: a port
    out of range or a broken IPv6 literal would otherwise surface as a traceback from the
    HTTP client, and a scheme it cannot speak as a 10 s probe of nothing.
    """
    try:
        parts = urlsplit(url)
        port = parts.port  # parses it: "Port out of range 0-65535", "Invalid IPv6 URL"
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return "expected an http:// or https:// URL, such as http://127.0.0.1:30000"
    if not parts.hostname:
        return "the URL names no host"
    if port == 0:
        return "port 0 cannot be connected to"
    return None


class LLMConfig(_Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Model servers and how to talk to them."""

    section: ClassVar[str] = "llm"

    urls: tuple[str, ...] = ()
    """SGLang servers or one sglang-router URL. Empty: start the embedded simulator."""
    api: Literal["native", "openai"] = "native"
    """``native``: SGLang ``/generate`` with a client-side chat template; ``openai``: chat."""
    model: str = ""
    """Model name sent to the server and recorded in trajectories; empty: ask the servers
    (``/get_model_info`` ``model_path``)."""
    routing: Literal["sticky", "round_robin", "router"] = "sticky"
    """``sticky``: cache-affine per episode; ``router``: one sglang-router URL decides."""
    max_inflight_per_server: AtLeastOne = 512
    """Requests in flight per server."""
    connect_timeout_s: Positive = 10.0
    """Deadline to connect."""
    read_timeout_s: Positive = 600.0
    """Deadline between bytes of a reply."""
    total_timeout_s: Positive = 1800.0
    """Deadline for a whole call, retries included."""
    max_retries: Count = 4
    """Retries for connection errors, 5xx, 429 and in-stream errors (never other 4xx)."""
    backoff_s: NonNegative = 0.5
    """Base of the jittered exponential backoff between retries."""
    max_new_tokens: Annotated[int, Meta(ge=1, le=MAX_TOKENS)] = 4096
    """Always sent explicitly (SGLang's ``/generate`` default is 128)."""
    temperature: NonNegative | None = None
    """Sampling temperature; None lets the server decide (Harbor sends none)."""
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    """Nucleus sampling; None lets the server decide."""
    context_length: Tokens = 0
    """Context window used when no server reports one (a router's workers are asked).
    0: the servers must report it; opening the model side fails if none does."""
    chat_template: str = ""
    """Jinja chat template for native mode. Empty: the built-in ChatML template."""
    health_interval_s: Positive = 5.0
    """Seconds between health checks of each server."""
    breaker_failures: AtLeastOne = 5
    """Consecutive failures that open a server's circuit breaker."""
    breaker_reset_s: NonNegative = 3.0
    """Seconds an open breaker waits before letting one probe request through. At most
    the retry budget's shortest span (see :func:`retry_span_s`; checked when a config is
    loaded), so a call that saw the breaker open is retried after it half-opens: with
    one server, the server decides a call's fate, not the breaker. A short reset costs
    one probe per dead server every few seconds; a long one failed every call of a run
    whose only server blinked (issue 15: 10 s against a ~3.75-7.5 s budget)."""
    balance_abs_threshold: Count = 64
    """Sticky routing yields when max - min in-flight exceeds this ..."""
    balance_rel_threshold: Annotated[float, Meta(ge=1, le=MAX_COUNT)] = 1.5
    """... and max > min * this (sglang-router's cache_aware rule)."""
    max_reply_bytes: Annotated[int, Meta(ge=1, le=1 << 30)] = 4 * 1024 * 1024
    """Largest reply body read from a server (bytes). A longer reply is cut off at the
    transport (memory stays bounded) and counts as the model's failure for that call:
    it comes back as an output-limit reply (finish reason ``length``, empty text), which
    the harness reports to the model as a truncated reply; it is never retried as an
    infrastructure error. 4 MiB is ~1M tokens of text, far past any ``max_new_tokens``."""
    probe_timeout_s: Positive = 10.0
    """Deadline of the ``/health`` probe of every server before any sandbox starts:
    all down fails the run at once (naming the URLs); some down is a warning."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for url in self.urls:
            if (problem := model_url_problem(url)) is not None:
                raise ValueError(f"llm.urls: {url!r} (--llm-url): {problem}")


class HarnessConfig(_Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Agent harness settings (Terminus 2 and friends)."""

    section: ClassVar[str] = "harness"

    max_turns: AtLeastOne = 200
    """Model turns per episode (the TB2 reference configs use 200)."""
    max_observation_bytes: AtLeastOne = 10000
    """Observations longer than this keep the first and last half."""
    max_duration_s: NonNegative = 60.0
    """Longest wait the model may ask for after a command."""
    default_duration_s: NonNegative = 1.0
    """Wait used when a command gives no duration (with a warning)."""
    handoff_free_tokens: Tokens = 8000
    """Hand off (summarise) when free context falls under this many tokens."""
    model_call_budget_s: Positive = 120.0
    """Time one model call may take out of the agent's time limit; the rest of a longer
    call (a stalled or overloaded server) is infrastructure time, not the agent's."""


class EngineConfig(_Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Scheduler, store and progress."""

    section: ClassVar[str] = "engine"

    grace_period_s: NonNegative = 30.0
    """After the first Ctrl-C, how long running jobs may finish before being cancelled."""
    infra_retries: Count = 2
    """Extra attempts for a job that failed on infrastructure (never for a model failure)."""
    job_deadline_s: NonNegative = 0.0
    """Wall clock per job attempt, past which it is stored as ``infra_error`` (the agent's
    own clock is the harness's); 0: build + agent + verifier timeouts + 15 min of queueing."""
    retry_backoff_s: NonNegative = 1.0
    """Base of the jittered exponential backoff between infra retries of a job."""
    progress: Literal["auto", "rich", "plain", "none"] = "auto"
    """Live display: rich on a TTY, plain lines otherwise."""
    metrics_port: Port = 0
    """Serve Prometheus metrics on this loopback port (0: off)."""
    store_batch_ms: NonNegative = 50.0
    """The store writer commits at most this often (batched transactions)."""


class RsrConfig(_Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The rewrite pipeline (paper defaults in ``configs/paper.toml``)."""

    section: ClassVar[str] = "rsr"

    runbooks_per_source: AtLeastOne = 4
    """K: runbooks the planner writes per successful source trajectory."""
    executions_per_runbook: AtLeastOne = 4
    """M: executor episodes per accepted runbook."""
    executor_temperature: NonNegative = 0.7
    """Sampling temperature of the executor."""
    executor_harness: str = "terminus2"
    """The executor is plain Terminus 2."""
    critic_max_retries: Count = 2
    """Regenerations of a rejected runbook before it is dropped."""
    rsrt_wall_clock_min: Positive = 180.0
    """RSRT's hidden-verifier loop ends at this wall clock."""
    critic_ngram: AtLeastOne = 8
    """The critic's n-gram size for overlap with the task's solution and tests."""
    critic_overlap_threshold: Share = 0.2
    """Share of a runbook's n-grams found in solution/ or tests/ above which it is rejected."""
    validation_share: Share = 0.1
    """Share of tasks the export puts in the validation split (whole tasks, never split)."""
    observation_bytes_for_planner: AtLeastOne = 2000
    """Compressed trajectories keep this many bytes of each observation (head/tail)."""


class SimConfig(_Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The SGLang-compatible simulator (``sim-server``) and its latency model."""

    section: ClassVar[str] = "sim"

    host: str = "127.0.0.1"
    """Listen address (loopback only)."""
    port: Port = 30000
    """Listen port."""
    model_name: str = "scripted-stand-in"
    """Name reported by ``/get_model_info`` and ``/v1/models``."""
    context_length: Annotated[int, Meta(ge=1, le=MAX_TOKENS)] = 32768
    """Context window reported and enforced."""
    prefill_us_per_token: NonNegative = 20.0
    """Latency per uncached prompt token."""
    decode_us_per_token: NonNegative = 400.0
    """Latency per generated token. The defaults (20 µs prefill, 400 µs decode) are ~50x
    faster than a GPU server so offline runs stay quick, with the real shape: latency grows
    with tokens, cache hits skip prefill, and a full server queues."""
    max_running_requests: AtLeastOne = 256
    """Requests decoded at once; the rest queue."""
    cache_tokens: Tokens = 2_000_000
    """Radix cache capacity in tokens (LRU eviction)."""
    error_rate: Share = 0.0
    """Fault injection: share of requests answered with HTTP 500."""
    slow_rate: Share = 0.0
    """Fault injection: share of requests delayed by ``slow_s``."""
    slow_s: NonNegative = 5.0
    """Extra delay for slow requests."""
    drop_rate: Share = 0.0
    """Fault injection: share of connections dropped before replying."""
    seed: Seed = 0
    """Seed for fault injection and the scripted model."""
    enable_cache_report: bool = True
    """As SGLang's ``--enable-cache-report`` (which ``serve`` always passes): OpenAI
    replies carry ``usage.prompt_tokens_details.cached_tokens``; off, that field is null."""


class ClusterConfig(_Section, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Running episodes on many machines through Ray (``run --ray ADDRESS``)."""

    section: ClassVar[str] = "cluster"

    ray_address: str = ""
    """Ray cluster to run episodes on: ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``;
    ``local`` starts a private Ray instance on this machine; empty: no Ray."""
    actors_per_node: AtLeastOne = 1
    """Episode actors started on each Ray node that offers CPUs."""
    actor_cpus: NonNegative = 1.0
    """CPUs each episode actor reserves from Ray (its node's event loop)."""
    batch_max: AtLeastOne = 256
    """Most job attempts sent to an actor in one call."""
    batch_window_ms: NonNegative = 5.0
    """How long a job waits for others to share its call to an actor."""
    poll_wait_s: Positive = 1.0
    """How long one collecting call waits on an actor for a finished job."""
    call_timeout_s: Positive = 60.0
    """Deadline of one control call to an actor (past ``poll_wait_s`` for a poll)."""
    start_timeout_s: Positive = 900.0
    """Deadline for an actor to open its runtime (a fresh node bootstraps the base image)."""
    replace_lost: Count = 4
    """Replacement actors a run may start, each on the node of an actor lost while that
    node stays alive (0: a lost actor's work goes to the others only)."""


class Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every setting of the engine, one section per room."""

    run: RunConfig = RunConfig()
    sandbox: SandboxConfig = SandboxConfig()
    llm: LLMConfig = LLMConfig()
    harness: HarnessConfig = HarnessConfig()
    engine: EngineConfig = EngineConfig()
    rsr: RsrConfig = RsrConfig()
    sim: SimConfig = SimConfig()
    cluster: ClusterConfig = ClusterConfig()

    def to_dict(self) -> dict[str, Any]:
        """Plain builtins, e.g. to store with a run and compare on resume."""
        result: dict[str, Any] = msgspec.to_builtins(self)
        return result


def _merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _parse_override(text: str) -> dict[str, Any]:
    """``a.b=value`` → ``{"a": {"b": value}}``; the value is read as TOML, else a string."""
    path, sep, raw = text.partition("=")
    if not sep or not path.strip():
        raise ConfigError(f"--set {text!r}: expected section.key=value")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    node: dict[str, Any] = {}
    root = node
    parts = path.strip().split(".")
    for part in parts[:-1]:
        node[part] = {}
        node = node[part]
    node[parts[-1]] = value
    return root


_BOUND = re.compile(r"^Expected `(?P<type>\w+)` (?P<bound>.+) - at `\$\.(?P<path>[\w.]+)`$")
"""msgspec's message for a value outside its ``Meta`` bounds."""
_OWN = re.compile(r"^(?P<text>\w+\.\w+: .*) - at `\$\.\w+`$")
"""A ``__post_init__`` message, which names its key already."""


def _lookup(data: Mapping[str, Any], path: str) -> object:
    node: object = data
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def _message(exc: Exception, data: Mapping[str, Any]) -> str:
    text = str(exc)
    bound = _BOUND.match(text)
    if bound:  # key first, with the value given: "sandbox.api_timeout_s: expected ..., got -1"
        kind = "an integer" if bound["type"] == "int" else "a number"
        value = _lookup(data, bound["path"])
        return f"{bound['path']}: expected {kind} {bound['bound']}, got {value!r}"
    own = _OWN.match(text)
    if own:
        return own["text"]
    # msgspec names the path as ``$.llm.urls[0]``; make it read as a key path.
    return text.replace("`$.", "`").replace("- at `$`", "")


def _convert(data: dict[str, Any], source: str) -> Config:
    try:
        config = msgspec.convert(data, Config)
    except (msgspec.ValidationError, ValueError, TypeError) as exc:
        raise ConfigError(f"{source}: {_message(exc, data)}") from exc
    return config


def retry_span_s(llm: LLMConfig) -> float:
    """The shortest time a model call keeps retrying: its backoff sleeps at their lowest
    jitter (x0.5, as :func:`rsr_async.llm.client.with_retries` draws them), capped by
    ``llm.total_timeout_s``."""
    sleeps = sum(min(30.0, llm.backoff_s * 2.0**n) * 0.5 for n in range(llm.max_retries))
    return min(sleeps, llm.total_timeout_s)


def _check_retry_budget(llm: LLMConfig, source: str) -> None:
    # Loaded configs only: tests build LLMConfig directly with tiny backoffs on purpose.
    # With no retries (llm.max_retries = 0, fail fast) there is no budget to agree with.
    span = retry_span_s(llm)
    if llm.max_retries > 0 and llm.breaker_reset_s > span:
        raise ConfigError(
            f"{source}: llm.breaker_reset_s={llm.breaker_reset_s} outlasts the retry budget "
            f"(at least {span:.2f} s from llm.max_retries={llm.max_retries}, "
            f"llm.backoff_s={llm.backoff_s}): a call would fail on the open breaker, not on "
            f"the server; lower llm.breaker_reset_s to <= {span:.2f} or raise llm.max_retries"
        )


def add_config_arguments(parser: argparse.ArgumentParser, *, section: str = "") -> None:
    """``--config FILE`` and ``--set KEY=VALUE`` (both repeatable), for every subcommand
    that reads settings; pass them to :func:`load_config`. ``section`` names what the
    command reads, for the help text."""
    read = f"; [{section}] is read" if section else ""
    key = f"{section}.KEY=VALUE" if section else "KEY=VALUE"
    parser.add_argument(
        "--config", action="append", default=[], metavar="FILE",
        help=f"config file laid over the defaults (a path, or a name in configs/: 'paper'){read}; repeatable",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar=key,
        help="override one setting, e.g. --set llm.temperature=0.7; repeatable",
    )


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read one TOML config file, with errors naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: config file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    _convert(data, str(path))  # validate this file alone, so errors name it
    return data


def resolve_config_path(name: str | Path) -> Path:
    """A path as given, or a bare name (``paper``) looked up in ``configs/``."""
    path = Path(name)
    if path.exists() or path.suffix or "/" in str(name):
        return path
    return CONFIG_DIR / f"{name}.toml"


HARNESS_NAMES = ("terminus2", "statem", "rsrt")
"""Every harness a setting may name. The registry in :mod:`rsr_async.harness` builds
exactly these (a test holds them equal); the names live here, on the ground floor, so
that loading a config never imports the harnesses."""

_HARNESS_KEYS = (("run", "harnesses"), ("rsr", "executor_harness"))
"""Settings that name harnesses: checked against :data:`HARNESS_NAMES` at load time."""


def _harness_keys_set(patch: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [
        (section, key)
        for section, key in _HARNESS_KEYS
        if isinstance(patch.get(section), Mapping) and key in patch[section]
    ]


def check_harness_name(name: str, *, where: str = "") -> None:
    """Raise :class:`ConfigError` unless ``name`` is a harness; ``where`` (a file and key)
    prefixes the message."""
    if name not in HARNESS_NAMES:
        prefix = f"{where}: " if where else ""
        raise ConfigError(f"{prefix}unknown harness {name!r}: expected one of {', '.join(HARNESS_NAMES)}")


def _check_harnesses(config: Config, origins: Mapping[tuple[str, str], str]) -> None:
    """Every harness a source asked for must exist; errors name the source (the defaults
    name Terminus 2, which a test holds to the registry)."""
    for (section, key), source in origins.items():
        value = getattr(getattr(config, section), key)
        for name in (value,) if isinstance(value, str) else value:
            check_harness_name(name, where=f"{source}: {section}.{key}")


def load_config(
    files: Iterable[str | Path] = (),
    overrides: Iterable[str] = (),
    values: Mapping[str, Any] | None = None,
    *,
    base: Mapping[str, Any] | None = None,
) -> Config:
    """Defaults, then ``base``, then each file in order, then ``--set`` overrides, then
    ``values``.

    ``values`` is a nested mapping from CLI flags (e.g. ``{"run": {"concurrency": 512}}``);
    ``base`` is a whole stored config (a run directory's, for the stage commands).
    A harness name that is unknown fails here, naming the
    file (or ``--set``) and key it came from, rather than as an infra error per episode.
    """
    files, overrides = list(files), list(overrides)
    data: dict[str, Any] = json.loads(json.dumps(dict(base))) if base else {}
    origins: dict[tuple[str, str], str] = {}
    for name in files:
        path = resolve_config_path(name)
        patch = read_config_file(path)
        origins.update(dict.fromkeys(_harness_keys_set(patch), str(path)))
        data = _merge(data, patch)
    for text in overrides:
        patch = _parse_override(text)
        origins.update(dict.fromkeys(_harness_keys_set(patch), f"--set {text}"))
        data = _merge(data, patch)
        _convert(data, f"--set {text}")
    if values:
        origins.update(dict.fromkeys(_harness_keys_set(values), "command line"))
        data = _merge(data, values)
    config = _convert(data, "command line" if values else "config")
    _check_harnesses(config, origins)
    # On the final config only: one --set may need another to agree with it.
    sources = [str(f) for f in files] + [f"--set {o}" for o in overrides]
    _check_retry_budget(config.llm, ", ".join(sources) or "defaults")
    return config
