"""The viewer's web server: aiohttp on the loopback interface, server-rendered pages.

Routes (all ``GET``; the viewer never writes)::

    /                          the run: counts per stage and status, tasks (domain, harness filters)
    /jobs?stage=&harness=&domain=&status=&task=&after=&before=
                               one page of jobs, by key
    /task/<task>               a task: instruction, its episodes, its jobs per stage
    /job/<key>                 one job: a trajectory (episodes), a runbook, a verdict, an audit
    /source/<discover key>     a source trajectory beside its runbooks, verdicts and rewrites
    /static/viewer.css, /static/viewer.js

It binds 127.0.0.1 only and answers only requests addressed to a loopback name (a page
from elsewhere cannot reach it through a rebound DNS name). Each page is built, queries and
template together, in a worker thread: the event loop never waits on SQLite or on
rendering a long trajectory.
"""

from __future__ import annotations

import errno
import ipaddress
import time
from collections.abc import Awaitable, Callable
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import anyio
import anyio.to_thread
import jinja2
from aiohttp import web

from ..engine.reader import DB_NAME, RunReader
from ..errors import ConfigError, RsrError, StoreError
from .queries import PAGE_SIZE, BadRequest, Filters, NotFound, RunView

__all__ = ["LOOPBACK_NAMES", "ViewerServer", "open_run"]

LOOPBACK_NAMES: Final = frozenset({"127.0.0.1", "localhost", "::1"})
"""Host names a request may be addressed to."""
_STATIC: Final = {"viewer.css": "text/css", "viewer.js": "text/javascript"}
_HEADERS: Final = {
    # Everything is served from here; nothing inline runs, nothing leaves.
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def open_run(run_dir: str | Path) -> RunReader:
    """Open ``run_dir``'s store read-only (no lock: a live run keeps writing). Blocking."""
    run_dir = Path(run_dir)
    if not (run_dir / DB_NAME).is_file():
        raise StoreError(
            f"{run_dir}: not a run directory (no {DB_NAME}); point `view` at a directory "
            "that `python -m rsr_async run` wrote"
        )
    return RunReader.open_readonly(run_dir)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("rsr_async.viewer", "templates"),
        autoescape=True,  # every template is HTML; trajectory text is untrusted
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["path"] = lambda key: quote(str(key), safe="/")
    env.filters["when"] = lambda ts: (
        time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts)) if ts else "—"
    )
    env.filters["secs"] = lambda s: "—" if s is None else f"{s:.1f} s" if s < 600 else f"{s / 60:.1f} min"
    env.filters["num"] = lambda n: "—" if n is None else f"{n:,}"
    env.globals["PAGE_SIZE"] = PAGE_SIZE
    return env


class ViewerServer:
    """Serves one run directory's pages on ``127.0.0.1:port`` (0: a free port).

    ``async with ViewerServer(run_dir) as server: ... server.url ...``. Opening raises
    :class:`~rsr_async.errors.StoreError` for a directory without a run database and
    :class:`~rsr_async.errors.ConfigError` for a port that cannot be used.
    """

    def __init__(self, run_dir: str | Path, *, host: str = "127.0.0.1", port: int = 0) -> None:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ConfigError(
                f"host {host!r}: the viewer serves the loopback interface only "
                "(use 127.0.0.1; reach it from elsewhere through an SSH tunnel)"
            )
        if not 0 <= port <= 65535:
            raise ConfigError(f"--port {port}: expected 0 (any free port) to 65535")
        self.run_dir = Path(run_dir)
        self.host = host
        self.port = port
        self._store: RunReader | None = None
        self._view: RunView | None = None
        self._runner: web.AppRunner | None = None
        self._env = _environment()
        self._static = {
            name: resources.files(__package__).joinpath("templates", name).read_bytes()
            for name in _STATIC
        }
        # Pages share one SQLite connection (the store serialises reads); a few threads
        # still let a quick page pass a slow render.
        self._limiter = anyio.CapacityLimiter(4)

    @property
    def url(self) -> str:
        """The address to open (``http://127.0.0.1:PORT/``)."""
        return f"http://{self.host}:{self.port}/"

    def app(self) -> web.Application:
        """The aiohttp application (routes and the loopback guard)."""
        app = web.Application(middlewares=[self._guard])
        app.add_routes([
            web.get("/", self._overview),
            web.get("/jobs", self._jobs),
            web.get("/task/{task}", self._task),
            web.get("/job/{key:.+}", self._job),
            web.get("/source/{key:.+}", self._source),
            web.get("/static/{name}", self._asset),
        ])
        return app

    async def __aenter__(self) -> ViewerServer:
        self._store = await anyio.to_thread.run_sync(open_run, self.run_dir)
        self._view = RunView(self._store)
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        try:
            await self._runner.setup()
            site = web.TCPSite(self._runner, self.host, self.port)
            try:
                await site.start()
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise ConfigError(
                        f"--port {self.port}: {self.host}:{self.port} is already in use; "
                        "choose another port, or --port 0 for a free one"
                    ) from exc
                raise ConfigError(
                    f"--port {self.port}: cannot listen on {self.host}:{self.port} "
                    f"({exc.strerror or exc}); choose another port, or --port 0"
                ) from exc
            self.port = int(self._runner.addresses[0][1])
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._close()

    async def _close(self) -> None:
        if self._runner is not None:
            with anyio.CancelScope(shield=True):
                await self._runner.cleanup()
            self._runner = None
        if self._store is not None:
            store, self._store = self._store, None
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(store.close)

    # ------------------------------------------------------------------ plumbing

    @web.middleware
    async def _guard(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        host = request.headers.get("Host", "")
        name = host[1:].split("]", 1)[0] if host.startswith("[") else host.rsplit(":", 1)[0]
        remote = request.remote or ""
        try:
            from_loopback = ipaddress.ip_address(remote).is_loopback
        except ValueError:
            from_loopback = False
        if name.lower() not in LOOPBACK_NAMES or not from_loopback:
            response: web.StreamResponse = web.Response(
                status=403,
                text=f"this viewer answers only requests to 127.0.0.1 or localhost, not {host!r}\n",
            )
        else:
            try:
                response = await handler(request)
            except web.HTTPNotFound:
                response = await self._error(404, f"no page at {request.path}")
        response.headers.update(_HEADERS)
        return response

    async def _render(self, build: Callable[[RunView], dict[str, Any]], template: str) -> web.Response:
        """Build a page's context and render it, both in a worker thread."""
        view = self._view
        assert view is not None, "the server is not open"

        def page() -> tuple[int, str]:
            try:
                context = build(view)
            except NotFound as exc:
                return 404, self._page("error.html", status=404, message=str(exc.args[0]))
            except BadRequest as exc:
                return 400, self._page("error.html", status=400, message=str(exc))
            except RsrError as exc:  # a damaged store, a failed query: say which
                return 500, self._page("error.html", status=500, message=str(exc))
            return 200, self._page(template, **context)

        status, html = await anyio.to_thread.run_sync(page, limiter=self._limiter)
        return web.Response(status=status, text=html, content_type="text/html")

    def _page(self, template: str, **context: Any) -> str:
        return self._env.get_template(template).render(run_dir=self.run_dir, **context)

    async def _error(self, status: int, message: str) -> web.Response:
        html = await anyio.to_thread.run_sync(
            partial(self._page, "error.html", status=status, message=message), limiter=self._limiter
        )
        return web.Response(status=status, text=html, content_type="text/html")

    # ------------------------------------------------------------------ pages

    async def _overview(self, request: web.Request) -> web.Response:
        query = request.query
        try:
            page = int(query.get("page", "1"))
        except ValueError:
            return await self._error(400, f"page {query.get('page')!r}: expected a number")
        return await self._render(
            partial(
                RunView.overview,
                domain=query.get("domain") or None,
                harness=query.get("harness") or None,
                page=page,
            ),
            "index.html",
        )

    async def _jobs(self, request: web.Request) -> web.Response:
        query = request.query

        def build(view: RunView) -> dict[str, Any]:
            filters = Filters.from_query(query)
            return view.jobs(filters, after=query.get("after") or None, before=query.get("before") or None)

        return await self._render(build, "jobs.html")

    async def _task(self, request: web.Request) -> web.Response:
        return await self._render(partial(RunView.task, name=request.match_info["task"]), "task.html")

    async def _job(self, request: web.Request) -> web.Response:
        return await self._render(partial(RunView.job, key=request.match_info["key"]), "job.html")

    async def _source(self, request: web.Request) -> web.Response:
        return await self._render(partial(RunView.source, key=request.match_info["key"]), "source.html")

    async def _asset(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in _STATIC:
            raise web.HTTPNotFound()
        return web.Response(body=self._static[name], content_type=_STATIC[name])
