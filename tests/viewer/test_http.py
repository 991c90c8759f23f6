"""The viewer over real HTTP on 127.0.0.1 (aiohttp client against the real server): pages,
filters, keyset pages, 404s, escaping, the loopback guard, and a run that writes while
the viewer serves."""

from __future__ import annotations

import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import anyio
import anyio.to_thread
import pytest

from rsr_async.engine import Job, Store
from rsr_async.errors import ConfigError, StoreError
from rsr_async.schema import EpisodeResult, EpisodeSpec, JobKey, JobStatus, Task
from rsr_async.viewer import PAGE_SIZE, ViewerServer

from .runs import CLEAN, LEAK, LEAKY, SOURCE, STATEM_SOURCE, XSS

_ROW = re.compile(
    r'<tr data-key="(?P<key>[^"]+)" data-stage="(?P<stage>[^"]*)" data-harness="(?P<harness>[^"]*)" '
    r'data-status="(?P<status>[^"]*)" data-domain="(?P<domain>[^"]*)">'
)
TIMEOUT = aiohttp.ClientTimeout(total=60)


class Client:
    def __init__(self, server: ViewerServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.session = session

    async def get(self, path: str, **kwargs: object) -> tuple[int, str]:
        async with self.session.get(self.server.url.rstrip("/") + path, **kwargs) as response:  # type: ignore[arg-type]
            return response.status, await response.text()

    async def rows(self, path: str) -> list[dict[str, str]]:
        status, html = await self.get(path)
        assert status == 200, html
        return [m.groupdict() for m in _ROW.finditer(html)]


@pytest.fixture
async def client(run_dir: Path) -> AsyncIterator[Client]:
    async with ViewerServer(run_dir) as server, aiohttp.ClientSession(timeout=TIMEOUT) as session:
        yield Client(server, session)


async def test_overview_lists_tasks_with_their_episodes_per_harness(client: Client) -> None:
    status, html = await client.get("/")
    assert status == 200
    for task in ("csv-report", "nginx-fix", "hash-crack"):
        assert f'data-task="{task}"' in html
    assert 'href="/jobs?stage=discover&amp;status=infra_error"' in html  # the counts table links
    status, html = await client.get("/?domain=security")
    assert 'data-task="hash-crack"' in html and 'data-task="csv-report"' not in html


async def test_filters_keep_only_matching_jobs(client: Client) -> None:
    every = await client.rows("/jobs")
    assert {r["stage"] for r in every} == {"audit", "critique", "discover", "execute", "plan"}
    statem = await client.rows("/jobs?harness=statem")
    assert statem and all(r["harness"] == "statem" for r in statem)
    assert {r["key"] for r in statem} == {r["key"] for r in every if r["harness"] == "statem"}
    failed = await client.rows("/jobs?stage=discover&status=failed")
    assert len(failed) == 4 and all(r["stage"] == "discover" and r["status"] == "failed" for r in failed)
    security = await client.rows("/jobs?domain=security")
    assert {r["key"].split("/")[1] for r in security} == {"hash-crack"}
    both = await client.rows("/jobs?domain=data-processing&stage=execute&status=succeeded")
    assert {r["key"] for r in both} == {LEAKY, CLEAN}
    assert await client.rows("/jobs?domain=no-such-domain") == []
    status, html = await client.get("/jobs?status=bogus")
    assert status == 400 and "bogus" in html


async def test_unknown_keys_and_pages_are_404_pages(client: Client) -> None:
    for path in ("/job/discover/nope/terminus2/a0/-/e-1", "/source/execute/csv-report/terminus2/a0/r0d1/e0",
                 "/task/no-such-task", "/nowhere", "/static/secrets.txt"):
        status, html = await client.get(path)
        assert status == 404, path
        assert "<h1>404 not found</h1>" in html and "<!doctype html>" in html
    status, html = await client.get("/job/discover/nope/terminus2/a0/-/e-1")
    assert "no job &#39;discover/nope/terminus2/a0/-/e-1&#39;" in html


async def test_model_text_is_escaped_never_markup(client: Client) -> None:
    status, html = await client.get(f"/job/{SOURCE}")
    assert status == 200
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(" in html
    assert XSS.startswith("<script>")
    # the only scripts are our own file
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/static/viewer.js" defer>']


async def test_a_trajectory_shows_origins_tokens_timing_and_leak_marks(client: Client) -> None:
    status, html = await client.get(f"/job/{STATEM_SOURCE}")
    for origin in ("task", "model", "env", "harness"):
        assert f'class="msg origin-{origin}' in html
    assert "t+2.5 s" in html and "1,000 / 61 / 900" in html  # at, prompt / completion / cached
    status, html = await client.get(f"/job/{LEAKY}")
    turn = html.split('data-origin="model" data-turn="1"', 1)[1].split("</li>", 1)[0]
    assert f'<mark class="leak">{LEAK}</mark>' in turn
    assert '<mark class="flag">1337</mark>' in turn
    assert html.count(f'<mark class="leak">{LEAK}</mark>') == 2  # the command and the reply
    assert 'data-related="audit"' in html and 'data-related="source"' in html
    # Each flag says which scanner rule raised it, its sentence in the cell's title.
    assert '<td title="unseen-token: token &#39;s3cr3t-9f2a&#39; at turn 1' in html
    assert ">unseen-token</td>" in html


async def test_the_source_page_shows_runbooks_verdicts_and_rewrites(client: Client) -> None:
    status, html = await client.get(f"/source/{SOURCE}")
    assert status == 200
    assert [m for m in re.findall(r'data-runbook="([^"]+)"', html)] == ["r0d0", "r0d1", "r1d0"]
    assert "rule:literal_value" in html and '<div class="verdict rejected">' in html
    assert html.count('<div class="verdict accepted">') == 2
    assert f'data-key="{LEAKY}"' in html and f'data-key="{CLEAN}"' in html
    assert 'class="audit-dropped"' in html and 'class="audit-kept"' in html
    assert f'<code class="leak-value">{LEAK}</code>' in html


async def test_it_binds_loopback_and_answers_only_loopback_names(client: Client, run_dir: Path) -> None:
    runner = client.server._runner
    assert runner is not None
    assert [address[0] for address in runner.addresses] == ["127.0.0.1"]
    status, html = await client.get("/", headers={"Host": "evil.example"})
    assert status == 403 and "answers only" in html
    status, _ = await client.get("/", headers={"Host": f"localhost:{client.server.port}"})
    assert status == 200
    with pytest.raises(ConfigError, match="loopback"):
        ViewerServer(run_dir, host="0.0.0.0")
    with pytest.raises(ConfigError, match="65535"):
        ViewerServer(run_dir, port=70000)


async def test_a_used_port_and_a_missing_store_are_one_line_errors(run_dir: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"--port {port}: 127.0.0.1:{port} is already in use"):
            async with ViewerServer(run_dir, port=port):
                pass
    with pytest.raises(StoreError, match=f"{tmp_path}: not a run directory"):
        async with ViewerServer(tmp_path):
            pass


def _result(task: str, attempt: int, status: JobStatus, *, harness: str = "terminus2",
            category: str = "live") -> tuple[EpisodeResult, Job]:
    key = JobKey(stage="discover", task=task, harness=harness, attempt=attempt)
    spec = EpisodeSpec(key=key, task=Task(name=task, path=f"/t/{task}", instruction="x", category=category))
    return EpisodeResult(key=key, status=status, reward=1.0), Job.episode(spec)


# task names where name order and key order differ ("task1/" sorts after "task1-b/")
PAGED_TASKS = ("task1", "task1-b", "task10", "task2", "task3")


@pytest.fixture(scope="module")
def paged_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Over three pages of discover and execute jobs; discover failures rare (1 in 25)."""
    path = tmp_path_factory.mktemp("paged-run")
    with Store.open(path, events=False) as store:
        for i in range(3 * PAGE_SIZE):
            task = PAGED_TASKS[i % len(PAGED_TASKS)]
            harness = ("terminus2", "rsrt", "statem")[i % 3]
            status: JobStatus = "failed" if i % 25 == 0 else "succeeded"
            result, job = _result(task, i, status, harness=harness, category=("even", "odd")[i % 2])
            store.put_result(result, job=job, wait=False)
            store.put_result(EpisodeResult(key=JobKey(stage="execute", task=task, harness=harness, attempt=i,
                                                      runbook="r0d0", execution=0),
                                           status="failed" if i % 2 else "succeeded"), wait=False)
        store.flush()
    return path


def _matches(store: Store, query: dict[str, str]) -> list[str]:
    domains = {t: spec.task.category for t, spec in store.task_specs(stage="discover").items()}
    return [
        r.key for r in store.rows()
        if all((domains.get(r.task) if name == "domain" else getattr(r, name)) == value
               for name, value in query.items())
    ]


@pytest.mark.parametrize("query", [
    {}, {"status": "failed"}, {"status": "succeeded"}, {"harness": "rsrt"}, {"domain": "even"},
    {"domain": "odd", "status": "failed"}, {"task": "task1"}, {"harness": "rsrt", "status": "failed"},
    {"stage": "execute", "harness": "statem", "status": "failed"}, {"domain": "even", "harness": "rsrt"},
], ids=lambda q: "&".join(f"{k}={v}" for k, v in q.items()) or "all")
async def test_keyset_pages_walk_every_matching_job_once_both_ways(paged_run: Path, query: dict[str, str]) -> None:
    with Store.open_readonly(paged_run) as store:
        expected = _matches(store, query)
    assert expected
    async with ViewerServer(paged_run) as server, aiohttp.ClientSession(timeout=TIMEOUT) as session:
        client = Client(server, session)

        async def walk(path: str, rel: str) -> list[list[str]]:
            pages = []
            while True:
                _, html = await client.get(path)
                pages.append([m["key"] for m in _ROW.finditer(html)])
                found = re.search(rf'<a rel="{rel}" href="([^"]+)"', html)
                if not found:
                    return pages
                path = found[1].replace("&amp;", "&")

        first = "/jobs" + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
        forward = await walk(first, "next")
        assert [key for page in forward for key in page] == expected
        assert all(len(page) == PAGE_SIZE for page in forward[:-1])
        if len(forward) > 1:
            # from the last page back to the first: the same pages, in reverse
            path = first + ("&" if query else "?") + f"before={forward[-1][0]}"
            assert list(reversed(await walk(path, "prev"))) == forward[:-1]


async def test_pages_work_while_a_run_writes(tmp_path: Path) -> None:
    """A writer Store holds the run (its lock, its writer thread) and commits result after
    result; the viewer, opened beside it, serves each commit on the next request."""
    with Store.open(tmp_path, config={"run": {"attempts": 1}}, events=False, batch_ms=5) as writer:
        first, job = _result("live", 0, "succeeded")
        writer.put_result(first, job=job)
        writer.flush()
        async with ViewerServer(tmp_path) as server, aiohttp.ClientSession(timeout=TIMEOUT) as session:
            client = Client(server, session)
            for attempt in range(1, 21):
                result, job = _result("live", attempt, "failed" if attempt % 2 else "succeeded")
                future = writer.put_result(result, job=job)
                assert future is not None
                # while that commit is in flight, pages keep answering
                status, _ = await client.get("/")
                assert status == 200
                await anyio.to_thread.run_sync(future.result, 60)  # committed: an event, not a sleep
                rows = await client.rows("/jobs?stage=discover&task=live")
                assert str(result.key) in {r["key"] for r in rows}
                assert len(rows) == attempt + 1
            status, html = await client.get(f"/job/{result.key}")
            assert status == 200 and "live" in html
        writer.flush()  # the writer never noticed the viewer
        assert writer.tally("status") == {("failed",): 10, ("succeeded",): 11}


async def test_a_slow_query_never_holds_up_the_event_loop(run_dir: Path) -> None:
    """Queries run in worker threads: while every store read is stuck (as on a slow disk),
    the server still answers what needs no query."""
    async with ViewerServer(run_dir) as server, aiohttp.ClientSession(timeout=TIMEOUT) as session:
        client = Client(server, session)
        store = server._store
        assert store is not None
        answered: dict[str, int] = {}

        async def fetch(path: str) -> None:
            answered[path] = (await client.get(path))[0]

        async with anyio.create_task_group() as tg:
            store._read_lock.acquire()  # every read now waits for it
            try:
                tg.start_soon(fetch, "/jobs")
                with anyio.fail_after(20):
                    assert (await client.get("/static/viewer.css"))[0] == 200
                assert "/jobs" not in answered  # still waiting on its query, off the loop
            finally:
                store._read_lock.release()
        assert answered == {"/jobs": 200}
