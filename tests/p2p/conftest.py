"""Real Hyperswarm on a loopback testnet: hyperdht's testnet helper bound to 127.0.0.1."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import pytest

from infertui.core.config import HostSettings
from infertui.core.host import HostService
from infertui.core.transport.p2p.client import P2PClient
from infertui.core.transport.p2p.host import P2PServer

pytestmark = pytest.mark.model


@dataclass
class P2PHost:
    service: HostService
    server: P2PServer
    seed: bytes

    @property
    def server_id(self) -> str:
        return self.server.describe()


P2PHostFactory = Callable[..., Coroutine[Any, Any, P2PHost]]


@pytest.fixture
async def start_p2p_host(
    testnet: list[str], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[P2PHostFactory]:
    hosts: list[P2PHost] = []

    async def start(
        *, parallel: int = 2, queue: int = 8, drain_ms: int = 0, **server: Any
    ) -> P2PHost:
        settings = HostSettings.model_validate(
            {"queue": queue, "drain_on_stop_ms": drain_ms, "host_name": "test-host",
             "model_dirs": [str(tmp_path_factory.getbasetemp())],
             "engine": {"ctx": 1024, "parallel": parallel, "threads": 2}}
        )  # fmt: skip
        service = HostService(settings)
        seed = server.pop("seed", None) or secrets.token_bytes(32)
        server.setdefault("bootstrap", testnet)
        p2p = P2PServer(service, seed=seed, **server)
        service.attach(p2p)
        await service.start()
        await p2p.wait_listening()
        host = P2PHost(service, p2p, seed)
        hosts.append(host)
        return host

    yield start
    for host in hosts:
        await host.service.stop()


@pytest.fixture
async def p2p_host(start_p2p_host: P2PHostFactory) -> P2PHost:
    return await start_p2p_host()


@pytest.fixture
async def connect(
    testnet: list[str],
) -> AsyncIterator[Callable[..., Coroutine[Any, Any, P2PClient]]]:
    clients: list[P2PClient] = []

    async def open_client(server_id: str, **kwargs: Any) -> P2PClient:
        client = await P2PClient.connect(server_id, bootstrap=testnet, **kwargs)
        clients.append(client)
        return client

    yield open_client
    for client in clients:
        await client.close()
