"""Jobs straight onto a pool, for the scheduler's and the engine's own tests: prepared as the
host prepares every job (core/host/prepare.py), so a test never builds one the host could not."""

from __future__ import annotations

from typing import Any

from infertui.core.host import Ask
from infertui.core.host.prepare import prepare
from infertui.core.scheduler import Job, Pool


def submit(pool: Pool, **ask: Any) -> Job:
    """A job on `pool`: `ask` holds Ask's fields (prompt or messages, params, client_id...)."""
    return pool.submit(prepare(pool.ready_engine(), Ask(**ask)))
