"""How long a full garbage collection holds the GIL in a started host, with its start-up heap
frozen (as HostService.start leaves it) and with the freeze undone. Prints figures.

    .venv/bin/python bench/bench_gc.py

A full collection stops every thread that needs the GIL: the event loop serving the streams
and the batch loop between two decodes.
"""

from __future__ import annotations

import asyncio
import gc
import time

from infertui.core.config import Settings
from infertui.core.host import HostService
from infertui.core.transport.http import create_app


def full_collection() -> str:
    best = min(_timed() for _ in range(5))
    return f"{best * 1000:6.1f} ms over {len(gc.get_objects()):,} tracked objects"


def _timed() -> float:
    start = time.perf_counter()
    gc.collect()
    return time.perf_counter() - start


async def main() -> None:
    service = HostService(Settings().host)  # the bundled model, no transports
    create_app(service)
    await service.start()
    try:
        print(f"frozen start-up heap ({gc.get_freeze_count():,} objects): {full_collection()}")
        gc.unfreeze()
        print(f"nothing frozen:{' ' * 28}{full_collection()}")
    finally:
        await service.stop()


if __name__ == "__main__":
    asyncio.run(main())
