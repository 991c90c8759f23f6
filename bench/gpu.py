"""GPU benchmark: real SGLang servers, a small model made here, our client/router/engine.

``python -m rsr_async bench gpu [--servers N] [--router] [--json FILE]``

Needs a machine with an NVIDIA GPU and SGLang installed (``--sglang-python`` names a
Python that has it; default: this one). Without a GPU it refuses, saying so, and runs
nothing. Nothing is downloaded:

1. **Model.** A small Qwen2-architecture model is written to a temporary directory: a
   ``config.json`` (2 layers, hidden 256) that SGLang fills with random weights
   (``--load-format dummy``), and a byte-level BPE tokenizer trained here (by
   ``tokenizers`` in SGLang's Python, which its ``transformers`` brings) on this
   checkout's own text, with ChatML special tokens and chat template. Its replies are noise; only the plumbing is measured.
2. **Servers.** ``serve``'s own :func:`~rsr_async.llm.serve.serve_fleet` starts
   ``--servers`` ``sglang.launch_server`` processes (and sglang-router with ``--router``),
   flags checked against SGLang's recorded ``ServerArgs`` by the test suite
   (:func:`server_spec` is what the test reads).
3. **Client.** ``--concurrency`` requests in flight for ``--seconds``: our
   :class:`~rsr_async.llm.client.SGLangClient` (native ``/generate``, ChatML rendered
   client side, a shared ~2k-token system prompt then a unique question), then raw
   aiohttp with the same bodies for as long. Reported per run: completion tokens/s,
   requests/s, the cached share of prompt tokens (from the servers' own
   ``sglang:*_tokens_total`` counters, before and after), client CPU per request, and
   ``client_vs_raw`` (requests/s ratio: the client's overhead when the server is not
   the bottleneck is ``1 - ratio``).
4. **Engine.** The full pipeline (:func:`~rsr_async.rsr.runtime.open_pipeline`) runs
   Terminus 2 discover episodes on the bundled tasks with in-process fake sandboxes
   (:class:`~rsr_async.testing.FakeSandboxPool`) against the same servers: episodes,
   wall time, completion tokens/s and cached share from the servers' counters.

With ``--router`` the client phase also runs through the router URL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import emit  # noqa: E402

from rsr_async.llm.serve import ServeSpec  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
          "{{ message['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


# -------------------------------------------------------------------- refusal


def gpu_names() -> list[str]:
    """GPUs ``nvidia-smi -L`` lists ([] when there is no driver or no GPU)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line for line in out.stdout.splitlines() if line.startswith("GPU ")] if out.returncode == 0 else []


def sglang_version(python: str) -> str | None:
    """``sglang.__version__`` as ``python`` imports it, or None when it cannot."""
    probe = "import sglang, tokenizers; print(sglang.__version__)"
    try:
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


# -------------------------------------------------------------------- the model


def _corpus(limit_bytes: int = 4_000_000) -> list[str]:
    """This checkout's own text: sources, docs, task instructions (no download)."""
    texts: list[str] = []
    size = 0
    for pattern in ("rsr_async/**/*.py", "**/*.md", "rsr_async/**/instruction.md", "tests/**/*.py"):
        for path in sorted(REPO.glob(pattern)):
            if ".venv" in path.parts or not path.is_file():
                continue
            text = path.read_text(errors="replace")
            texts.append(text)
            size += len(text)
            if size >= limit_bytes:
                return texts
    return texts


_BUILD_TOKENIZER = """
import json, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
corpus, out, vocab_size = sys.argv[1], sys.argv[2], int(sys.argv[3])
special = json.loads(sys.argv[4])
tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
with open(corpus, encoding="utf-8") as f:
    tokenizer.train_from_iterator(f.read().split("\\f"), trainer=trainer)
tokenizer.save(out)
print(json.dumps({"size": tokenizer.get_vocab_size(),
                  "ids": {t: tokenizer.token_to_id(t) for t in special}}))
"""
"""Trains the tokenizer in the Python that runs SGLang (its ``transformers`` brings
``tokenizers``), so this package does not depend on it."""


def make_model(directory: Path, python: str, *, vocab_size: int = 8192,
               context_length: int = 8192) -> Path:
    """Write a small Qwen2 config and a tokenizer trained here into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    corpus = directory / "corpus.txt"
    corpus.write_text("\f".join(_corpus()), encoding="utf-8")
    try:
        done = subprocess.run(
            [python, "-c", _BUILD_TOKENIZER, str(corpus), str(directory / "tokenizer.json"),
             str(vocab_size), json.dumps(list(SPECIAL))],
            capture_output=True, text=True, timeout=600)
    finally:
        corpus.unlink()
    if done.returncode != 0:
        raise SystemExit(f"bench gpu: training the tokenizer with {python} failed:\n"
                         f"{done.stderr[-2000:]}")
    built = json.loads(done.stdout.strip().splitlines()[-1])
    ids = built["ids"]
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": context_length,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "chat_template": CHATML,
    }, indent=1))
    (directory / "special_tokens_map.json").write_text(json.dumps({
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}))
    padded_vocab = -(-built["size"] // 64) * 64
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "hidden_act": "silu", "max_position_embeddings": context_length,
        "max_window_layers": 2, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "sliding_window": None, "use_sliding_window": False, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "vocab_size": padded_vocab, "attention_dropout": 0.0,
        "initializer_range": 0.02, "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"], "use_cache": True,
    }, indent=1))
    (directory / "generation_config.json").write_text(json.dumps({
        "eos_token_id": ids["<|im_end|>"], "bos_token_id": ids["<|endoftext|>"]}))
    return directory


# -------------------------------------------------------------------- the servers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def server_spec(model_dir: str, *, servers: int, gpus: int, router: bool, python: str,
                context_length: int = 8192, base_port: int = 30000,
                router_port: int = 29999, concurrency: int = 64) -> ServeSpec:
    """The fleet ``bench gpu`` starts (the test suite checks its flags against SGLang's)."""
    share = max(0.05, min(0.8, 0.8 / servers)) if gpus < servers else 0.8
    return ServeSpec(
        model_path=model_dir, servers=servers, tp=1, base_port=base_port, router=router,
        router_port=router_port, concurrency=concurrency,
        gpus_per_server=1 if gpus >= servers > 1 else 0,
        launcher=(python, "-m", "sglang.launch_server"),
        router_launcher=(python, "-m", "sglang_router.launch_router"),
        extra_args=("--load-format", "dummy", "--tokenizer-path", model_dir,
                    "--context-length", str(context_length),
                    "--mem-fraction-static", f"{share:.2f}", "--skip-server-warmup"),
    )


_COUNTER = re.compile(r"^(sglang:(?:prompt|cached|generation)_tokens_total)\{[^}]*\}\s+(\S+)$",
                      re.MULTILINE)


async def token_counters(urls: list[str]) -> dict[str, float]:
    """Sum over servers of SGLang's own prompt/cached/generation token counters."""
    import httpx

    totals = {"prompt": 0.0, "cached": 0.0, "generation": 0.0}
    async with httpx.AsyncClient(timeout=30.0, trust_env=False) as http:
        for url in urls:
            text = (await http.get(url + "/metrics")).text
            for name, value in _COUNTER.findall(text):
                totals[name.split(":")[1].split("_")[0]] += float(value)
    return totals


def _delta(before: dict[str, float], after: dict[str, float], wall: float) -> dict[str, Any]:
    prompt = after["prompt"] - before["prompt"]
    cached = after["cached"] - before["cached"]
    generated = after["generation"] - before["generation"]
    return {"completion_tokens_per_s": generated / wall if wall else 0.0,
            "prompt_tokens": prompt, "cached_tokens": cached,
            "cached_share": cached / prompt if prompt else 0.0}


# -------------------------------------------------------------------- client phase


SYSTEM = ("You are an AI assistant tasked with solving command-line tasks in a Linux "
          "environment. Reply with a JSON object holding your analysis, plan and the "
          "commands to run. " * 40)


def _prompt(i: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Task {i}: count the lines of file{i}.txt and "
                                        f"write the number to out{i}.txt."}]


async def client_phase(url: str, worker_urls: list[str], *, concurrency: int, seconds: float,
                       max_new_tokens: int) -> dict[str, Any]:
    import aiohttp

    from rsr_async.config import LLMConfig
    from rsr_async.llm.client import SGLangClient
    from rsr_async.llm.prompt import render_chatml

    config = LLMConfig(max_new_tokens=max_new_tokens, total_timeout_s=600.0, read_timeout_s=600.0)
    out: dict[str, Any] = {"url": url, "concurrency": concurrency, "seconds": seconds}

    async def drive(call: Any) -> tuple[int, float, float, list[float]]:
        done = 0
        latencies: list[float] = []
        stop = 0.0
        counter = iter(range(10**9))

        async def worker() -> None:
            nonlocal done
            while time.monotonic() < stop:
                started = time.perf_counter()
                await call(next(counter))
                latencies.append(time.perf_counter() - started)
                done += 1

        # Warm the connection pool first, so connects are not counted.
        stop = time.monotonic() + min(2.0, seconds / 4)
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        done, latencies = 0, []
        cpu, wall = time.process_time(), time.monotonic()
        stop = wall + seconds
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done, time.monotonic() - wall, time.process_time() - cpu, latencies

    async with SGLangClient(url, config) as client:
        await client.generate(text=render_chatml(_prompt(-1)), max_new_tokens=1)  # warm
        before = await token_counters(worker_urls)
        n, wall, cpu, lat = await drive(lambda i: client.generate(
            text=render_chatml(_prompt(i)), max_new_tokens=max_new_tokens, temperature=0.0))
        after = await token_counters(worker_urls)
    out["client"] = {"requests": n, "requests_per_s": n / wall, "wall_s": wall,
                     "cpu_us_per_request": cpu / n * 1e6 if n else None,
                     "latency_p50_s": statistics.median(lat) if lat else None,
                     **_delta(before, after, wall)}

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def raw(i: int) -> None:
            body = {"text": render_chatml(_prompt(i)),
                    "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0}}
            # One write of the whole body (json= would send headers and body apart).
            async with session.post(url + "/generate", data=json.dumps(body).encode(),
                                    headers={"content-type": "application/json"}) as response:
                await response.read()

        before = await token_counters(worker_urls)
        n, wall, cpu, lat = await drive(raw)
        after = await token_counters(worker_urls)
    out["raw_aiohttp"] = {"requests": n, "requests_per_s": n / wall, "wall_s": wall,
                          "cpu_us_per_request": cpu / n * 1e6 if n else None,
                          "latency_p50_s": statistics.median(lat) if lat else None,
                          **_delta(before, after, wall)}
    raw_rps = out["raw_aiohttp"]["requests_per_s"]
    out["client_vs_raw"] = out["client"]["requests_per_s"] / raw_rps if raw_rps else None
    return out


# -------------------------------------------------------------------- engine phase


async def engine_phase(urls: list[str], worker_urls: list[str], *, attempts: int,
                       concurrency: int, max_turns: int, routing: str) -> dict[str, Any]:
    from rsr_async.config import load_config
    from rsr_async.rsr.commands import write_task_list
    from rsr_async.rsr.runtime import open_pipeline
    from rsr_async.tasks.dataset import BUNDLED_SUITE, load_dataset

    dataset = load_dataset([str(BUNDLED_SUITE)])
    settings = [
        f"llm.urls={json.dumps(urls)}", f"llm.routing={routing}",
        "llm.max_new_tokens=256", "llm.total_timeout_s=600", "llm.read_timeout_s=600",
        f"run.attempts={attempts}", f"run.concurrency={concurrency}",
        'run.harnesses=["terminus2"]', 'run.stages=["discover"]',
        f"harness.max_turns={max_turns}", "engine.progress=none", "sandbox.backend=fake",
    ]
    config = load_config([], settings)
    episodes = 0
    with tempfile.TemporaryDirectory(prefix="rsr-bench-gpu-") as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        tasks_list = write_task_list(dataset.tasks, run_dir)
        before = await token_counters(worker_urls)
        started = time.monotonic()
        async with open_pipeline(config, run_dir=run_dir, tasks_dir=tasks_list,
                                 progress="none") as pipeline:
            async for _ in pipeline.run(dataset.tasks, stages=config.run.stages):
                episodes += 1
            stats = pipeline.engine.statistics()
        wall = time.monotonic() - started
        after = await token_counters(worker_urls)
    return {"episodes": episodes, "tasks": len(dataset.tasks), "attempts": attempts,
            "max_turns": max_turns, "wall_s": wall, "episodes_per_s": episodes / wall,
            "engine": repr(stats), **_delta(before, after, wall)}


# -------------------------------------------------------------------- main


async def _run(args: argparse.Namespace, model_dir: Path, gpus: int) -> dict[str, Any]:
    from rsr_async.llm.serve import serve_fleet, server_urls

    spec = server_spec(str(model_dir), servers=args.servers, gpus=gpus, router=args.router,
                       python=args.sglang_python, base_port=_free_port(),
                       router_port=_free_port(), concurrency=args.concurrency)
    report: dict[str, Any] = {}
    started = time.monotonic()
    async with serve_fleet(spec, ready_timeout_s=args.ready_timeout, grace_s=20.0) as urls:
        report["startup_s"] = time.monotonic() - started
        workers = server_urls(spec)
        report["client"] = [await client_phase(
            w, [w], concurrency=args.concurrency, seconds=args.seconds,
            max_new_tokens=args.max_new_tokens) for w in workers[:1]]
        if args.router:
            report["client_via_router"] = await client_phase(
                urls[0], workers, concurrency=args.concurrency, seconds=args.seconds,
                max_new_tokens=args.max_new_tokens)
        report["engine"] = await engine_phase(
            workers, workers, attempts=args.attempts, concurrency=args.concurrency,
            max_turns=args.max_turns, routing="sticky")
    return report


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "bench gpu")
    p.add_argument("--json", metavar="FILE", help="also write the JSON result here")
    p.add_argument("--servers", type=int, default=2, help="SGLang servers to start")
    p.add_argument("--router", action="store_true", help="also start sglang-router in front")
    p.add_argument("--sglang-python", default=sys.executable, help="a Python with sglang")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight")
    p.add_argument("--seconds", type=float, default=20.0, help="length of each client run")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--attempts", type=int, default=2, help="engine: attempts per bundled task")
    p.add_argument("--max-turns", type=int, default=6, help="engine: turns per episode")
    p.add_argument("--ready-timeout", type=float, default=600.0, help="seconds for servers to start")
    p.add_argument("--model-dir", help="write the model here (default: a temporary directory)")
    args = p.parse_args(argv)

    gpus = gpu_names()
    if not gpus:
        print("bench gpu: no GPU here (`nvidia-smi -L` lists none): it starts real SGLang "
              "servers and needs an NVIDIA GPU; nothing was run", file=sys.stderr)
        return 2
    version = sglang_version(args.sglang_python)
    if version is None:
        print(f"bench gpu: {args.sglang_python} cannot import sglang and tokenizers: pip "
              "install 'rsr_async[sglang]' there, or pass --sglang-python; nothing was run",
              file=sys.stderr)
        return 2
    tmp = None if args.model_dir else tempfile.mkdtemp(prefix="rsr-bench-gpu-model-")
    model_dir = Path(args.model_dir or tmp or "")
    try:
        make_model(model_dir, args.sglang_python)
        report = asyncio.run(_run(args, model_dir, len(gpus)))
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    emit({"bench": "gpu", "gpus": gpus, "sglang_version": version,
          "servers": args.servers, "router": args.router, "cpu_count": os.cpu_count(),
          "note": "random weights: the replies are noise; these figures measure serving "
                  "and our plumbing, never a model", **report}, args.json)
    return 0
