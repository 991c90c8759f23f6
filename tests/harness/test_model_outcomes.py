"""What a model does to its own episode is the model's outcome, never infrastructure
(issue 15): replies the parser cannot even recurse into, and a model server's stalls
that are not the agent's time."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest
from aiohttp import web

from rsr_async.config import HarnessConfig, LLMConfig
from rsr_async.errors import InfraError, LLMTimeoutError
from rsr_async.harness import EpisodeOutcome, Terminus2
from rsr_async.harness.base import AgentClock
from rsr_async.harness.fakes import FakeShell, FakeShellSandbox
from rsr_async.harness.protocol import parse_reply, refused
from rsr_async.llm.base import ChatMessage, Completion
from rsr_async.llm.client import SGLangClient

from .test_terminus2 import act, last_user, play, spec

DEPTH = 100_000


def deep_replies() -> list[str]:
    return [
        '{"analysis": ' + "[" * DEPTH + "]" * DEPTH + ', "plan": "p", "commands": []}',
        '{"a":' * DEPTH + "1" + "}" * DEPTH,
        '{"analysis": "a", "plan": "p", "commands": [' + '{"k":' * DEPTH + "1" + "}" * DEPTH + "]}",
        "Here it is: " + "{" * DEPTH,  # unbalanced: the closing-brace fix makes it deep too
    ]


def test_json_nested_too_deep_is_a_parse_error() -> None:
    for text in deep_replies():
        reply = parse_reply(text)
        assert refused(reply), text[:40]
        assert reply.commands == () and not reply.task_complete


async def test_a_too_deep_reply_is_reported_to_the_model_and_the_episode_goes_on() -> None:
    # (a context large enough that the 200,000-character reply does not force a handoff)
    replies: list[str | Completion | BaseException] = [deep_replies()[0], act("echo hi\n"), act(done=True),
                                                        act(done=True)]
    outcome, model, shell, _ = await play(replies, context_length=1_000_000)
    assert outcome.end_reason == "completed" and outcome.error is None
    assert shell.sent == ["echo hi\n"]
    feedback = last_user(model.calls[1].messages)
    assert feedback.startswith("Previous response had parsing errors:\nERROR: Invalid JSON: nested too deeply")
    assert outcome.trajectory.messages[1].origin == "model"
    assert outcome.trajectory.messages[2].origin == "harness"


# -- a stalled model server is infrastructure, not the agent's time ------------------------


class StallingServer:
    """A tiny OpenAI-style server on 127.0.0.1 answering ``replies`` in order; the calls
    in ``stall`` (0-based) wait ``stall_s`` first (forever when None: a hung server)."""

    def __init__(self, replies: list[str], *, stall: set[int], stall_s: float | None) -> None:
        self.replies = replies
        self.stall = stall
        self.stall_s = stall_s
        self.calls = 0
        self.released = anyio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        index = self.calls
        self.calls += 1
        if index in self.stall:
            if self.stall_s is None:
                await self.released.wait()  # hung until the test ends
            else:
                await anyio.sleep(self.stall_s)  # the fault under test: a slow server
        body = {"choices": [{"message": {"content": self.replies[index]}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20}}
        return web.json_response(body)

    async def __aenter__(self) -> StallingServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.released.set()
        await self._runner.cleanup()


class ClientModel:
    """The real model client as the harness's ChatModel."""

    def __init__(self, client: SGLangClient) -> None:
        self._client = client

    @property
    def model_name(self) -> str:
        return "stalling"

    @property
    def context_length(self) -> int:
        return 32768

    async def chat(self, messages: Sequence[ChatMessage], *, affinity: str, max_tokens: int | None = None,
                   temperature: float | None = None, seed: int | None = None) -> Completion:
        return await self._client.chat(messages, affinity=affinity, max_tokens=max_tokens,
                                       temperature=temperature, seed=seed)


SOLVE = [act("echo hi\n"), act(done=True), act(done=True)]


async def run_against(server: StallingServer, *, total_timeout_s: float, deadline_s: float,
                      budget_s: float) -> EpisodeOutcome:
    config = LLMConfig(api="openai", total_timeout_s=total_timeout_s, read_timeout_s=total_timeout_s,
                       max_retries=0)
    async with SGLangClient(server.url, config) as client:
        harness = Terminus2(HarnessConfig())
        return await harness.run(spec(deadline_s=deadline_s), FakeShellSandbox(FakeShell()),
                                 ClientModel(client), clock=AgentClock(budget_s))


async def test_a_server_stall_longer_than_the_agent_timeout_is_not_the_agents_time() -> None:
    # The second call stalls 2 s, twice the agent's whole clock; only 0.1 s of it is the agent's.
    async with StallingServer(SOLVE, stall={1}, stall_s=2.0) as server:
        outcome = await run_against(server, total_timeout_s=30.0, deadline_s=1.0, budget_s=0.1)
    assert outcome.end_reason == "completed", outcome.error
    assert server.calls == 3


async def test_a_call_past_the_clients_total_timeout_is_an_infra_error() -> None:
    async with StallingServer(SOLVE, stall={1}, stall_s=None) as server:
        with pytest.raises(LLMTimeoutError) as info:
            await run_against(server, total_timeout_s=1.5, deadline_s=0.5, budget_s=0.1)
    assert isinstance(info.value, InfraError) and info.value.retryable


async def test_the_agents_own_time_still_runs_out() -> None:
    # Calls within the budget are the agent's time: 0.3 s a call runs a 1 s clock down.
    replies = [act("echo again\n") for _ in range(20)]
    async with StallingServer(replies, stall=set(range(20)), stall_s=0.3) as server:
        outcome = await run_against(server, total_timeout_s=30.0, deadline_s=1.0, budget_s=10.0)
    assert outcome.end_reason == "timeout"
    assert outcome.error is not None and "wall clock (1 s) ran out" in outcome.error
    assert server.calls <= 5
