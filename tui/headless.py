"""`infertui host --headless`: the host core with plain logs, stopped by Ctrl-C or SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal

from infertui.core.config import Settings
from infertui.core.host import HostService
from infertui.core.protocol.errors import InferError

log = logging.getLogger("infertui.host")


async def serve(settings: Settings, stop: asyncio.Event) -> int:
    service = HostService(settings.host)
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
    log.info("infertui host ready: serving %s", ", ".join(service.registry.ids()))
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
