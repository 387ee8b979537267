"""Real Hyperswarm on a loopback testnet: hyperdht's testnet helper bound to 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest

from infertui.core.transport.p2p.client import P2PClient

from ..conftest import Host, HostFactory, Hosts

P2PHost = Host
P2PHostFactory = HostFactory


@pytest.fixture
def start_p2p_host(hosts: Hosts) -> P2PHostFactory:
    """Hosts of the test's own, on Hyperswarm only; `drain_ms` is their grace at a stop."""

    async def start(**options: Any) -> Host:
        options.setdefault("admins", ())
        return await hosts.start(http=False, p2p=True, queue=8, **options)

    return start


@pytest.fixture
async def p2p_host(shared_host: Callable[..., Coroutine[Any, Any, Host]]) -> Host:
    """The shared host on Hyperswarm (tests/conftest.py, SharedHosts); a test marked
    `fresh_host` gets its own."""
    return await shared_host(p2p=True)


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
