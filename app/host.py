"""`infertui host --headless`: the host core with plain logs, stopped by Ctrl-C or SIGTERM.

SIGHUP is ignored: a headless host is meant to outlive the terminal that started it (as under
`nohup`), and a stop is SIGTERM's drain, never a death mid-reply, unless a second signal asks
for it."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from infertui.core.config import Settings
from infertui.core.host import HostService
from infertui.core.protocol import InferError
from infertui.core.transport.http import Access, HttpServer, create_app, is_loopback
from infertui.core.transport.http.access import read_keys_file
from infertui.core.transport.p2p.host import P2PServer
from infertui.core.transport.p2p.ids import load_seed, parse_peer, read_allow_file
from infertui.core.transport.p2p.peer_pull import PeerPulls

log = logging.getLogger("infertui.host")


def build_service(settings: Settings, *, reset_id: bool = False) -> HostService:
    """The host core with the transports the settings ask for."""
    service = HostService(settings.host)
    p2p = settings.host.p2p
    if p2p.enabled:
        allowed = [*p2p.allow, *(read_allow_file(Path(p2p.allow_file)) if p2p.allow_file else [])]
        peers = {
            key: name
            for entry in (*allowed, *p2p.admins, *p2p.share)
            for key, name in [parse_peer(entry)]
        }
        seed = load_seed(reset=reset_id)
        service.pull_from_peers(PeerPulls(bootstrap=settings.bootstrap, seed=seed))
        service.attach(
            P2PServer(
                service,
                seed=seed,
                bootstrap=settings.bootstrap,
                topics=p2p.topics,
                allow=[parse_peer(entry)[0] for entry in allowed],
                admins=[parse_peer(entry)[0] for entry in p2p.admins],
                sharers=[parse_peer(entry)[0] for entry in p2p.share],
                names={key: name for key, name in peers.items() if name},
                peer_job_limit=settings.host.peer_job_limit,
            )
        )
    http = settings.host.http
    if http.listen:
        keys = [settings.api_key, *settings.api_keys] if settings.api_key else settings.api_keys
        admin = settings.admin_key.get_secret_value() if settings.admin_key else None
        named = {name: key.get_secret_value() for name, key in settings.host.keys.items()}
        if settings.host.keys_file:
            named |= read_keys_file(Path(settings.host.keys_file).expanduser())
        access = Access(
            [key.get_secret_value() for key in keys],
            admin,
            loopback=is_loopback(http.listen),
            named=named,
        )
        app = create_app(
            service, access=access, cors_origins=http.cors_origins,
            allowed_hosts=http.allowed_hosts,
            max_body_bytes=int(http.max_body_mb * 2**20), body_timeout_s=http.body_timeout_s,
            default_max_tokens=http.default_max_tokens,
        )  # fmt: skip
        service.attach(HttpServer(app, http.listen, http))
    return service


class StopSignals:
    """SIGINT and SIGTERM as servers take them: the first stops the host, giving running jobs
    their grace (`drain_on_stop_ms`); the next, while it stops, cuts the grace short."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.now = asyncio.Event()

    def __call__(self) -> None:
        (self.now if self.asked.is_set() else self.asked).set()


async def serve(settings: Settings, stop: StopSignals, *, reset_id: bool = False) -> int:
    try:
        service = build_service(settings, reset_id=reset_id)
    except InferError as exc:
        log.error("cannot start: %s", exc.message)
        return 2
    try:
        await service.start()
    except InferError as exc:
        log.error("cannot start: %s", exc.message)
        await service.stop()
        return 1
    for status in service.engines():
        log.info(
            "engine %s: %s, %d slots x %s ctx, %s, gpu layers %d",
            status.engine_id, status.model_path, status.parameters.n_parallel,
            status.parameters.n_ctx or "unknown", status.chat_format,
            status.parameters.n_gpu_layers,
        )  # fmt: skip
    faces = "".join(f", {t.name} on {t.describe()}" for t in service.transports)
    log.info("infertui host ready: serving %s%s", ", ".join(service.engine_ids()), faces)
    await stop.asked.wait()
    log.info("shutting down (again to stop now)")

    async def on_second_signal() -> None:
        await stop.now.wait()
        service.stop_now()

    second = asyncio.create_task(on_second_signal())
    try:
        await service.stop()
    finally:
        second.cancel()
    return 0


def run_headless(settings: Settings, *, reset_id: bool = False) -> int:
    async def main() -> int:
        stop = StopSignals()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)
        loop.add_signal_handler(signal.SIGHUP, log.info, "SIGHUP ignored: SIGTERM stops the host")
        return await serve(settings, stop, reset_id=reset_id)

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:  # a second Ctrl-C while shutting down
        return 130
