"""A stand-in for sglang-router's HTTP surface, for tests on machines without its binary.

It answers what sglang-router 0.3.2 answered in front of two simulators (recorded by
``tests/llm/test_sglang_router.py``, which runs the real router when it is installed):
``/health`` ``OK``; ``/get_server_info`` the router's own
``{"router_manager": true, "routers_count": 1, "workers_count": N}`` (no context length);
``/workers`` ``{"workers": [{"url": ...}], "total": N}``; ``/abort_request`` 404. It
forwards ``/generate``, ``/v1/chat/completions`` and ``/get_model_info`` to its workers
in turn, and, as the router does, a client that closes its connection cancels the
forwarded request, which closes the upstream connection (the worker then aborts).
"""

from __future__ import annotations

import itertools
from types import TracebackType

import aiohttp
from aiohttp import web


class RouterStandIn:
    """``async with RouterStandIn(worker_urls) as router``: serves on a free loopback port."""

    def __init__(self, workers: list[str]) -> None:
        self.workers = [w.rstrip("/") for w in workers]
        self._turn = itertools.cycle(range(len(self.workers)))
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    async def __aenter__(self) -> RouterStandIn:
        app = web.Application()
        app.add_routes([
            web.get("/health", self._health),
            web.get("/get_server_info", self._server_info),
            web.get("/workers", self._workers),
            web.get("/get_model_info", self._forward),
            web.post("/generate", self._forward),
            web.post("/v1/chat/completions", self._forward),
        ])  # anything else, /abort_request included, is aiohttp's 404
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def _server_info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"router_manager": True, "routers_count": 1, "workers_count": len(self.workers)})

    async def _workers(self, request: web.Request) -> web.Response:
        return web.json_response({"workers": [{"url": u, "is_healthy": True} for u in self.workers],
                                  "total": len(self.workers)})

    async def _forward(self, request: web.Request) -> web.Response:
        assert self._session is not None
        url = self.workers[next(self._turn)] + request.path
        body = await request.read()
        # Cancelled with the handler when the client goes away: the upstream request's
        # connection closes with it.
        async with self._session.request(request.method, url, data=body or None,
                                         headers={"content-type": "application/json"}) as reply:
            return web.Response(status=reply.status, body=await reply.read(),
                                content_type=reply.content_type)
