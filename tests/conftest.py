"""Shared fixtures: the bundled model and pools built on it (real llama.cpp, 2 threads)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from infertui.core.engine import EngineSpec, bundled_model_path
from infertui.core.scheduler import Pool

# Tests must never read the developer's own settings or write into their home.
os.environ.setdefault("INFERTUI_CONFIG", "/nonexistent/infertui-test-config.toml")
# Hosts started by tests (in-process or as subprocesses) never reach for the public DHT;
# the P2P tests give theirs a loopback testnet explicitly.
os.environ["INFERTUI_HOST__P2P__ENABLED"] = "false"
os.environ.pop("INFERTUI_BOOTSTRAP", None)

PoolFactory = Callable[..., Coroutine[Any, Any, Pool]]


@pytest.fixture(scope="session")
def model_path() -> Path:
    return bundled_model_path()


@pytest.fixture
async def make_pool(model_path: Path) -> AsyncIterator[PoolFactory]:
    """Start pools on the bundled model; every one is closed at teardown."""
    pools: list[Pool] = []

    async def make(
        *, parallel: int = 4, ctx: int = 1024, queue: int = 64, batch: int = 512, **spec: Any
    ) -> Pool:
        pool = await Pool.start(
            EngineSpec(
                model_path=str(spec.pop("path", model_path)),
                engine_id=spec.pop("engine_id", "gemma"),
                n_ctx=ctx,
                n_parallel=parallel,
                n_batch=batch,
                n_threads=2,
                **spec,
            ),
            queue_capacity=queue,
        )
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        await pool.close()
