"""`infertui host --headless`: the host core with plain logs, stopped by Ctrl-C or SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal

from infertui.core.config import Settings
from infertui.core.host import HostService
from infertui.core.protocol.errors import InferError
from infertui.core.transport.http import HttpServer, create_app

log = logging.getLogger("infertui.host")


def build_service(settings: Settings) -> HostService:
    """The host core with the transports the settings ask for."""
    service = HostService(settings.host)
    http = settings.host.http
    if http.listen:
        key = settings.api_key.get_secret_value() if settings.api_key else None
        app = create_app(service, api_key=key, cors_origins=http.cors_origins)
        service.attach(HttpServer(app, http.listen))
    return service


async def serve(settings: Settings, stop: asyncio.Event) -> int:
    service = build_service(settings)
    try:
        await service.start()
    except InferError as exc:
        log.error("cannot start: %s", exc.message)
        await service.stop()
        return 1
    for status in service.engines():
        log.info(
            "engine %s: %s, %d slots x %d ctx, %s, gpu layers %d",
            status.engine_id, status.model_path, status.parameters.n_parallel,
            status.parameters.n_ctx, status.chat_format, status.parameters.n_gpu_layers,
        )  # fmt: skip
    faces = "".join(f", {t.name} on {t.describe()}" for t in service.transports)
    log.info("infertui host ready: serving %s%s", ", ".join(service.registry.ids()), faces)
    await stop.wait()
    log.info("shutting down")
    await service.stop()
    return 0


def run_headless(settings: Settings) -> int:
    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await serve(settings, stop)

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:  # a second Ctrl-C while shutting down
        return 130
