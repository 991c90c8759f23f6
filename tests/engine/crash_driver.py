"""A small CLI the crash and signal tests run as a real subprocess.

    python tests/engine/crash_driver.py RUN_DIR LOG N [--concurrency C] [--latency LO HI]

Runs N fake jobs in RUN_DIR through a real Engine (uvloop, signal handlers, exit codes
as a CLI would); the fake runner appends every executed key to LOG.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rsr_async.config import Config, EngineConfig, RunConfig  # noqa: E402
from rsr_async.engine import Engine, exit_code, run_async, shutdown_on_signals  # noqa: E402
from rsr_async.engine.fakes import FakeRunner, make_jobs  # noqa: E402


async def main(args: argparse.Namespace) -> int:
    config = Config(
        run=RunConfig(concurrency=args.concurrency),
        engine=EngineConfig(progress="plain", grace_period_s=args.grace, store_batch_ms=20),
    )
    runner = FakeRunner(latency_s=(args.latency[0], args.latency[1]), steps=3, log_path=args.log)
    async with Engine(config, runner=runner, run_dir=args.run_dir) as engine:
        async with shutdown_on_signals(engine) as signals:
            print("ready", flush=True)
            async for _ in engine.run(make_jobs(args.n)):
                pass
        stats = engine.statistics()
    print(f"done {stats.done} skipped {stats.skipped} shutdown {stats.shutdown}", flush=True)
    return exit_code(stats, signals)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("log")
    parser.add_argument("n", type=int)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency", type=float, nargs=2, default=(0.05, 0.3))
    parser.add_argument("--grace", type=float, default=30.0)
    sys.exit(run_async(main, parser.parse_args()))
