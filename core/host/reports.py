"""What the faces show of a pool, built once: spec 004's engine status, spec 002's pool
health and capabilities, and the host dashboard's live jobs. Before an engine has loaded
(or after it failed) the figures come from its spec."""

from __future__ import annotations

from ..engine.chat_format import ChatFormat
from ..protocol.common import SamplingParams
from ..protocol.orchestrator import PoolCapabilities, PoolHealth
from ..protocol.snapshots import (
    EngineState,
    EngineStatus,
    LiveJob,
    Performance,
    PoolState,
)
from ..protocol.tokens import GenerationSettings, Props, default_sampling
from ..scheduler import Pool

_ENGINE_STATE = {
    PoolState.LOADING: EngineState.LOADING,
    PoolState.READY: EngineState.LOADED,
    PoolState.DRAINING: EngineState.LOADED,
    PoolState.DRAINED: EngineState.LOADED,
    PoolState.FAILED: EngineState.FAILED,
}


def engine_status(pool: Pool) -> EngineStatus:
    """Spec 004's engine status for one pool, with what the dashboards add."""
    engine = pool.engine
    spec = pool.spec
    return EngineStatus(
        engine_id=pool.id,
        status=_ENGINE_STATE[pool.state],
        model_path=spec.model_path,
        parameters=engine.describe().parameters if engine else spec.planned,
        memory_usage=engine.usage().memory if engine else None,
        performance=Performance(
            last_inference_tps=round(pool.metrics.last_job_tps, 2),
            total_requests=pool.total_requests,
        ),
        pool_state=pool.state,
        chat_format=_with_tools(engine.chat_format) if engine else None,
        model_description=engine.describe().description if engine else None,
        gpu_offload=pool.gpu_offload,
        error=pool.error,
    )


def pool_health(pool: Pool) -> PoolHealth:
    """Spec 002's liveness and readiness (OC-CTRL-2001)."""
    return PoolHealth(
        pool_id=pool.id,
        live=pool.state is not PoolState.FAILED,
        ready=pool.state is PoolState.READY,
        draining=pool.state is PoolState.DRAINING,
        state=pool.state,
        engine=pool.engine.describe().version if pool.engine else pool.spec.kind,
        model_path=(pool.model_names or ("",))[0],  # open without a key: never where it lives
        metrics=pool.metrics_snapshot(),
        last_error=pool.error,
    )


def llama_props(pool: Pool, version: str) -> Props:
    """llama-server's `/props` for one pool. An upstream's context, where its server does not
    say it, is 0: not known."""
    engine = pool.engine
    chat = engine.chat_format if engine else None
    return Props(
        default_generation_settings=GenerationSettings(
            n_ctx=engine.describe().parameters.n_ctx if engine else pool.spec.n_ctx,
            params=default_sampling(
                SamplingParams().with_defaults(engine.sampling_defaults) if engine else None
            ),
        ),
        total_slots=pool.n_slots,
        model_alias=pool.id,
        model_path=pool.spec.model_path,
        chat_template=(chat.source or "") if chat else "",
        build_info=f"infertui ({version})",
    )


def pool_capabilities(pool: Pool, version: str) -> PoolCapabilities:
    """Spec 002's capabilities of one pool; `version` is the engine library's."""
    return PoolCapabilities(
        pool_id=pool.id,
        engine=pool.spec.kind,
        engine_version=pool.engine.describe().version if pool.engine else version,
        model=pool.spec.model_path,
        ctx_max=pool.n_ctx,
        max_tokens_out=pool.n_ctx - 1,
        slots=pool.n_slots,
        supported_workloads=["chat", "completion"],
        rate_limits={"queue_capacity": pool.queue_capacity},
        features={
            "streaming": True,
            "cancel": True,
            "pin_pool": True,
            "output_mode_hint": True,
            "gpu_offload": pool.gpu_offload,
            "artifacts": False,
            "budgets": False,
        },
    )


def live_jobs(pool: Pool) -> list[LiveJob]:
    """The pool's jobs in flight, running ones with their speed, and their latest text."""
    rates = {s.job_id: s.tps for s in pool.slots() if s.job_id}
    return [
        LiveJob(
            job_id=job.id,
            engine=pool.id,
            client=job.identity,
            state="running" if job.id in rates else "queued",
            tokens_out=job.tokens_published,
            tokens_per_s=rates.get(job.id, 0.0),
            text_tail=job.text_tail,
        )
        for job in pool.jobs()
    ]


def _with_tools(fmt: ChatFormat) -> str:
    """The prompt format, and the tool-call format the model is told."""
    return f"{fmt.description}; tools: {fmt.tools}"
