"""Spec 004: the host's own bodies beside the OpenAI ones: engine management (`/engines`, the
P2P admin calls and the TUI's engine manager send the same `AddEngineRequest`) and health."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .common import MAX_PATH
from .snapshots import EngineParameters, EngineState

# ---- engine management ---------------------------------------------------------------------


class AddEngineRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engine_id: str = Field(min_length=1, max_length=128, pattern=r"^[^/\s]+$")
    model_path: str = Field(
        min_length=1,
        max_length=MAX_PATH,
        description="a GGUF file, or the http(s) URL of an OpenAI-compatible server's API root "
        "(e.g. http://gpu1:8000/v1), served as an upstream engine",
    )
    n_ctx: int = Field(4096, ge=128)
    n_gpu_layers: int = Field(100, ge=0, description="more layers than the model has: all")
    main_gpu_id: int | None = Field(
        None, ge=0, description="the one GPU that holds the model; absent: spread over all"
    )
    # an upstream's own settings; the host's [host.upstream] defaults where unset
    upstream_model: str | None = Field(None, max_length=256, description="the model to ask for")
    api_key: str | None = Field(None, max_length=4096, description="sent as a Bearer token")
    concurrency: int | None = Field(None, ge=1, le=4096, description="its jobs at once")

    @property
    def is_upstream(self) -> bool:
        return self.model_path.startswith(("http://", "https://"))


class EngineSummary(BaseModel):
    engine_id: str
    status: EngineState
    model_path: str | None = None


class AddEngineResponse(BaseModel):
    engine_id: str
    status: EngineState
    model_path: str
    parameters: EngineParameters


class EngineList(BaseModel):
    engines: list[EngineSummary]


class RemoveEngineResponse(BaseModel):
    engine_id: str
    status: Literal["removed"] = "removed"


# ---- health --------------------------------------------------------------------------------


class EngineCounts(BaseModel):
    loaded: int
    unloaded: int
    total: int


class SystemUsage(BaseModel):
    uptime_seconds: float
    memory_usage_mb: float
    cpu_usage_percent: float


class HealthResponse(BaseModel):
    status: Literal["healthy", "degraded", "unhealthy"]
    timestamp: int
    version: str
    engines: EngineCounts
    system: SystemUsage
    engines_summary: list[EngineSummary]
