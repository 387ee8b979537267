"""Which models are in memory: those a request loads on demand come and go.

A request naming a library model that is not loaded loads it, as Ollama's scheduler and
llama-server's router mode do. Such a model stays while it has work and for its keep_alive
after that (the last request's, else `host.keep_alive`: 5 min; forever for a negative one; 0
unloads it once idle). Before a load the memory budget must hold the model's estimated weights
and KV cache: the idle on-demand models are unloaded to make room, least recently used first,
and a model that cannot fit even then is refused (OUT_OF_MEMORY), never left to the kernel's
OOM killer or a failed CUDA allocation. Engines the host started with, or that an admin added,
stay loaded: the budget is free memory beside them, or `host.memory_budget_mb` for the models
loaded on demand.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from ..config import HostSettings
from ..engine import EngineSpec, UpstreamSpec, free_memory, supports_gpu_offload
from ..library import Library, LibraryModel
from ..library.gguf_header import read_header
from ..protocol.errors import ErrorKind, InferError
from ..protocol.keep_alive import FOREVER, said
from ..protocol.snapshots import PoolState
from ..scheduler import Pool
from .registry import EngineRegistry
from .specs import engine_spec

log = logging.getLogger(__name__)

MIB = 2**20
SWEEP_S = 0.25  # how often idle models are checked for an expired keep_alive
ROOM_WAIT_S = 120.0  # how long a load waits for busy models to make room (then a 503)
FIRST_LOAD_RATE = 1 << 30  # bytes a second a load is thought to take until one is measured
HEADROOM = 0.9  # of free memory a load may plan on (engine/llama/memory.py's, for the same why)


@dataclass
class OnDemand:
    """A model loaded on demand: how long it stays once idle, and what it was thought to need."""

    keep_alive_s: float
    need_bytes: int
    holds: int = 0  # requests being prepared for it: it is not idle, though it has no job yet
    last_used: float = field(default_factory=time.monotonic)  # loaded, asked, or kept

    def idle_since(self, pool: Pool) -> float | None:
        """Since when the model has had nothing to do: its last job's end or its last use,
        whichever came later; None while it works."""
        if self.holds or pool.idle_since is None:
            return None
        return max(pool.idle_since, self.last_used)


@dataclass(frozen=True)
class Loading:
    """A load in progress, for the queue's "loading" and the memory it is about to take."""

    size: int  # bytes of weights to read
    need_bytes: int
    started: float  # monotonic


def estimate_bytes(model: LibraryModel, spec: EngineSpec) -> int:
    """Weights, an f16 KV cache of every slot's context, and the compute buffers of a full
    batch (engine/llama/memory.py's context_needs, from the header before any load)."""
    header = read_header(model.path)
    cells = spec.n_ctx * (spec.slots_requested or 1)
    compute = spec.n_batch * header.number("embedding_length") * 4 * 48
    return model.size + header.kv_bytes(cells) + compute


class Residency:
    """Loads library models for the requests that name them, and unloads them again."""

    def __init__(self, registry: EngineRegistry, library: Library, settings: HostSettings):
        self._registry = registry
        self._library = library
        self._settings = settings
        self.default_keep_alive_s = settings.keep_alive_s
        self._budget = settings.memory_budget_mb * MIB if settings.memory_budget_mb else None
        self._on_demand: dict[str, OnDemand] = {}  # by pool id (the model's library name)
        self._loads: dict[str, asyncio.Task[Pool]] = {}
        self._loading: dict[str, Loading] = {}
        self._waiting: Counter[str] = Counter()  # requests waiting for each load
        self._one_load = asyncio.Lock()  # a load makes room for itself, then the next
        self._load_rate = float(FIRST_LOAD_RATE)
        self._sweeper: asyncio.Task[None] | None = None

    # ---- loading -------------------------------------------------------------------------------

    async def load(self, model: str) -> Pool:
        """The pool of the library model `model` names, loaded now unless it is; MODEL_NOT_FOUND
        where the library has no such model. The load goes on if this request leaves: others
        may be waiting for it, and a model loaded in vain still unloads at its keep_alive."""
        entry = await asyncio.to_thread(self._library.find, model)
        if entry is None:
            raise InferError(
                ErrorKind.MODEL_NOT_FOUND,
                f"model '{model}' not found; this host serves: "
                f"{', '.join(self._registry.ids()) or 'none'}, and loads its library's models "
                "when asked (/v1/models lists them all)",
                param="model",
            )
        name = entry.name
        task = self._loads.get(name)
        if task is None:
            if name in self._registry.ids():
                return self._registry.get(name)
            task = asyncio.create_task(self._load(entry), name=f"load {name}")
            self._loads[name] = task
            task.add_done_callback(lambda done: self._load_done(name, done))
        self._waiting[name] += 1
        try:
            return await asyncio.shield(task)
        finally:
            self._waiting[name] -= 1
            if self._waiting[name] <= 0:
                del self._waiting[name]

    def _load_done(self, name: str, task: asyncio.Task[Pool]) -> None:
        self._loads.pop(name, None)
        if not task.cancelled() and task.exception() is not None:  # said to each waiter
            log.info("could not load %s on demand: %s", name, task.exception())

    async def _load(self, entry: LibraryModel) -> Pool:
        spec = engine_spec(entry.name, str(entry.path), self._settings)
        untagged = entry.name.removesuffix(":latest")  # as Ollama's clients name it too
        spec = replace(spec, aliases=(untagged,) if untagged != entry.name else ())
        # A library file that does not load is the host's fault, not the request's (a 500, as
        # Ollama's), and its words name the model, not where the host keeps it.
        try:
            need = await asyncio.to_thread(estimate_bytes, entry, spec)
        except (OSError, ValueError) as err:
            said = str(err).replace(str(entry.path), entry.path.name)
            raise InferError(
                ErrorKind.MODEL_LOAD_FAILED, f"{entry.name} is not a readable GGUF: {said}"
            ) from None
        async with self._one_load:
            await self._make_room(entry.name, need, _offloaded(spec))
            started = time.monotonic()
            self._loading[entry.name] = Loading(entry.size, need, started)
            try:
                pool = await self._registry.add(spec)
            except InferError as err:
                if err.kind is not ErrorKind.MODEL_INVALID:
                    raise
                raise InferError(
                    ErrorKind.MODEL_LOAD_FAILED, f"{entry.name} did not load: {err.message}"
                ) from None
            finally:
                del self._loading[entry.name]
        seconds = time.monotonic() - started
        self._load_rate = entry.size / max(seconds, 1e-3)
        self._on_demand[pool.id] = OnDemand(self.default_keep_alive_s, need)
        log.info(
            "loaded %s on demand in %.1f s (about %s MiB with its context)",
            entry.name, seconds, f"{need / MIB:,.0f}",
        )  # fmt: skip
        if self._sweeper is None:
            # (a context of its own: its unload lines are no request's, not the first one's
            # whose correlation ID the task would inherit)
            self._sweeper = asyncio.create_task(
                self._sweep(), name="keep_alive sweep", context=contextvars.Context()
            )
        return pool

    async def _make_room(self, name: str, need: int, offloaded: bool) -> None:
        """Unload idle on-demand models, least recently used first, until `need` bytes fit in
        the budget and the count of loaded models is under `host.max_loaded`. Where only busy
        on-demand models stand in the way, wait for them to finish, as Ollama's scheduler
        does, up to ROOM_WAIT_S; where even unloading them all would not do, raise now."""
        waited_until = time.monotonic() + ROOM_WAIT_S
        while True:
            room, where = self._room(offloaded)
            for pool in self._idle_oldest_first():
                fits = room is None or room >= need
                if fits and not self._too_many():
                    break
                if not self._is_idle(pool):  # asked for while an earlier one was unloading
                    continue
                if room is not None:
                    room += self._bytes_of(pool)
                await self.unload(pool.id, f"to make room for {name}")
            if (room is None or need <= room) and not self._too_many():
                return
            busy = [p for p in self._registry.pools() if p.id in self._on_demand]
            if self._too_many(len(busy)):
                raise self._beside_pinned(name)
            if room is not None and need > room + sum(self._bytes_of(p) for p in busy):
                raise InferError(
                    ErrorKind.OUT_OF_MEMORY,
                    f"{name} needs about {need / MIB:,.0f} MiB with its context, but only "
                    f"{max(room, 0) / MIB:,.0f} MiB is {where}"
                    + (f" while {', '.join(p.id for p in busy)} work" if busy else "")
                    + "; lower --ctx or --parallel, or raise host.memory_budget_mb",
                    param="model",
                )
            if time.monotonic() >= waited_until:
                held = (
                    f"{self._settings.max_loaded} models are loaded (host.max_loaded)"
                    if self._too_many() else f"the memory {name} needs is theirs"
                )  # fmt: skip
                raise InferError(
                    ErrorKind.POOL_UNREADY,
                    f"{held}, and none of {', '.join(p.id for p in busy)} was idle for "
                    f"{ROOM_WAIT_S:.0f} s; {name} loads once one is",
                    retry_after_ms=1000,
                )
            await asyncio.sleep(SWEEP_S)  # until a busy one is idle (its jobs' ends)

    def _beside_pinned(self, name: str) -> InferError:
        """The models the host started with (or an admin added) stay, and fill
        host.max_loaded by themselves: no wait could make room."""
        return InferError(
            ErrorKind.POOL_UNREADY,
            f"host.max_loaded is {self._settings.max_loaded}, and the host's own models "
            f"({', '.join(p.id for p in self._local() if p.id not in self._on_demand)}) stay "
            f"loaded: raise it to load {name} beside them",
        )

    def _room(self, offloaded: bool) -> tuple[int | None, str]:
        """Bytes a load may take now, and where ("free of memory", "left in the budget");
        None where free memory cannot be read."""
        if self._budget is not None:
            on_demand = [p for p in self._registry.pools() if p.id in self._on_demand]
            used = sum(self._bytes_of(pool) for pool in on_demand)
            used += sum(load.need_bytes for load in self._loading.values())
            return self._budget - used, "left of host.memory_budget_mb"
        free, where = free_memory(offloaded)
        if free is None:
            return None, where
        room = int(free * HEADROOM)
        if not offloaded:  # mapped weights' pages count as available RAM: take them off
            room -= sum(self._weights_of(pool) for pool in self._registry.pools())
        return room, f"free {where}"

    def _bytes_of(self, pool: Pool) -> int:
        """What an on-demand model takes: its weights and context as the engine reports them,
        or as estimated before its load where that was more (never undercounted)."""
        engine = pool.engine
        usage = engine.usage().memory if engine is not None else None
        used = int((usage.model_size_mb + usage.context_size_mb) * MIB) if usage else 0
        on_demand = self._on_demand.get(pool.id)
        return max(used, on_demand.need_bytes if on_demand else 0)

    @staticmethod
    def _weights_of(pool: Pool) -> int:
        usage = pool.engine.usage().memory if pool.engine is not None else None
        return int(usage.model_size_mb * MIB) if usage is not None and not pool.gpu_offload else 0

    def _too_many(self, unloaded: int = 0) -> bool:
        """Whether host.max_loaded leaves no room for one more, with `unloaded` fewer."""
        limit = self._settings.max_loaded
        return bool(limit) and len(self._local()) - unloaded >= limit

    def _local(self) -> list[Pool]:
        """The loaded models host.max_loaded counts (an upstream's model is its server's)."""
        return [p for p in self._registry.pools() if p.spec.kind != UpstreamSpec.kind]

    def _idle_oldest_first(self) -> list[Pool]:
        idle = [pool for pool in self._registry.pools() if self._is_idle(pool)]
        return sorted(idle, key=lambda pool: self._on_demand[pool.id].idle_since(pool) or 0.0)

    def _is_idle(self, pool: Pool) -> bool:
        """Loaded on demand, with no job, no request being prepared for it, and none waiting
        for its load to finish (those resume after the next load's turn may have come)."""
        on_demand = self._on_demand.get(pool.id)
        return (
            on_demand is not None
            and on_demand.idle_since(pool) is not None
            and self._waiting[pool.id] == 0
            and pool.state is not PoolState.LOADING
            and pool.id in self._registry.ids()
        )

    # ---- requests ------------------------------------------------------------------------------

    @contextmanager
    def using(self, pool: Pool, keep_alive_s: float | None) -> Iterator[None]:
        """A request is being prepared for `pool`: it is not idle meanwhile (the pool counts
        its jobs once admitted). Its keep_alive (or the default) is the model's from now."""
        on_demand = self._on_demand.get(pool.id)
        if on_demand is None:  # started with the host, or added by an admin: it stays
            yield
            return
        on_demand.keep_alive_s = self.default_keep_alive_s if keep_alive_s is None else keep_alive_s
        on_demand.holds += 1
        try:
            yield
        finally:
            on_demand.holds -= 1
            on_demand.last_used = time.monotonic()

    async def keep(self, pool: Pool, keep_alive_s: float | None) -> bool:
        """A request that only loads a model (Ollama's empty prompt) sets how long it stays; 0
        unloads it, now if it is idle, else once its jobs end (as Ollama's `stop`). Whether it
        is unloaded. A model the host started with, or an admin added, stays: a CONFLICT."""
        if keep_alive_s == 0 and pool.id not in self._on_demand:
            raise InferError(
                ErrorKind.CONFLICT,
                f"'{pool.id}' was loaded with the host or by an admin, and stays loaded: "
                f"removing its engine unloads it (the engine manager's d, or DELETE "
                f"/v1/engines/{pool.id})",
                param="keep_alive",
            )
        with self.using(pool, keep_alive_s):
            pass
        if keep_alive_s != 0:
            return False
        if self._is_idle(pool):
            await self.unload(pool.id, "keep_alive 0")
        return True  # (busy: keep_alive 0 unloads it at the sweep after its last job)

    # ---- unloading -----------------------------------------------------------------------------

    async def unload(self, pool_id: str, why: str) -> None:
        self._on_demand.pop(pool_id, None)
        if pool_id in self._registry.ids():
            await self._registry.remove(pool_id)
            log.info("unloaded %s: %s", pool_id, why)

    def forget(self, pool_id: str) -> None:
        """An admin removed the engine: it is no longer this plane's to unload."""
        self._on_demand.pop(pool_id, None)

    async def _sweep(self) -> None:
        """Unload each on-demand model whose keep_alive has run out since it went idle."""
        try:
            while self._on_demand:
                await asyncio.sleep(SWEEP_S)
                now = time.monotonic()
                for pool in self._registry.pools():
                    on_demand = self._on_demand.get(pool.id)
                    if on_demand is None or not self._is_idle(pool):
                        continue
                    since = on_demand.idle_since(pool) or now
                    if now - since >= on_demand.keep_alive_s:
                        try:
                            await self.unload(pool.id, f"idle for {said(on_demand.keep_alive_s)}")
                        except Exception:  # the next sweep tries again; the sweeps go on
                            log.exception("could not unload %s", pool.id)
        finally:
            self._sweeper = None

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for task in list(self._loads.values()):
            task.cancel()

    # ---- what the faces show -------------------------------------------------------------------

    def on_demand(self, pool_id: str) -> bool:
        return pool_id in self._on_demand

    def expires_at(self, pool: Pool) -> float | None:
        """When an on-demand model unloads if no request comes (Unix seconds); None for one
        that stays."""
        on_demand = self._on_demand.get(pool.id)
        if on_demand is None or on_demand.keep_alive_s == FOREVER:
            return None
        since = on_demand.idle_since(pool)
        idle_for = 0.0 if since is None else time.monotonic() - since
        return time.time() - idle_for + on_demand.keep_alive_s

    def loading(self, pool_id: str) -> tuple[int, int] | None:
        """(requests waiting, ms until loaded as forecast) while `pool_id` loads for them."""
        load = self._loading.get(pool_id)
        if load is None:
            return None
        left = load.size / self._load_rate - (time.monotonic() - load.started)
        return self._waiting[pool_id], int(max(left, 0.0) * 1000)


def _offloaded(spec: EngineSpec) -> bool:
    return spec.n_gpu_layers != 0 and supports_gpu_offload()
