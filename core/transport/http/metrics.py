"""Prometheus exposition at /metrics, read from the pools at scrape time (no per-request cost)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client import registry as prometheus_registry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from ...host import HostService
from ...protocol.snapshots import MetricsSnapshot
from ...scheduler.metrics import Histogram
from .routing import StrictJSONRoute

router = APIRouter(tags=["Metrics"], route_class=StrictJSONRoute)


class HostCollector(prometheus_registry.Collector):
    """Every pool's counters, gauges and latency histograms, labelled by pool."""

    def __init__(self, service: HostService) -> None:
        self._service = service

    def collect(self) -> Iterator[Metric]:
        service = self._service
        gauges: dict[str, tuple[str, Callable[[MetricsSnapshot], float]]] = {
            "queue_depth": ("Jobs waiting for a slot", lambda s: s.queue_depth),
            "queue_capacity": ("Jobs that may wait before QUEUE_FULL", lambda s: s.queue_capacity),
            "slots_busy": ("Slots decoding a job", lambda s: s.slots_busy),
            "slots_total": ("Slots of the engine", lambda s: s.slots_total),
        }
        snapshots = service.metrics()
        for name, (doc, read) in gauges.items():
            gauge = GaugeMetricFamily(f"infertui_{name}", doc, labels=["pool"])
            for snap in snapshots:
                gauge.add_metric([snap.pool_id], read(snap))
            yield gauge
        requests = CounterMetricFamily(
            "infertui_requests", "Jobs by outcome (rejected: refused at admission)",
            labels=["pool", "outcome"],
        )  # fmt: skip
        tokens = CounterMetricFamily("infertui_tokens", "Tokens processed", labels=["pool", "kind"])
        errors = CounterMetricFamily("infertui_errors", "Errors by class", labels=["pool", "class"])
        rates = GaugeMetricFamily(
            "infertui_tokens_per_second", "Decode and prefill speed",
            labels=["pool", "phase", "window"],
        )  # fmt: skip
        for snap in snapshots:
            pool = snap.pool_id
            for outcome in ("accepted", "rejected", "completed", "cancelled", "failed"):
                requests.add_metric([pool, outcome], getattr(snap, outcome))
            tokens.add_metric([pool, "prompt"], snap.tokens_in_total)
            tokens.add_metric([pool, "generated"], snap.tokens_out_total)
            for kind, count in snap.errors_by_class.items():
                errors.add_metric([pool, kind], count)
            rates.add_metric([pool, "decode", "recent"], snap.decode_tps_recent)
            rates.add_metric([pool, "decode", "lifetime"], snap.decode_tps_lifetime)
            rates.add_metric([pool, "prefill", "recent"], snap.prefill_tps_recent)
            rates.add_metric([pool, "prefill", "lifetime"], snap.prefill_tps_lifetime)
        yield from (requests, tokens, errors, rates)
        histograms = service.histograms()
        yield self._histogram("ttft", "Time to first token", [(p, t) for p, t, _ in histograms])
        yield self._histogram(
            "request_latency", "Enqueue to last token", [(p, lat) for p, _, lat in histograms]
        )

    @staticmethod
    def _histogram(name: str, doc: str, series: list[tuple[str, Histogram]]) -> Metric:
        family = HistogramMetricFamily(f"infertui_{name}_seconds", doc, labels=["pool"])
        for pool_id, hist in series:
            family.add_metric([pool_id], hist.cumulative(), sum_value=hist.sum_ms / 1000)
        return family


def collector_registry(service: HostService) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HostCollector(service))
    return registry


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
    summary="Prometheus text: queue depth, rejects, TTFT/latency histograms, tokens/s, errors",
)
async def metrics(request: Request) -> Response:
    body = generate_latest(request.app.state.metrics_registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
