"""Finding hosts that announce on a topic: `infertui hosts --topic NAME`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from ...protocol import p2p
from .bridge import Bridge, PeerConnection
from .ids import topic_key


async def find_hosts(
    topic: str, *, bootstrap: Sequence[str] = (), wait_s: float = 5.0
) -> list[p2p.ServerInfo]:
    """Join the topic as a client for `wait_s` seconds; the server_info of every host met."""
    bridge = await Bridge.start(bootstrap=bootstrap)
    found: dict[bytes, p2p.ServerInfo] = {}
    readers: set[asyncio.Task[None]] = set()

    async def greet(conn: PeerConnection) -> None:
        with contextlib.suppress(Exception):
            line = await asyncio.wait_for(conn.reader.readuntil(b"\n"), wait_s)
            _, payload = p2p.decode_line(line)
            if isinstance(payload, p2p.ServerInfo):
                found[conn.remote_key] = payload.model_copy(
                    update={"server_id": payload.server_id or conn.remote_id}
                )
        conn.close()

    def on_connection(conn: PeerConnection) -> None:
        task = asyncio.create_task(greet(conn))
        readers.add(task)
        task.add_done_callback(readers.discard)

    bridge.on_connection = on_connection
    try:
        await asyncio.wait_for(bridge.join(topic_key(topic), server=False, client=True), wait_s)
        await asyncio.sleep(wait_s / 2)  # connections trickle in after the first lookup
        if readers:
            await asyncio.wait(readers, timeout=wait_s)
    except TimeoutError:
        pass
    finally:
        await bridge.close()
    return sorted(found.values(), key=lambda info: info.host_name)
