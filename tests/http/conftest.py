"""A real host with the bundled model, served over HTTP on 127.0.0.1 (a free port): the one
the folder's tests share (`host`), or one of a test's own (`start_host`, tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import openai
import pytest

from ..conftest import MODEL, Host, HostFactory

__all__ = ["MODEL", "Host", "HostFactory"]


@pytest.fixture
async def host(shared_host: Callable[..., Coroutine[Any, Any, Host]]) -> Host:
    """The shared HTTP host (tests/conftest.py, SharedHosts); a test marked `fresh_host` gets
    its own."""
    return await shared_host()


@pytest.fixture
async def sdk(host: Host) -> AsyncIterator[openai.AsyncOpenAI]:
    """The official openai SDK on the host, with no retries: a refusal is seen as it comes."""
    client = openai.AsyncOpenAI(base_url=f"{host.url}/v1", api_key="unused", max_retries=0)
    yield client
    await client.close()
