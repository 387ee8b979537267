"""Additive P2P messages for remote dashboards and engine management.

Snapshots (any peer): `engines`, `metrics`, `queue`, `library`, and `metrics_subscribe
{interval_ms}` (pushes `metrics` under the subscription's request_id until `unsubscribe`).
Admin operations (only peers in the host's --admin list): `engine_add`, `engine_remove`,
`engine_reload`, `engine_drain`, `engine_resume`, and for the library `model_delete {name}`
and `model_copy {name, destination}`;
each answers with its own type, or an `error`. `model_pull {name, insecure}` (admin too)
answers with one `model_pull` per progress event (as Ollama's /api/pull lines), the last
`{"status": "success"}`, or an `error`. Any peer may `model_load {name, keep_alive}` and
`model_unload {name}`, as any request may name a model and Ollama's `keep_alive: 0` unloads
it: a model unloads only once idle, and the host's own engines never do.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ...host import HostService
from ...protocol.common import MAX_PATH
from ...protocol.host_api import AddEngineRequest
from ...protocol.keep_alive import KeepAlive
from ...protocol.snapshots import SnapshotKind

SNAPSHOT_TYPES = tuple(kind.value for kind in SnapshotKind)
ADMIN_TYPES = ("engine_add", "engine_remove", "engine_reload", "engine_drain", "engine_resume",
               "model_delete", "model_copy", "model_load", "model_unload")  # fmt: skip
OPEN_TYPES = ("model_load", "model_unload")  # of ADMIN_TYPES, those any peer may send
PULL_TYPE = "model_pull"  # admin too, answered by a stream of progress events
MIN_INTERVAL_MS = 200


class EngineTarget(BaseModel):
    engine_id: str = Field(min_length=1)
    model_path: str | None = Field(None, max_length=MAX_PATH)
    deadline_ms: int = Field(5000, ge=0, le=3_600_000)


class ModelTarget(BaseModel):
    """A library model, by any form of its name."""

    name: str = Field(min_length=1, max_length=MAX_PATH)
    destination: str = Field("", max_length=MAX_PATH)  # model_copy's new name
    keep_alive: KeepAlive = None
    insecure: bool = False


class Subscription(BaseModel):
    interval_ms: int = Field(1000, ge=MIN_INTERVAL_MS, le=60_000)


async def run_admin(service: HostService, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Carry out one operation of ADMIN_TYPES; InferErrors (and ValidationErrors) go back to
    the peer."""
    if kind == "engine_add":
        status = await service.add_engine(AddEngineRequest.model_validate(payload))
        return {"engine": status.model_dump(mode="json")}
    if kind.startswith("model_"):
        model = ModelTarget.model_validate(payload)
        if kind == "model_delete":
            return {"name": (await service.delete_model(model.name)).name, "status": "deleted"}
        if kind == "model_copy":
            copied = await service.copy_model(model.name, model.destination)
            return {"name": copied.name, "status": "copied"}
        keep = 0 if kind == "model_unload" else model.keep_alive
        unloaded = await service.load_model(model.name, keep)
        return {"name": model.name, "status": "unloaded" if unloaded else "loaded"}
    target = EngineTarget.model_validate(payload)
    engine_id = target.engine_id
    if kind == "engine_remove":
        await service.remove_engine(engine_id)
        return {"engine_id": engine_id, "status": "removed"}
    if kind == "engine_drain":
        cancelled = await service.drain_engine(engine_id, target.deadline_ms)
        return {"engine_id": engine_id, "cancelled": cancelled}
    if kind == "engine_reload":
        status = await service.reload_engine(engine_id, target.model_path)
    else:
        status = service.resume_engine(engine_id)
    return {"engine": status.model_dump(mode="json")}
