"""Optional Prometheus endpoint (``engine.metrics_port``), on loopback only.

Each engine gets its own registry (no global state); the collector reads the engine's
snapshot at scrape time, on the exporter's thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..errors import ConfigError
from .progress import Snapshot

__all__ = ["serve_metrics"]


def serve_metrics(snapshot: Callable[[], Snapshot], port: int) -> Callable[[], None]:
    """Serve ``/metrics`` on ``127.0.0.1:port``; returns a blocking ``stop()``."""
    try:
        import prometheus_client
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        from prometheus_client.registry import Collector
    except ImportError as exc:
        raise ConfigError(
            "engine.metrics_port is set but prometheus-client is not installed: "
            "pip install prometheus-client, or set engine.metrics_port = 0"
        ) from exc

    class _EngineCollector(Collector):
        def collect(self) -> Iterator[Any]:
            snap = snapshot()
            jobs = CounterMetricFamily(
                "rsr_jobs_finished", "Jobs finished, by stage and status", labels=["stage", "status"]
            )
            running = GaugeMetricFamily("rsr_jobs_running", "Jobs running", labels=["stage"])
            total = GaugeMetricFamily("rsr_jobs_total", "Jobs submitted", labels=["stage"])
            retries = CounterMetricFamily("rsr_job_retries", "Infra retries", labels=["stage"])
            for view in snap.stages:
                for status in ("succeeded", "failed", "infra_error", "cancelled"):
                    jobs.add_metric([view.stage, status], getattr(view, status))
                running.add_metric([view.stage], view.running)
                total.add_metric([view.stage], view.total)
                retries.add_metric([view.stage], view.retries)
            yield from (jobs, running, total, retries)
            yield GaugeMetricFamily("rsr_tokens_per_second", "Generated tokens/s", value=snap.tokens_per_s)
            yield GaugeMetricFamily("rsr_cached_share", "Prompt tokens from cache", value=snap.cached_share)
            yield GaugeMetricFamily(
                "rsr_loop_lag_p99_seconds", "Event-loop lag p99", value=snap.loop_lag_p99_ms / 1000
            )
            for name, value in snap.gauges.items():
                metric = "rsr_" + "".join(c if c.isalnum() else "_" for c in name)
                yield GaugeMetricFamily(metric, name, value=value)

    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(_EngineCollector())
    try:
        server, thread = prometheus_client.start_http_server(port, addr="127.0.0.1", registry=registry)
    except OSError as exc:
        raise ConfigError(f"engine.metrics_port = {port}: cannot listen on 127.0.0.1:{port}: {exc}") from exc

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop
