"""Waiting for a compose service's ``depends_on`` condition, on Docker's event stream.

A compose episode starts its services in order (:mod:`rsr_async.sandbox.pool`); before
each, :func:`wait_for_service` waits until every service it depends on is started,
healthy (``service_healthy``) or exited 0 (``service_completed_successfully``). The
stream is subscribed before the container is inspected, so no change between the two is
missed; a service that dies, turns unhealthy or exits non-zero fails the wait with its
last output.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import anyio

from ..errors import ContainerError, SandboxError
from ..schema import Task
from .compose import ComposeService
from .docker_errors import docker_errors
from .hosts import DockerHost

__all__ = ["wait_for_service"]


async def wait_for_service(
    host: DockerHost,
    task: Task,
    key: str,
    service: ComposeService,
    container: Any,
    *,
    since: float,
    condition: str,
    api_timeout_s: float,
) -> None:
    """Wait, on Docker's events, until ``service`` meets a ``depends_on`` condition.

    ``service_healthy`` waits as long as Docker may take to decide (the healthcheck's
    start period and retries); ``service_completed_successfully`` as long as a build
    may take (``build_timeout_sec``: it is environment set-up). A service that dies,
    turns unhealthy or exits non-zero is a :class:`ContainerError` with its last output.
    """
    if condition == "service_started":
        return  # started in order before its dependants
    where = f"task {task.name!r} (episode {key}) service {service.name!r}"
    healthy = condition == "service_healthy"
    if healthy:
        assert service.healthcheck is not None  # the parser insists
        deadline = service.healthcheck.deadline_s() + api_timeout_s
    else:
        deadline = task.build_timeout_s
    params = {
        "since": f"{since:.3f}",
        "filters": json.dumps({"container": [container.id], "type": ["container"]}),
    }
    verdict: str | None = None
    try:
        with anyio.fail_after(deadline), docker_errors(f"{where}: events", url=host.url):
            async with host.docker._query("events", params=params, timeout=None) as response:
                # Subscribed first, then asked: a change between the two is in the stream.
                verdict = _judge_state(await container.show(), healthy=healthy)
                if verdict is None:
                    async for line in response.content:
                        verdict = _judge_event(line, healthy=healthy)
                        if verdict is not None:
                            break
    except TimeoutError as exc:
        raise ContainerError(
            f"{where}: not {'healthy' if healthy else 'completed'} after {deadline:.0f} s"
        ) from exc
    if verdict != "ok":
        detail = await _last_words(container, api_timeout_s=api_timeout_s)
        raise ContainerError(
            f"{where}: {verdict or 'event stream ended'} while "
            f"{'waiting for it to be healthy' if healthy else 'waiting for it to complete'}"
            f"; last output: {detail}"
        )


async def _last_words(container: Any, *, api_timeout_s: float) -> str:
    """The end of a failed service's log and health log, for its error message."""
    parts: list[str] = []
    with contextlib.suppress(SandboxError), docker_errors("last words"), anyio.fail_after(
        api_timeout_s
    ):  # the words are for the message: none when Docker cannot give them
        info = await container.show()
        checks = ((info.get("State") or {}).get("Health") or {}).get("Log") or []
        parts.extend(f"healthcheck: {str(c.get('Output', '')).strip()}" for c in checks[-1:])
        lines = await container.log(stdout=True, stderr=True, tail=20)
        parts.append("".join(lines).strip())
    text = " | ".join(p for p in parts if p).replace("\n", " / ")
    return text[-800:] or "(none)"


def _judge_state(info: dict[str, Any], *, healthy: bool) -> str | None:
    """``ok``, why the wait failed, or None (not decided yet), from ``inspect``."""
    state = info.get("State") or {}
    health = str((state.get("Health") or {}).get("Status", ""))
    if healthy:
        if health == "healthy":
            return "ok"
        if health == "unhealthy":
            return "unhealthy"
    elif state.get("Status") == "exited":
        code = state.get("ExitCode")
        return "ok" if code == 0 else f"exited with code {code}"
    if state.get("Status") in ("exited", "dead"):
        return f"exited with code {state.get('ExitCode')}"
    return None


def _judge_event(line: bytes, *, healthy: bool) -> str | None:
    """The same, from one line of Docker's event stream."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    action = str(event.get("Action") or event.get("status") or "")
    if healthy and action == "health_status: healthy":
        return "ok"
    if healthy and action == "health_status: unhealthy":
        return "unhealthy"
    if action == "die":
        code = ((event.get("Actor") or {}).get("Attributes") or {}).get("exitCode")
        if not healthy and code == "0":
            return "ok"
        return f"exited with code {code}"
    return None
