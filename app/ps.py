"""`infertui ps TARGET`: the models a host has in memory, how much each takes and where, and
until when it stays, as `ollama ps` shows them."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from infertui.core.client import explain
from infertui.core.config import Settings
from infertui.core.protocol import EngineStatus, InferError
from infertui.core.protocol.snapshots import EngineState

from .ask import connect_to
from .models import write_rows


async def ps(target: str, settings: Settings, out: TextIO = sys.stdout) -> int:
    try:
        client = await connect_to(target, settings)
        try:
            engines = await client.engines()
        finally:
            await client.close()
    except InferError as err:  # (TARGET may have been left out: say which host was asked)
        sys.stderr.write(f"infertui: {target}: {explain(err)}\n")
        return 1
    rows = [("NAME", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL")]
    rows += [_row(e) for e in engines if e.status is not EngineState.FAILED]
    write_rows(rows, out)
    return 0


def _row(engine: EngineStatus) -> tuple[str, str, str, str, str]:
    memory = engine.memory_usage
    size = f"{(memory.model_size_mb + memory.context_size_mb) / 1024:.1f} GB" if memory else "-"
    if engine.status is EngineState.LOADING:
        where = "loading"
    elif engine.model_path.startswith(("http://", "https://")):
        where = "upstream"
    else:
        where = "GPU" if engine.gpu_offload else "CPU"
    return engine.engine_id, size, where, str(engine.parameters.n_ctx), _until(engine)


def _until(engine: EngineStatus) -> str:
    if not engine.on_demand:
        return "stays (started with the host)"
    if engine.expires_at is None:
        return "forever"
    left = engine.expires_at - time.time()
    if left < 60:
        return f"{max(left, 0):.0f} seconds from now"
    return f"{left / 60:.0f} minutes from now"
