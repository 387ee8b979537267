"""EngineRegistry: the host's engines by id (one pool each): add, list, remove, status."""

from __future__ import annotations

import asyncio
import logging

from ..engine import AnySpec
from ..library.names import same_model
from ..protocol.errors import ErrorKind, InferError
from ..protocol.snapshots import EngineStatus, PoolState
from ..scheduler import DEFAULT_QUEUE_CAPACITY, Pool
from ..scheduler.pool import JobEnded
from ..scheduler.shares import Shares
from .reports import engine_status

log = logging.getLogger(__name__)


class EngineRegistry:
    """Engines by id. The first engine added is the default for requests naming none."""

    def __init__(
        self,
        queue_capacity: int = DEFAULT_QUEUE_CAPACITY,
        shares: Shares | None = None,
        job_ended: JobEnded | None = None,
    ) -> None:
        self.queue_capacity = queue_capacity
        self.shares = shares or Shares()  # one for every pool: fair shares and limits are host-wide
        self.job_ended = job_ended
        self._pools: dict[str, Pool] = {}
        self._lock = asyncio.Lock()

    async def add(self, spec: AnySpec, queue_capacity: int | None = None) -> Pool:
        """Load an engine. It is listed as loading meanwhile; if loading fails it is removed
        and the typed error is raised."""
        # A library model's name may hold '/' (hf.co/ORG/REPO:Q4_K_M): the routes that take
        # an engine id take it as a path, and an admin's new engine has its own pattern.
        if not spec.engine_id:
            raise InferError(
                ErrorKind.INVALID_PARAMS, "engine_id must not be empty", param="engine_id"
            )
        async with self._lock:
            if spec.engine_id in self._pools:
                raise InferError(
                    ErrorKind.ENGINE_EXISTS,
                    f"an engine named '{spec.engine_id}' already exists",
                    param="engine_id",
                    engine_id=spec.engine_id,
                )
            pool = Pool(spec, queue_capacity or self.queue_capacity, self.shares, self.job_ended)
            self._pools[spec.engine_id] = pool
        try:
            await pool.load()
        except BaseException:
            self._pools.pop(spec.engine_id, None)
            raise
        return pool

    async def remove(self, engine_id: str) -> None:
        pool = self.get(engine_id)
        self._pools.pop(engine_id, None)
        await pool.close()
        log.info("engine %s removed", engine_id)

    def get(self, engine_id: str) -> Pool:
        try:
            return self._pools[engine_id]
        except KeyError:
            raise InferError(
                ErrorKind.MODEL_NOT_FOUND,
                f"no engine named '{engine_id}'",
                param="engine_id",
                engine_id=engine_id,
            ) from None

    def resolve(self, model: str | None) -> Pool:
        """The pool a request's `model` names: an engine id, a model file name, or nothing
        (the default engine)."""
        if not self._pools:
            raise InferError(ErrorKind.NO_ENGINE, "this host has no engine loaded")
        if not model or model == "default":
            ready = [p for p in self._pools.values() if p.state is PoolState.READY]
            return ready[0] if ready else next(iter(self._pools.values()))
        if model in self._pools:
            return self._pools[model]
        for pool in self._pools.values():
            if model in pool.model_names:
                return pool
        for pool in self._pools.values():  # as Ollama's names: case aside, `:latest` or none
            if any(same_model(name, model) for name in (pool.id, *pool.model_names)):
                return pool
        raise InferError(
            ErrorKind.MODEL_NOT_FOUND,
            f"model '{model}' not found; this host serves: {', '.join(self._pools)}",
            param="model",
        )

    def pools(self) -> list[Pool]:
        return list(self._pools.values())

    def ids(self) -> list[str]:
        return list(self._pools)

    def status(self, engine_id: str) -> EngineStatus:
        return engine_status(self.get(engine_id))

    def statuses(self) -> list[EngineStatus]:
        return [engine_status(pool) for pool in self._pools.values()]

    async def close(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.close()
