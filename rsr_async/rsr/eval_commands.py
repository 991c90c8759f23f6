"""``python -m rsr_async eval``: served checkpoints under plain Terminus 2 (the paper's Table 5).

Each checkpoint (``--model NAME=URL``) gets its own run directory, ``<eval-dir>/<NAME>/``,
opened with :func:`~.runtime.open_pipeline` on a config whose only server is its URL,
whose only harness is ``terminus2`` and whose ``run.attempts`` is ``--runs``; only the
discover stage runs, with the discover job keys. So each checkpoint's store resumes as a
``run`` does: rerunning the same command skips finished episodes and retries
infrastructure errors (within ``engine.infra_retries`` each time). The table is then
computed from the stores alone (:func:`~rsr_async.analysis.checkpoints.checkpoint_table`),
written as ``eval.json`` and ``eval.md`` in the eval directory, and printed.

Checkpoints run **one after another**, each with the whole ``--concurrency``:

- ``--concurrency`` keeps ``run``'s meaning, the sandboxes this machine runs at once.
  Running checkpoints together would take one sandbox pool each, with its own start rate
  limit, and their first waves would build the same task images at the same time;
- one engine at a time receives the signals, so the first Ctrl-C drains it and no later
  checkpoint starts;
- the cost is that a checkpoint's servers idle while another one runs. To overlap them,
  start one ``eval --model NAME=URL --run-dir DIR`` per checkpoint (each store has its own
  lock), then the full command with the same ``--run-dir``: it finds every episode stored
  and only builds the table.

Before anything starts, every checkpoint's server must answer ``/health``: a mistyped
URL fails in seconds, naming its ``--model``, instead of as an infrastructure error per
episode. A server that reports itself as this package's simulator, or whose model name
says ``scripted``, is the scripted stand-in: a test double, marked so in both outputs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import anyio
import msgspec

from ..analysis.checkpoints import (
    SCRIPTED_LABEL,
    Checkpoint,
    checkpoint_table,
    encode_table,
    render_markdown,
)
from ..analysis.rollouts import Rollout
from ..analysis.runs import store_rollouts
from ..config import Config, LLMConfig, add_config_arguments, load_config, model_url_problem
from ..engine.reader import RunReader
from ..engine.signals import (
    EXIT_JOB_ERRORS,
    EXIT_OK,
    EXIT_PERMANENT_ONLY,
    exit_code,
    run_async,
    shutdown_on_signals,
)
from ..errors import ConfigError, LLMConnectionError, LLMError, TaskError
from ..resume import resume_view
from ..schema import Task
from ..tasks import load_dataset
from .commands import FINISHED, prewarm_until_interrupted
from .discover import discover_jobs
from .runtime import check_storage_caps, open_pipeline

__all__ = ["configure", "default_eval_dir", "load_benchmarks", "main", "parse_checkpoints"]

HARNESS = "terminus2"
"""The paper evaluates every checkpoint under plain Terminus 2."""
JSON_NAME = "eval.json"
MARKDOWN_NAME = "eval.md"
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def configure(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--model", action="append", required=True, metavar="NAME=URL",
                        help="a served checkpoint: its column's name and its SGLang server (or "
                             "router) URL; repeatable, one column each")
    parser.add_argument("--dataset", action="append", required=True, metavar="DIR",
                        help="a benchmark: a directory of task directories, named by the "
                             "directory's name; repeatable, one row group each")
    parser.add_argument("--runs", type=int, default=3,
                        help="runs per task and checkpoint: the R of pass@R and of the mean of "
                             "R runs (default 3)")
    parser.add_argument("--run-dir", metavar="DIR",
                        help="eval directory (default: runs/eval-<hash of settings, datasets, "
                             "models>); each checkpoint's store is DIR/NAME")
    parser.add_argument("--concurrency", type=int, help="episodes in flight (run.concurrency)")
    parser.add_argument("--progress", choices=["auto", "rich", "plain", "none"],
                        help="live display (engine.progress)")
    parser.add_argument("--force", action="store_true",
                        help="resume a checkpoint's store even though it was started with "
                             "another config or model")


def parse_checkpoints(values: Sequence[str]) -> list[Checkpoint]:
    """``--model NAME=URL`` values as checkpoints; a bad one raises a
    :class:`~rsr_async.errors.ConfigError` naming the flag."""
    out: list[Checkpoint] = []
    seen: set[str] = set()
    for value in values:
        flag = f"--model {value}"
        name, sep, url = value.partition("=")
        name, url = name.strip(), url.strip()
        if not sep:
            raise ConfigError(f"{flag}: expected NAME=URL (e.g. --model base=http://127.0.0.1:30000)")
        if not name:
            raise ConfigError(f"{flag}: the checkpoint's name (before '=') is empty")
        if not _SAFE_NAME.fullmatch(name) or name in (JSON_NAME, MARKDOWN_NAME):
            raise ConfigError(
                f"{flag}: the name {name!r} names a directory: use letters, digits, '.', '_' "
                "and '-', starting with a letter or digit"
            )
        if name in seen:
            raise ConfigError(f"{flag}: the name {name!r} is given twice; each column needs its own")
        if (problem := model_url_problem(url)) is not None:
            raise ConfigError(f"{flag}: the URL after '=' ({url!r}): {problem}")
        seen.add(name)
        out.append(Checkpoint(name=name, url=url.rstrip("/")))
    return out


def load_benchmarks(dirs: Sequence[str]) -> dict[str, list[Task]]:
    """Benchmark name (the directory's name) → its tasks, in ``--dataset`` order.

    Malformed tasks are reported on stderr and skipped; a directory with no loadable task,
    two benchmarks of one name, or one task name in two benchmarks (episodes are keyed by
    task name) raise, naming the flag."""
    benchmarks: dict[str, list[Task]] = {}
    where: dict[str, str] = {}
    owner: dict[str, str] = {}
    for given in dirs:
        flag = f"--dataset {given}"
        path = Path(given)
        if not path.is_dir():
            raise TaskError(f"{flag}: not a directory (a benchmark is a directory of task directories)")
        path = path.resolve()
        name = path.name
        if name in benchmarks:
            raise ConfigError(
                f"{flag}: benchmark {name!r} (the directory's name) is already {where[name]}; "
                "benchmark directories need distinct names"
            )
        dataset = load_dataset([path])
        if not dataset.tasks:
            malformed = [e for e in dataset.errors if e.path != str(path)]
            if not malformed:
                raise TaskError(f"{flag}: no task directory in {path} (none holds a task.toml or task.yaml)")
            raise TaskError(
                f"{flag}: no loadable task in {path}: {len(malformed)} malformed, the first: {malformed[0]}"
            )
        for error in dataset.errors:
            print(f"warning: {flag}: skipped a malformed task: {error}", file=sys.stderr)
        for task in dataset.tasks:
            if task.name in owner:
                raise TaskError(
                    f"{flag}: task {task.name!r} is also in benchmark {owner[task.name]!r}; "
                    "a task may be in one benchmark only (episodes are keyed by task name)"
                )
            owner[task.name] = name
        benchmarks[name] = dataset.tasks
        where[name] = str(path)
    return benchmarks


def _values(args: argparse.Namespace, sources: list[str]) -> dict[str, Any]:
    """What the command fixes in every checkpoint's config (over --config and --set)."""
    values: dict[str, Any] = {
        "run": {"attempts": args.runs, "harnesses": [HARNESS], "stages": ["discover"],
                "dataset": sources},
    }
    if args.concurrency is not None:
        values["run"]["concurrency"] = args.concurrency
    if args.progress:
        values["engine"] = {"progress": args.progress}
    return values


def default_eval_dir(config: Config, sources: Sequence[str], checkpoints: Sequence[Checkpoint]) -> Path:
    """``runs/eval-<hash>``: the same command (settings, datasets, models) resumes the same
    evaluation."""
    view = {
        "config": resume_view(config.to_dict()),
        "datasets": list(sources),
        "models": [f"{c.name}={c.url}" for c in checkpoints],
    }
    digest = hashlib.sha256(json.dumps(view, sort_keys=True).encode()).hexdigest()[:10]
    return Path("runs") / f"eval-{digest}"


class _Plan(NamedTuple):
    configs: list[Config]
    """One per checkpoint, in order."""
    checkpoints: list[Checkpoint]
    benchmarks: dict[str, list[Task]]
    eval_dir: Path
    force: bool


def main(args: argparse.Namespace) -> int:
    checkpoints = parse_checkpoints(args.model)
    if args.runs < 1:
        raise ConfigError(f"--runs {args.runs}: expected a number >= 1")
    if args.concurrency is not None and args.concurrency < 1:
        raise ConfigError(f"--concurrency {args.concurrency}: expected a number >= 1")
    benchmarks = load_benchmarks(args.dataset)
    sources = [str(Path(d).resolve()) for d in args.dataset]
    values = _values(args, sources)
    base = load_config(args.config, args.set, values)
    eval_dir = Path(args.run_dir) if args.run_dir else default_eval_dir(base, sources, checkpoints)
    eval_dir = eval_dir.resolve()  # created once every server has answered
    configs = []
    for checkpoint in checkpoints:
        mine = {**values, "run": {**values["run"], "run_dir": str(eval_dir / checkpoint.name)},
                "llm": {"urls": [checkpoint.url]}}
        configs.append(load_config(args.config, args.set, mine))
    plan = _Plan(configs, checkpoints, benchmarks, eval_dir, args.force)
    return run_async(_evaluate, plan)


async def _evaluate(plan: _Plan) -> int:
    simulators: dict[str, bool] = {}
    async with anyio.create_task_group() as tg:
        for checkpoint, config in zip(plan.checkpoints, plan.configs, strict=True):
            tg.start_soon(_probe, checkpoint, config.llm, simulators)
    tasks = [task for bench in plan.benchmarks.values() for task in bench]
    await check_storage_caps(plan.configs[0].sandbox, tasks)
    plan.eval_dir.mkdir(parents=True, exist_ok=True)
    print(f"eval directory: {plan.eval_dir}", file=sys.stderr)
    done: list[Checkpoint] = []
    codes: list[int] = []
    for checkpoint, config in zip(plan.checkpoints, plan.configs, strict=True):
        code, served, interrupted = await _run_checkpoint(
            config, checkpoint, tasks, plan.eval_dir / checkpoint.name,
            simulator=simulators[checkpoint.name], force=plan.force,
        )
        if interrupted:  # rerun the same command to resume; no table from a partial run
            return code
        done.append(served)
        codes.append(code)
    rollouts = await anyio.to_thread.run_sync(_read_rollouts, done, plan.configs[0].run.attempts)
    table = checkpoint_table(
        rollouts,
        {name: [t.name for t in bench] for name, bench in plan.benchmarks.items()},
        done,
        runs=plan.configs[0].run.attempts,
        harness=HARNESS,
    )
    markdown = render_markdown(table)
    (plan.eval_dir / JSON_NAME).write_bytes(encode_table(table))
    (plan.eval_dir / MARKDOWN_NAME).write_text(markdown, encoding="utf-8")
    sys.stdout.write(markdown)
    sys.stdout.flush()
    print(f"eval: {plan.eval_dir / JSON_NAME}, {plan.eval_dir / MARKDOWN_NAME}", file=sys.stderr)
    worst = [c for c in codes if c not in (EXIT_OK, EXIT_JOB_ERRORS, EXIT_PERMANENT_ONLY)]
    if worst:
        return worst[0]
    if EXIT_JOB_ERRORS in codes:
        return EXIT_JOB_ERRORS
    # Permanent-only when no checkpoint graded anything; else the table has figures.
    return EXIT_PERMANENT_ONLY if codes and all(c == EXIT_PERMANENT_ONLY for c in codes) else EXIT_OK


async def _probe(checkpoint: Checkpoint, llm: LLMConfig, simulators: dict[str, bool]) -> None:
    """Refuse a checkpoint whose server does not answer; note whether it is the simulator."""
    from ..llm import SGLangClient
    from ..llm.sim.server import SIM_VERSION

    timeout_s = llm.connect_timeout_s
    async with SGLangClient(checkpoint.url, llm) as client:
        if not await client.health(timeout_s=timeout_s):
            raise LLMConnectionError(
                f"--model {checkpoint.name}={checkpoint.url}: no server answers "
                f"{checkpoint.url}/health within {timeout_s:g} s; start it, or fix the URL"
            )
        try:
            info = await client.server_info(timeout_s=timeout_s)
        except (LLMError, msgspec.DecodeError):
            info = {}  # e.g. a router without /get_server_info: not our simulator
    simulators[checkpoint.name] = info.get("version") == SIM_VERSION


async def _run_checkpoint(
    config: Config,
    checkpoint: Checkpoint,
    tasks: list[Task],
    run_dir: Path,
    *,
    simulator: bool,
    force: bool,
) -> tuple[int, Checkpoint, bool]:
    """Run (or resume) one checkpoint's episodes; its exit code, its column's facts and
    whether a signal stopped it."""
    print(f"checkpoint {checkpoint.name}: {checkpoint.url} -> {run_dir}", file=sys.stderr)
    async with open_pipeline(config, run_dir=run_dir, force=force) as pipeline:
        engine, runtime = pipeline.engine, pipeline.runtime
        scripted = runtime.scripted or simulator
        if scripted:
            print(f"checkpoint {checkpoint.name} (model {runtime.model.model_name!r}): "
                  f"{SCRIPTED_LABEL}", file=sys.stderr)
        jobs = list(discover_jobs(tasks, config))
        ran = 0
        async with shutdown_on_signals(engine) as signals:
            if config.run.prewarm:
                statuses = engine.store.statuses(str(job.key) for job in jobs)
                todo = [j for j in jobs if statuses.get(str(j.key)) not in FINISHED]
                wave = todo[: config.run.concurrency]
                if wave:
                    print(f"starting {len(wave)} sandboxes for the first wave ...", file=sys.stderr)
                    await prewarm_until_interrupted(runtime, wave, signals)
            async for _ in pipeline.run(tasks, stages=("discover",)):
                ran += 1
        code = exit_code(engine.statistics(), signals)
        served = msgspec.structs.replace(
            checkpoint,
            model=runtime.model.model_name,
            scripted=scripted,
            simulator=simulator,
            run_dir=str(run_dir),
        )
    print(f"checkpoint {checkpoint.name}: {ran} episodes run now, {len(jobs)} in all",
          file=sys.stderr)
    return code, served, signals.interrupted


def _read_rollouts(checkpoints: Sequence[Checkpoint], runs: int) -> list[Rollout]:
    """Every checkpoint's stored episodes as rollouts labelled with its name (the table's
    column). Runs past ``runs`` (a store resumed with ``--force``) are left out."""
    out: list[Rollout] = []
    for checkpoint in checkpoints:
        with RunReader.open_readonly(checkpoint.run_dir) as store:
            out.extend(
                msgspec.structs.replace(r, harness=checkpoint.name)
                for r in store_rollouts(store)
                if r.harness == HARNESS and r.attempt < runs
            )
    return out
