"""A real host with the bundled model, served over HTTP on 127.0.0.1 (a free port)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from infertui.core.config import HostSettings, HttpSettings
from infertui.core.host import HostService
from infertui.core.transport.http import Access, HttpServer, create_app

from ..conftest import deterministic_for

pytestmark = pytest.mark.model


@dataclass
class Host:
    service: HostService
    server: HttpServer
    client: httpx.AsyncClient

    @property
    def url(self) -> str:
        return self.server.url


HostFactory = Callable[..., Coroutine[Any, Any, Host]]


@pytest.fixture
async def start_host(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> AsyncIterator[HostFactory]:
    """Start (and at teardown stop) hosts; --deterministic in a test marked so, which compares
    two generations (tests/conftest.py, deterministic_for)."""
    hosts: list[Host] = []

    async def start(
        *,
        parallel: int = 2,
        ctx: int = 1024,
        queue: int = 16,
        api_key: str | None = None,
        access: Access | None = None,
        cors_origins: tuple[str, ...] = (),
        allowed_hosts: tuple[str, ...] = (),
        limits: HttpSettings | None = None,
        chat_template: str | None = None,
        pooling: str = "auto",
        default_max_tokens: int | None = None,
    ) -> Host:
        settings = HostSettings.model_validate(
            {"queue": queue, "drain_on_stop_ms": 0,
             "model_dirs": [str(tmp_path_factory.getbasetemp())],  # tests' copies load
             "engine": {"ctx": ctx, "parallel": parallel, "threads": 2,
                        "chat_template": chat_template, "pooling": pooling,
                        "deterministic": deterministic_for(request)}}
        )  # fmt: skip
        service = HostService(settings)
        limits = limits or HttpSettings()
        app = create_app(
            service, access=access or Access([api_key] if api_key else []),
            cors_origins=cors_origins, allowed_hosts=allowed_hosts,
            body_timeout_s=limits.body_timeout_s, default_max_tokens=default_max_tokens,
        )  # fmt: skip
        server = HttpServer(app, "127.0.0.1:0", limits)
        service.attach(server)
        await service.start()
        client = httpx.AsyncClient(base_url=server.url, timeout=60)
        host = Host(service, server, client)
        hosts.append(host)
        return host

    yield start
    for host in hosts:
        await host.client.aclose()
        await host.service.stop()


@pytest.fixture
async def host(start_host: HostFactory) -> Host:
    return await start_host()


@pytest.fixture
async def sdk(host: Host) -> AsyncIterator[openai.AsyncOpenAI]:
    """The official openai SDK on the host, with no retries: a refusal is seen as it comes."""
    client = openai.AsyncOpenAI(base_url=f"{host.url}/v1", api_key="unused", max_retries=0)
    yield client
    await client.close()


MODEL = "smollm2-135m"
