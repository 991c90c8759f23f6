"""The simulator, the client and ``serve`` against SGLang's shapes, recorded from its code.

``fixtures/sglang_shapes.json`` is written by ``scripts/record_sglang_shapes.py`` from the
sglang 0.5.23 wheel (parsed, never imported) and sglang-router 0.3.2;
``fixtures/openai_shapes.json`` by ``scripts/record_openai_shapes.py`` from openai 3.60.0.
Neither package is needed here. Each test says what it proves.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from rsr_async.llm.serve import ServeSpec, build_commands
from rsr_async.llm.sim.server import SAMPLING_PARAMS_FIELDS, SimServer

FIXTURES = Path(__file__).parent / "fixtures"
SGLANG = json.loads((FIXTURES / "sglang_shapes.json").read_text())
OPENAI = json.loads((FIXTURES / "openai_shapes.json").read_text())
PROTOCOL = SGLANG["openai_protocol"]
MESSAGES = [{"role": "user", "content": "Task Description:\nsay hello\n$ "}]


def _keys(model: str) -> set[str]:
    return set(PROTOCOL[model])


def _routes(sim: SimServer) -> dict[str, set[str]]:
    """The simulator's routes in SGLang's spelling ({model:path} for aiohttp's {model:.+})."""
    out: dict[str, set[str]] = {}
    for route in sim.app().router.routes():
        path = route.resource.canonical if route.resource else ""
        path = path.replace("{model}", "{model:path}")
        if route.method != "HEAD":
            out.setdefault(path, set()).add(route.method)
    return out


def test_recorded_versions_are_the_pinned_ones() -> None:
    # Proves the fixtures are the versions the project names: a re-recording from another
    # version must update the pins (pyproject's dev extra) in the same change.
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert SGLANG["sglang_version"] == "0.5.23"
    assert f'"sglang-router=={SGLANG["router"]["version"]}"' in pyproject
    assert f'"openai=={OPENAI["openai_version"]}"' in pyproject


def test_simulator_routes_are_sglangs_and_cover_what_clients_use() -> None:
    # Proves every route the simulator answers exists in SGLang 0.5.23 with those methods
    # (so no test passes against a route a real server lacks), and that every route our
    # client and a standard OpenAI client call is simulated. /metrics is mounted by
    # SGLang's Prometheus middleware, /rsr/stats is ours.
    recorded = {path: set(methods) for path, methods in SGLANG["routes"].items()}
    served = _routes(SimServer())
    for path, methods in served.items():
        if path in ("/metrics", "/rsr/stats"):
            continue
        assert path in recorded, f"{path} is not an SGLang route"
        assert methods <= recorded[path], f"{path}: {methods - recorded[path]} not in SGLang"
    used = {"/generate": "POST", "/v1/chat/completions": "POST", "/v1/completions": "POST",
            "/v1/models": "GET", "/v1/models/{model:path}": "GET", "/health": "GET",
            "/health_generate": "GET", "/ready": "GET", "/model_info": "GET",
            "/get_model_info": "GET", "/server_info": "GET", "/get_server_info": "GET",
            "/flush_cache": "POST", "/abort_request": "POST"}
    for path, method in used.items():
        assert method in recorded[path] and method in served[path], path


async def test_generate_reply_has_sglangs_keys(sims: Callable[..., Any]) -> None:
    # Proves /generate answers with GenerateResponse's fields, meta_info with exactly the
    # keys SGLang's TokenizerManager always sends, and finish_reason objects shaped as
    # SGLang's finish classes' to_json (stop: matched; length: length).
    [sim] = await sims()
    response_fields = set(SGLANG["api_types"]["GenerateResponse"]["fields"])
    always = set(SGLANG["meta_info"]["always"])
    shapes = {v["type"]: v["keys"] for v in SGLANG["finish_reasons"].values()}
    async with httpx.AsyncClient() as http:
        for max_new, kind in ((4096, "stop"), (3, "length")):
            body = (await http.post(sim.url + "/generate", json={
                "text": "<|im_start|>user\nsay hello<|im_end|>\n<|im_start|>assistant\n",
                "sampling_params": {"max_new_tokens": max_new}})).json()
            assert {"text", "output_ids", "meta_info"} <= set(body) <= response_fields
            assert set(body["meta_info"]) == always
            finish = body["meta_info"]["finish_reason"]
            assert finish["type"] == kind and list(finish) == shapes[kind]


async def test_generate_stream_is_framed_and_cumulative_as_sglang(sims: Callable[..., Any]) -> None:
    # Proves the stream's framing (data: events, a final data: [DONE]) and SGLang's
    # default of cumulative text (incremental_streaming_output is False): each event's
    # text extends the previous one, finish_reason and e2e_latency only on the last, and
    # the last event equals the non-stream reply.
    assert SGLANG["generate_stream"]["cumulative_text_by_default"] is True
    done = SGLANG["generate_stream"]["done"]
    [sim] = await sims()
    request = {"text": "<|im_start|>user\nTask Description:\nlist files\n$ <|im_end|>\n"
                       "<|im_start|>assistant\n", "sampling_params": {"max_new_tokens": 512}}
    async with httpx.AsyncClient() as http:
        plain = (await http.post(sim.url + "/generate", json=request)).json()
        raw = (await http.post(sim.url + "/generate", json={**request, "stream": True})).text
    frames = raw.split("\n\n")
    assert frames[-1] == "" and frames[-2] + "\n\n" == done
    events = [json.loads(f.removeprefix(SGLANG["generate_stream"]["event_prefix"]))
              for f in frames[:-2]]
    assert len(events) > 1
    for before, after in zip(events, events[1:], strict=False):
        assert after["text"].startswith(before["text"])
        assert before["meta_info"]["finish_reason"] is None
        assert "e2e_latency" not in before["meta_info"]
    assert events[-1]["text"] == plain["text"] and events[-1]["output_ids"] == plain["output_ids"]
    assert set(events[-1]["meta_info"]) == set(SGLANG["meta_info"]["always"])


async def test_unknown_sampling_param_is_refused_as_sglang_refuses_it(sims: Callable[..., Any]) -> None:
    # Proves the simulator knows SGLang's sampling parameters (the contract's list, in
    # order) and refuses any other as SGLang's contract gate does (HTTP 400, serde's
    # message), so a client sending a misspelt or OpenAI-style parameter fails here.
    contract = SGLANG["api_types"]["SamplingParams"]
    assert contract["unknown_keys"] == "rejected"
    assert list(SAMPLING_PARAMS_FIELDS) == contract["order"]
    listed = ", ".join(f"`{f}`" for f in contract["order"])
    assert "f'unknown field `{key}`, expected one of {listed}'" in SGLANG["unknown_field_messages"]
    [sim] = await sims()
    async with httpx.AsyncClient() as http:
        reply = await http.post(sim.url + "/generate", json={
            "text": "hi", "sampling_params": {"max_tokens": 8}})
    assert reply.status_code == 400
    assert reply.json() == {"error": f"unknown field `max_tokens`, expected one of {listed}"}


async def test_openai_replies_have_sglangs_fields(sims: Callable[..., Any]) -> None:
    # Proves /v1/chat/completions, /v1/completions (plain and streamed) and /v1/models
    # answer with the fields of SGLang's own pydantic models, and that each reply
    # carries every field the openai package requires.
    [sim] = await sims()
    oa = OPENAI["models"]

    def required(name: str) -> set[str]:
        return {k for k, v in oa[name].items() if v["required"]}

    async with httpx.AsyncClient() as http:
        chat = (await http.post(sim.url + "/v1/chat/completions",
                                json={"model": "m", "messages": MESSAGES})).json()
        assert set(chat) == _keys("ChatCompletionResponse")
        assert set(chat["choices"][0]) == _keys("ChatCompletionResponseChoice")
        assert set(chat["choices"][0]["message"]) == _keys("ChatMessage")
        assert set(chat["usage"]) == _keys("UsageInfo")
        assert required("ChatCompletion") <= set(chat)
        assert required("ChatCompletion.Choice") <= set(chat["choices"][0])
        assert required("CompletionUsage") <= set(chat["usage"])
        assert chat["choices"][0]["finish_reason"] in oa["ChatCompletion.Choice"]["finish_reason"]["literals"]

        raw = (await http.post(sim.url + "/v1/chat/completions", json={
            "model": "m", "messages": MESSAGES, "stream": True,
            "stream_options": {"include_usage": True}})).text
        chunks = [json.loads(f[6:]) for f in raw.split("\n\n") if f and f != "data: [DONE]"]
        for chunk in chunks:
            assert set(chunk) == _keys("ChatCompletionStreamResponse")
            assert required("ChatCompletionChunk") <= set(chunk)
            for choice in chunk["choices"]:
                assert set(choice) == _keys("ChatCompletionResponseStreamChoice")
                assert set(choice["delta"]) == _keys("DeltaMessage")
        assert chunks[-1]["choices"] == [] and set(chunks[-1]["usage"]) == _keys("UsageInfo")

        text = (await http.post(sim.url + "/v1/completions",
                                json={"model": "m", "prompt": "say hello"})).json()
        assert set(text) == _keys("CompletionResponse")
        assert set(text["choices"][0]) == _keys("CompletionResponseChoice")
        assert required("Completion") <= set(text) and required("CompletionChoice") <= set(text["choices"][0])
        assert text["usage"]["completion_tokens"] <= 16  # OpenAI's max_tokens default

        raw = (await http.post(sim.url + "/v1/completions", json={
            "model": "m", "prompt": "say hello", "stream": True, "max_tokens": 64})).text
        for frame in (f for f in raw.split("\n\n") if f and f != "data: [DONE]"):
            chunk = json.loads(frame[6:])
            assert set(chunk) == _keys("CompletionStreamResponse")
            assert set(chunk["choices"][0]) == _keys("CompletionResponseStreamChoice")

        models = (await http.get(sim.url + "/v1/models")).json()
        assert set(models) == _keys("ModelList")
        assert set(models["data"][0]) == _keys("ModelCard")
        assert required("Model") <= set(models["data"][0])
        missing = await http.get(sim.url + "/v1/models/no-such-model")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


async def test_usage_details_follow_the_cache_report_flag(sims: Callable[..., Any]) -> None:
    # Proves SGLang 0.5.23's rule, recorded from its UsageProcessor: with
    # --enable-cache-report every reply has prompt_tokens_details {"cached_tokens": N}
    # (0 included); without it the field is null.
    assert SGLANG["usage"] == {"details_with_cache_report": True, "details_dropped_when_zero": False}
    [on] = await sims()
    [off] = await sims(enable_cache_report=False)
    async with httpx.AsyncClient() as http:
        first = (await http.post(on.url + "/v1/chat/completions", json={"messages": MESSAGES})).json()
        assert first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
        again = (await http.post(on.url + "/v1/chat/completions", json={"messages": MESSAGES})).json()
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        bare = (await http.post(off.url + "/v1/chat/completions", json={"messages": MESSAGES})).json()
        assert bare["usage"]["prompt_tokens_details"] is None


async def test_model_and_server_info_are_where_sglang_puts_them(sims: Callable[..., Any]) -> None:
    # Proves /model_info has SGLang's keys and, as SGLang, no context length; that
    # /server_info carries the server arguments (context_length among them), the
    # scheduler's keys and what /server_info adds (version ...); and that /v1/models'
    # card holds the window as max_model_len.
    where = SGLANG["server_info"]["context_length"]
    assert where == {"model_info_has_it": False, "server_args_default": None,
                     "server_args_field": "context_length", "v1_models_key": "max_model_len"}
    [sim] = await sims()
    async with httpx.AsyncClient() as http:
        for path in ("/model_info", "/get_model_info"):
            info = (await http.get(sim.url + path)).json()
            assert list(info) == SGLANG["model_info_keys"]
        for path in ("/server_info", "/get_server_info"):
            info = (await http.get(sim.url + path)).json()
            assert set(SGLANG["server_info"]["added_keys"]) <= set(info)
            assert set(SGLANG["server_info"]["scheduler_keys"]) <= set(info)
            assert set(info) - set(SGLANG["server_info"]["added_keys"]) - set(
                SGLANG["server_info"]["scheduler_keys"]) <= set(SGLANG["server_args"]["fields"])
            assert info[where["server_args_field"]] == sim.config.context_length
        card = (await http.get(sim.url + "/v1/models")).json()["data"][0]
        assert card[where["v1_models_key"]] == sim.config.context_length


async def test_metrics_are_sglangs_names_and_kinds(sims: Callable[..., Any]) -> None:
    # Proves every metric family the simulator exports exists in SGLang 0.5.23 under that
    # name and kind (a renamed metric fails here, not on a dashboard).
    [sim] = await sims()
    async with httpx.AsyncClient() as http:
        text = (await http.get(sim.url + "/metrics")).text
    families = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    assert "sglang:num_requests_total" in families
    for name, kind in families.items():
        assert SGLANG["metrics"].get(name) == kind, name


def test_abort_request_fields_are_sglangs() -> None:
    # Proves /abort_request takes what the client posts ({"rid": ...}) and what the
    # simulator reads (rid, abort_all), by SGLang's contract.
    assert SGLANG["api_types"]["AbortRequest"]["order"] == ["rid", "abort_all"]
    assert SGLANG["routes"]["/abort_request"] == ["POST"]


def _check_argv(argv: list[str], flags: dict[str, Any], takes_value: Callable[[dict[str, Any]], bool]) -> None:
    i = 0
    while i < len(argv):
        flag = argv[i]
        assert flag.startswith("--"), f"{flag!r}: a value without a flag in {argv}"
        assert flag in flags, f"{flag} is not a flag of the recorded launcher"
        i += 2 if takes_value(flags[flag]) else 1


def test_serve_passes_only_flags_sglang_declares() -> None:
    # Proves every flag `serve` passes to sglang.launch_server is one SGLang 0.5.23's
    # ServerArgs declares, spelt out in full (argparse's prefix matching is not relied
    # on), each with a value exactly when it takes one; and that every router flag is
    # one sglang-router 0.3.2's parser declares. `--tp` (what serve passed before) is not
    # a flag there, so the old command fails this test.
    server_flags = SGLANG["server_args"]["flags"]
    assert "--tp" not in server_flags and "--tp-size" in server_flags
    assert SGLANG["server_args"]["launch_module"] == "sglang.launch_server"
    spec = ServeSpec(model_path="Qwen/Qwen3-8B", servers=2, tp=2, router=True,
                     extra_args=("--schedule-policy", "lpm", "--context-length", "32768"),
                     router_args=("--log-level", "warn"))
    *servers, router = build_commands(spec)
    for argv in servers:
        assert argv[:3] == [sys.executable, "-m", "sglang.launch_server"]
        _check_argv(argv[3:], server_flags, lambda f: bool(f["takes_value"]))
    assert router[:3] == [sys.executable, "-m", "sglang_router.launch_router"]
    rest = router[3:]
    # --worker-urls takes several values.
    at = rest.index("--worker-urls")
    rest = rest[:at] + rest[at + 1 + spec.servers:]
    _check_argv(rest, SGLANG["router"]["flags"], lambda f: bool(f["takes_value"]))


@pytest.mark.parametrize("flag", ["--enable-metrics", "--enable-cache-report"])
def test_serve_switches_are_switches(flag: str) -> None:
    # Proves the switches serve passes take no value in SGLang (a flag turned into an
    # option would swallow the next argument).
    assert SGLANG["server_args"]["flags"][flag]["takes_value"] is False

