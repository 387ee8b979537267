"""A scripted host for snapshots: fixed info, snapshots and replies, so pictures never drift."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

from infertui.core.client import ChatReply, ChatStats, Client, ConnectionState, HostInfo
from infertui.core.protocol.common import ChatMessage
from infertui.core.protocol.host_api import AddEngineRequest
from infertui.core.protocol.shares import UsageDay, UsageReport, UserLimits, UserShare
from infertui.core.protocol.snapshots import (
    EngineParameters,
    EngineState,
    EngineStatus,
    LibraryEntry,
    LiveJob,
    MemoryUsage,
    MetricsSnapshot,
    Percentiles,
    Performance,
    PoolState,
    QueueEntry,
    QueueSnapshot,
    SlotSnapshot,
)
from infertui.tui.app import ClientApp, HostApp
from infertui.tui.metrics_history import MetricsHistory, host_totals

REPLY = [
    "Here are three colours:\n\n",
    "1. **Red**, like a ripe tomato\n",
    "2. **Green**, like fresh grass\n",
    "3. **Blue**, like a clear sky\n\n",
    "```python\ncolours = ['red', 'green', 'blue']\n```\n",
]
SERVER_ID = "yry" * 17 + "a"


class ScriptedReply(ChatReply):
    def __init__(self) -> None:
        self.request_id = "r1"

    async def __aiter__(self) -> AsyncIterator[str]:
        for piece in REPLY:
            await asyncio.sleep(0)
            yield piece
        self.stats = ChatStats("stop", 18, 42, 38.0, 51.2)

    def abort(self) -> None:
        pass


class ScriptedClient(Client):
    def __init__(self, *, admin: bool = True) -> None:
        self.info = HostInfo(
            host_name="gpu-box",
            model="gemma-3-270m",
            models=("gemma-3-270m", "qwen-7b"),
            status="ready",
            address=SERVER_ID,
            transport="p2p",
            admin=admin,
        )

    def chat(
        self, messages: Sequence[ChatMessage], *, model: str | None = None, **params: Any
    ) -> ChatReply:
        return ScriptedReply()

    async def engines(self) -> list[EngineStatus]:
        return [
            _engine("gemma-3-270m", "/models/gemma-3-270m-q4_k_m.gguf", 4096, 4, 53.9, 12),
            _engine("qwen-7b", "/models/qwen2.5-7b-q4_k_m.gguf", 8192, 8, 31.4, 3, gpu=True),
        ]

    async def queue(self) -> list[QueueSnapshot]:
        slots = (
            SlotSnapshot(slot=0, job_id="job-7f3a", client_id="p2p:8nd3kq1wzt5e",
                         identity="alice", phase="decode", tokens_in=48, tokens_out=130,
                         tps=24.8),
            SlotSnapshot(slot=1, job_id="job-91c2", client_id="http:127.0.0.1",
                         identity="http:127.0.0.1", phase="decode", tokens_in=312,
                         tokens_out=12, tps=25.1),
            SlotSnapshot(slot=2),
            SlotSnapshot(slot=3),
        )  # fmt: skip
        waiting = (
            QueueEntry(job_id="job-a001", client_id="p2p:c4xq9hdy1m0p", identity="bob",
                       position=0, predicted_start_ms=1400, tokens_in=64, waited_ms=800.0),
            QueueEntry(job_id="job-a002", client_id="http:10.0.0.7", identity="nightly",
                       priority="batch", position=1, predicted_start_ms=2900, tokens_in=900,
                       waited_ms=5200.0),
        )  # fmt: skip
        return [
            QueueSnapshot(pool_id="gemma-3-270m", capacity=64, depth=2, waiting=waiting,
                          slots=slots),
        ]  # fmt: skip

    async def metrics(self) -> list[MetricsSnapshot]:
        return self.metrics_now()

    async def usage(self) -> UsageReport:
        limited = UserLimits(weight=2, running=2, tokens_per_day=500_000)
        users = (
            UserShare(
                identity="alice",
                running=1,
                queued=0,
                requests_last_minute=4,
                tokens_last_minute=1310,
                tokens_today=48_200,
                limits=limited,
            ),
            UserShare(
                identity="bob",
                running=0,
                queued=1,
                requests_last_minute=1,
                tokens_last_minute=0,
                tokens_today=2_950,
                limits=UserLimits(),
            ),
            UserShare(
                identity="nightly",
                running=0,
                queued=1,
                requests_last_minute=0,
                tokens_last_minute=0,
                tokens_today=310_400,
                limits=UserLimits(queued=200, tokens_per_minute=40_000),
            ),
        )
        days = (
            UsageDay(
                day="2026-11-27",
                identity="alice",
                jobs=212,
                failures=1,
                tokens_in=31_000,
                tokens_out=90_400,
                queue_ms=8_100.0,
                decode_ms=620_000.0,
            ),
            UsageDay(
                day="2026-11-28",
                identity="alice",
                jobs=83,
                failures=0,
                tokens_in=9_900,
                tokens_out=38_300,
                queue_ms=2_400.0,
                decode_ms=210_000.0,
            ),
            UsageDay(
                day="2026-11-28",
                identity="nightly",
                jobs=1_204,
                failures=3,
                tokens_in=96_000,
                tokens_out=214_400,
                queue_ms=3.1e6,
                decode_ms=1.9e6,
            ),
        )
        return UsageReport(days=days, users=users)  # fmt: skip

    @staticmethod
    def metrics_now() -> list[MetricsSnapshot]:
        return [
            MetricsSnapshot(
                pool_id="gemma-3-270m", timestamp=0.0, queue_depth=1, queue_capacity=64,
                slots_busy=2, slots_total=4, accepted=120, rejected=2, completed=112,
                cancelled=5, failed=0, tokens_in_total=9100, tokens_out_total=15230,
                ttft_ms=Percentiles(p50=44.0, p95=120.0, p99=180.0),
                latency_ms=Percentiles(p50=1900.0, p95=4100.0, p99=5200.0),
                decode_tps_recent=49.9, decode_tps_lifetime=47.2, prefill_tps_recent=310.0,
                decode_seconds_total=412.5, busy_seconds_total=431.0,
            )
        ]  # fmt: skip

    async def add_engine(self, request: AddEngineRequest) -> None:
        pass

    async def remove_engine(self, engine_id: str) -> None:
        pass

    async def reload_engine(self, engine_id: str, model_path: str | None = None) -> None:
        pass

    async def drain_engine(self, engine_id: str, deadline_ms: int = 5000) -> None:
        pass

    async def resume_engine(self, engine_id: str) -> None:
        pass

    async def library(self) -> list[LibraryEntry]:
        return [
            LibraryEntry(name="gemma-3-270m", size=253_000_000, architecture="gemma3",
                         parameters="268M", quantization="Q4_K_M", context_length=32768,
                         source="folder", loaded=True),
            LibraryEntry(name="llama3.2:1b", size=1_321_000_000, architecture="llama",
                         parameters="1.24B", quantization="Q8_0", context_length=131072,
                         source="ollama"),
        ]  # fmt: skip

    async def pull_model(self, name: str) -> AsyncIterator[dict[str, Any]]:
        yield {"status": "pulling manifest"}
        yield {"status": "success"}

    async def delete_model(self, name: str) -> None:
        pass

    async def copy_model(self, source: str, destination: str) -> None:
        pass

    async def load_model(self, name: str) -> None:
        pass

    async def unload_model(self, name: str) -> None:
        pass

    async def wait_closed(self) -> None:
        await asyncio.Event().wait()

    async def close(self) -> None:
        pass


class ScriptedLocal(ScriptedClient):
    """The host dashboard's view of its own jobs."""

    def addresses(self) -> dict[str, str]:
        return {"p2p": SERVER_ID, "http": "http://127.0.0.1:8080"}

    def transport_status(self) -> dict[str, str]:
        return {"p2p": "announced · 24 DHT nodes", "http": "listening"}

    def live_jobs(self) -> list[LiveJob]:
        return [
            _live("job-7f3a", "p2p:8nd3kq1wzt5e", "running", 130, 24.8,
                  "the sea was calm that morning, and the boats"),
            _live("job-91c2", "http:127.0.0.1", "running", 12, 25.1,
                  "SELECT name FROM users WHERE"),
            _live("job-a001", "p2p:c4xq9hdy1m0p", "queued", 0, 0.0, ""),
        ]  # fmt: skip


def _live(
    job_id: str, client: str, state: Literal["queued", "running"], tokens: int, tps: float,
    tail: str,
) -> LiveJob:  # fmt: skip
    return LiveJob(
        job_id=job_id, engine="gemma-3-270m", client=client, state=state, tokens_out=tokens,
        tokens_per_s=tps, text_tail=tail,
    )  # fmt: skip


def _engine(
    engine_id: str,
    path: str,
    ctx: int,
    slots: int,
    tps: float,
    requests: int,
    *,
    gpu: bool = False,
) -> EngineStatus:
    card = {"device": "CUDA0 NVIDIA H100 80GB HBM3", "device_used_mb": 21_504.0,
            "device_total_mb": 81_559.0} if gpu else {}  # fmt: skip
    return EngineStatus(
        engine_id=engine_id,
        status=EngineState.LOADED,
        model_path=path,
        parameters=EngineParameters(n_ctx=ctx, n_gpu_layers=-1 if gpu else 0, n_parallel=slots),
        memory_usage=MemoryUsage(model_size_mb=241.0, context_size_mb=ctx / 16, **card),
        performance=Performance(last_inference_tps=tps, total_requests=requests),
        pool_state=PoolState.READY,
    )


class ScriptedClientApp(ClientApp):
    """The real ClientApp, connected to the scripted host instead of a network."""

    def __init__(self, settings: Any, *, admin: bool = True) -> None:
        super().__init__(SERVER_ID, settings)
        self.scripted = ScriptedClient(admin=admin)

    def keep_connected(self) -> None:  # type: ignore[override]
        self.set_connection(ConnectionState("connected", "Connected", self.scripted))

    def collect_metrics(self, client: Client) -> None:  # type: ignore[override]
        fixed_history(self)


def fixed_history(app: Any) -> None:
    """A fixed minute of history (a wave around the scripted figures), with no timer."""
    pools = ScriptedClient.metrics_now()
    history: MetricsHistory = app.metrics_history
    history.latest = pools
    history.decoding = {pools[0].pool_id: 93.0}
    for key, value in host_totals(pools, history.decoding).items():
        history.series[key].clear()
        history.series[key].extend(value * (0.6 + 0.4 * math.sin(i / 5)) for i in range(40))


class ScriptedHostApp(HostApp):
    def __init__(self, settings: Any) -> None:
        super().__init__(settings, ScriptedLocal(), start=False)  # type: ignore[arg-type]

    def collect_metrics(self, client: Client) -> None:  # type: ignore[override]
        fixed_history(self)
