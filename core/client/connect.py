"""connect(target): a server ID goes over Hyperswarm, an http(s) URL over HTTP; and a
Reconnector that keeps a connection up with backoff and says what it is doing."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from ..protocol.errors import ErrorKind, InferError
from ..transport.p2p.ids import parse_server_id
from .base import Client
from .errors import explain
from .http import HttpHostClient
from .p2p import P2PHostClient
from .topic import TOPIC_PREFIX, TopicClient

log = logging.getLogger(__name__)

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 15.0
# connect errors that no retry can fix: a malformed ID, a missing or refused key, a server
# that answers but is not an infertui host
FINAL = frozenset(
    {
        ErrorKind.INVALID_SERVER_ID,
        ErrorKind.UNAUTHORIZED,
        ErrorKind.FORBIDDEN,
        ErrorKind.UNSUPPORTED_VERSION,
    }
)


def is_url(target: str) -> bool:
    return target.startswith(("http://", "https://"))


def as_target(text: str) -> str:
    """What people paste, as connect() takes it: a server ID as is, `HOST:PORT[/v1]` as
    http://HOST:PORT, and a URL without the OpenAI-style `/v1` (infertui's own paths sit
    beside it)."""
    text = text.strip()
    if text.startswith(TOPIC_PREFIX):
        return text
    if not is_url(text) and re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[\w.-]+):\d{1,5}(/v1)?/?", text):
        text = f"http://{text}"
    if is_url(text):
        text = text.rstrip("/").removesuffix("/v1")
    return text


def check_target(target: str) -> str:
    """The target as connect() takes it (as_target), or INVALID_SERVER_ID at once, with no
    network and no bridge started, where it is neither a URL, a topic nor a server ID."""
    target = as_target(target)
    if not target.startswith(TOPIC_PREFIX) and not is_url(target):
        parse_server_id(target)
    return target


async def connect(
    target: str,
    *,
    api_key: str | None = None,
    bootstrap: Sequence[str] = (),
    connect_timeout: float = 10.0,
    seed: bytes | None = None,
) -> Client:
    """A connected Client: `topic:NAME` reaches every host on that topic (topic.py). Raises
    InferError: INVALID_SERVER_ID before any network for a
    malformed ID; HOST_OFFLINE, CONNECT_FAILED or UNAUTHORIZED when the host is not there."""
    target = check_target(target)
    if target.startswith(TOPIC_PREFIX):
        return await TopicClient.connect(
            target.removeprefix(TOPIC_PREFIX), bootstrap=bootstrap,
            connect_timeout=connect_timeout, seed=seed,
        )  # fmt: skip
    if is_url(target):
        return await HttpHostClient.connect(
            target, api_key=api_key, connect_timeout=connect_timeout
        )
    return await P2PHostClient.connect(
        target, bootstrap=bootstrap, connect_timeout=connect_timeout, seed=seed
    )


def backoff_delay(attempt: int) -> float:
    """Doubling from BACKOFF_FIRST_S up to BACKOFF_MAX_S, with ±20 % jitter below the cap
    (so many clients don't retry in step)."""
    delay = BACKOFF_FIRST_S * 2 ** min(attempt, 16)
    return BACKOFF_MAX_S if delay >= BACKOFF_MAX_S else delay * random.uniform(0.8, 1.2)


@dataclass(frozen=True, slots=True)
class ConnectionState:
    """What a Reconnector is doing, in a form a status line can show as is."""

    phase: Literal["connecting", "connected", "waiting", "closed"]
    message: str
    client: Client | None = None
    retry_in_s: float | None = None


class Reconnector:
    """Keeps one connection to `target` up: connects, waits for it to drop, retries with
    backoff, and reports every change to `on_state`. `retry_now()` skips the wait."""

    def __init__(
        self,
        target: str,
        on_state: Callable[[ConnectionState], None],
        *,
        api_key: str | None = None,
        bootstrap: Sequence[str] = (),
        connect_timeout: float = 10.0,
        seed: bytes | None = None,
    ) -> None:
        self.target = as_target(target)
        self._on_state = on_state
        self._connect = functools.partial(
            connect,
            target,
            api_key=api_key,
            bootstrap=bootstrap,
            connect_timeout=connect_timeout,
            seed=seed,
        )
        self._wake = asyncio.Event()
        self.client: Client | None = None

    def retry_now(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        attempt = 0
        try:
            while True:
                self._on_state(ConnectionState("connecting", f"Connecting to {self.target}…"))
                try:
                    self.client = await self._connect()
                except InferError as err:
                    if err.kind in FINAL:  # trying again cannot help: say so and stop
                        log.info("connect to %s refused: %s", self.target, err.message)
                        self._on_state(ConnectionState("closed", explain(err)))
                        return
                    delay = backoff_delay(attempt)
                    attempt += 1
                    log.info("connect to %s failed: %s", self.target, err.message)
                    self._on_state(ConnectionState("waiting", explain(err), retry_in_s=delay))
                    await self._sleep(delay)
                    continue
                attempt = 0
                info = self.client.info
                self._on_state(
                    ConnectionState("connected", f"Connected to {info.host_name}", self.client)
                )
                await self.client.wait_closed()
                log.info("connection to %s dropped", self.target)
                await self.client.close()
                self.client = None
        finally:
            if self.client is not None:
                await self.client.close()
                self.client = None

    async def _sleep(self, seconds: float) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
