"""``bench gpu`` without a GPU: its launch flags, its refusal, and its measuring code
against simulators (the servers it would start are the only part not exercised here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from rsr_async.config import SimConfig
from rsr_async.llm.serve import build_commands
from rsr_async.llm.sim import SimServer

from .test_server_shapes import SGLANG, _check_argv


def _bench_gpu() -> Any:
    import importlib.util

    bench = Path(__file__).parents[2] / "bench"
    sys.path.insert(0, str(bench))
    try:
        spec = importlib.util.spec_from_file_location("rsr_bench_gpu", bench / "gpu.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(bench))
    return module


@pytest.mark.parametrize(("servers", "gpus", "router"), [(1, 1, False), (2, 1, True), (4, 4, True)])
def test_bench_gpu_starts_servers_with_sglangs_flags(servers: int, gpus: int, router: bool) -> None:
    # Proves `bench gpu` (not runnable here: no GPU) launches SGLang with flags SGLang
    # 0.5.23 declares, so its first run on a GPU host does not die on a renamed flag.
    gpu = _bench_gpu()
    spec = gpu.server_spec("/tmp/model", servers=servers, gpus=gpus, router=router,
                           python=sys.executable)
    *argvs, last = build_commands(spec)
    if not router:
        argvs.append(last)
    for argv in argvs:
        _check_argv(argv[3:], SGLANG["server_args"]["flags"], lambda f: bool(f["takes_value"]))
        assert argv[argv.index("--load-format") + 1] == "dummy"  # random weights, no download


def test_bench_gpu_refuses_without_a_gpu() -> None:
    # Proves the refusal: one line saying why, exit 2, nothing started.
    import subprocess

    gpu = _bench_gpu()
    if gpu.gpu_names():
        pytest.skip("this machine has a GPU: the refusal does not apply")
    done = subprocess.run([sys.executable, "-m", "rsr_async", "bench", "gpu"],
                          capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parents[2])
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "bench gpu: no GPU here (`nvidia-smi -L` lists none): it starts real SGLang servers "
        "and needs an NVIDIA GPU; nothing was run"]


async def test_bench_gpu_measures_through_real_http_and_the_servers_counters() -> None:
    # Proves the measuring code runs end to end (client and raw aiohttp runs, the engine
    # on fake sandboxes) and reads SGLang's own token counters from /metrics: the
    # simulators stand in for the GPU servers. No figure is asserted, only consistency.
    gpu = _bench_gpu()
    fast = SimConfig(port=0, prefill_us_per_token=0.0, decode_us_per_token=0.0)
    async with SimServer(fast) as a, SimServer(fast) as b:
        client = await gpu.client_phase(a.url, [a.url], concurrency=4, seconds=0.3,
                                        max_new_tokens=16)
        for side in ("client", "raw_aiohttp"):
            run = client[side]
            assert run["requests"] > 0 and run["prompt_tokens"] > 0
            assert 0.5 < run["cached_share"] <= 1.0  # one shared system prompt
        assert client["client_vs_raw"] > 0
        engine = await gpu.engine_phase([a.url, b.url], [a.url, b.url], attempts=1,
                                        concurrency=8, max_turns=2, routing="sticky")
    assert engine["episodes"] == engine["tasks"] > 0
    assert engine["prompt_tokens"] > 0 and 0 < engine["cached_share"] < 1
    json.dumps(engine)  # the report is JSON
