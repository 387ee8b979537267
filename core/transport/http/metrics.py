"""Prometheus exposition at /metrics, read from the pools at scrape time (no per-request cost).

Names follow vLLM's (`num_requests_running`, `kv_cache_usage_ratio`, `prompt_tokens_total`,
`time_per_output_token_seconds`, ...) under the `infertui_` prefix, with a `pool` label where
vLLM has `model_name`, so that its Grafana dashboards adapt by a rename; the process's own
CPU, memory and file descriptors come from prometheus_client's ProcessCollector.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    ProcessCollector,
    generate_latest,
)
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

TOP_IDENTITIES = 20  # identities named in /metrics; the rest are one `other` series
OTHER = "other"

HISTOGRAMS = {
    "ttft": "Time to first token",
    "request_latency": "Enqueue to last token",
    "request_queue_time": "Enqueue to a slot",
    "request_prefill_time": "A slot to the prompt decoded",
    "time_per_output_token": "Between output tokens, per request",
}


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
        yield from self._loop_time(snapshots)
        yield from self._vllm_named(snapshots)
        yield from self._identities()
        histograms = service.histograms()
        for name, doc in HISTOGRAMS.items():
            yield self._histogram(name, doc, [(pool, hists[name]) for pool, hists in histograms])

    def _identities(self) -> Iterator[Metric]:
        """Per identity: jobs and tokens since the start, jobs running and waiting now. The
        TOP_IDENTITIES with the most tokens are named; the rest are summed as `other`, so
        that a host open to many addresses keeps its series few."""
        users = sorted(self._service.shares.users(), key=lambda u: u.tokens_total, reverse=True)
        named, rest = users[:TOP_IDENTITIES], users[TOP_IDENTITIES:]
        forgotten = self._service.shares.forgotten
        other = (
            sum(u.jobs_total for u in rest) + forgotten.jobs_total,
            sum(u.tokens_total for u in rest) + forgotten.tokens_total,
            sum(u.running for u in rest),
            sum(u.queued for u in rest),
        )
        rows = [(u.identity, u.jobs_total, u.tokens_total, u.running, u.queued) for u in named]
        if any(other):
            rows.append((OTHER, *other))
        families: tuple[CounterMetricFamily | GaugeMetricFamily, ...] = (
            CounterMetricFamily("infertui_identity_jobs", "Jobs ended, per identity",
                                labels=["identity"]),
            CounterMetricFamily("infertui_identity_tokens", "Tokens in and out, per identity",
                                labels=["identity"]),
            GaugeMetricFamily("infertui_identity_running", "Jobs decoding, per identity",
                              labels=["identity"]),
            GaugeMetricFamily("infertui_identity_waiting", "Jobs queued, per identity",
                              labels=["identity"]),
        )  # fmt: skip
        for identity, *values in rows:
            for family, value in zip(families, values, strict=True):
                family.add_metric([identity], value)
        yield from families

    @staticmethod
    def _loop_time(snapshots: list[MetricsSnapshot]) -> Iterator[Metric]:
        """Local engines' time decoding and time with work: the rate of the one over the
        other is the share of the device's time that decoding got (the rest went to the
        host's own work between decodes)."""
        decode = CounterMetricFamily(
            "infertui_engine_decode_seconds",
            "Seconds from starting each decode to its outputs being ready",
            labels=["pool"],
        )
        busy = CounterMetricFamily(
            "infertui_engine_busy_seconds",
            "Seconds the batch loop had work (decodes and the host's work between them)",
            labels=["pool"],
        )
        guessed = CounterMetricFamily(
            "infertui_engine_guessed_tokens",
            "Speculative decoding: tokens guessed ahead and checked by the model",
            labels=["pool"],
        )
        kept = CounterMetricFamily(
            "infertui_engine_kept_guesses",
            "Speculative decoding: guessed tokens the model picked (kept)",
            labels=["pool"],
        )
        for snap in snapshots:
            if snap.decode_seconds_total is not None and snap.busy_seconds_total is not None:
                decode.add_metric([snap.pool_id], snap.decode_seconds_total)
                busy.add_metric([snap.pool_id], snap.busy_seconds_total)
                guessed.add_metric([snap.pool_id], snap.guessed_tokens_total)
                kept.add_metric([snap.pool_id], snap.kept_guesses_total)
        yield from (decode, busy, guessed, kept)

    def _vllm_named(self, snapshots: list[MetricsSnapshot]) -> Iterator[Metric]:
        running = GaugeMetricFamily(
            "infertui_num_requests_running", "Requests decoding in a slot", labels=["pool"]
        )
        waiting = GaugeMetricFamily(
            "infertui_num_requests_waiting", "Requests waiting in the queue", labels=["pool"]
        )
        kv = GaugeMetricFamily(
            "infertui_kv_cache_usage_ratio", "KV cells in use over all cells (0-1)", labels=["pool"]
        )
        prompt = CounterMetricFamily(
            "infertui_prompt_tokens", "Prompt tokens of finished requests", labels=["pool"]
        )
        generation = CounterMetricFamily(
            "infertui_generation_tokens", "Tokens generated by finished requests", labels=["pool"]
        )
        cells = self._kv_cells()
        for snap in snapshots:
            pool = snap.pool_id
            running.add_metric([pool], snap.slots_busy)
            waiting.add_metric([pool], snap.queue_depth)
            used, total = cells.get(pool, (0, 0))
            kv.add_metric([pool], used / total if total else 0.0)
            prompt.add_metric([pool], snap.tokens_in_total)
            generation.add_metric([pool], snap.tokens_out_total)
        yield from (running, waiting, kv, prompt, generation)

    def _kv_cells(self) -> dict[str, tuple[int, int]]:
        """(cells in use, cells) per pool: the busy slots' tokens, over slots x context."""
        n_ctx = {s.engine_id: s.parameters.n_ctx for s in self._service.engines()}
        out = {}
        for queue in self._service.queues():
            used = sum(s.tokens_in + s.tokens_out for s in queue.slots if s.phase != "idle")
            out[queue.pool_id] = (used, n_ctx.get(queue.pool_id, 0) * len(queue.slots))
        return out

    @staticmethod
    def _histogram(name: str, doc: str, series: list[tuple[str, Histogram]]) -> Metric:
        family = HistogramMetricFamily(f"infertui_{name}_seconds", doc, labels=["pool"])
        for pool_id, hist in series:
            family.add_metric([pool_id], hist.cumulative(), sum_value=hist.sum_ms / 1000)
        return family


def collector_registry(service: HostService) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HostCollector(service))
    ProcessCollector(registry=registry)  # process_cpu_seconds_total, _resident_memory_bytes, ...
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
