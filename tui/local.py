"""The Client API on the host's own HostService, so the host dashboard shows the same
screens as a remote client without a network hop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Sequence
from typing import Any

from infertui.core.client import ChatReply, ChatStats, Client, HostInfo
from infertui.core.host import Ask, HostService
from infertui.core.protocol import (
    AddEngineRequest,
    ChatMessage,
    EngineStatus,
    Finished,
    LibraryEntry,
    LiveJob,
    MetricsSnapshot,
    QueueSnapshot,
    SamplingParams,
    TokenText,
    UsageReport,
)
from infertui.core.scheduler import Job


class LocalReply(ChatReply):
    """A reply from this process's host; its job is admitted while the caller starts reading
    (the prompt is tokenized off the event loop first)."""

    def __init__(self, submission: Coroutine[Any, Any, Job]) -> None:
        self._submission = asyncio.ensure_future(submission)
        # an error nobody reads (the reply was dropped unread) is not worth a warning
        self._submission.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._aborted = False

    async def __aiter__(self) -> AsyncIterator[str]:
        job = await self._submission  # an admission error is raised here
        self.request_id = job.id
        if self._aborted:
            job.cancel()
        async for event in job.events():
            if isinstance(event, TokenText):
                yield event.text
            elif isinstance(event, Finished):
                if event.error is not None:
                    raise event.error
                t = event.timings
                self.stats = ChatStats(
                    finish_reason=event.finish_reason,
                    tokens_in=t.tokens_in,
                    tokens_out=t.tokens_out,
                    ttft_ms=t.ttft_ms,
                    tokens_per_s=t.decode_tps,
                    model=job.pool_id,
                )

    def abort(self) -> None:
        self._aborted = True
        done = self._submission
        if done.done() and not done.cancelled() and done.exception() is None:
            done.result().cancel()


class LocalClient(Client):
    """This process's host, as a Client that is always admin."""

    def __init__(self, service: HostService) -> None:
        self.service = service
        self._closed = asyncio.Event()
        self.refresh_info()

    def refresh_info(self) -> None:
        info = self.service.server_info({"transports": self.service.addresses()})
        self.info = HostInfo(
            host_name=info.host_name,
            model=info.model,
            models=tuple(info.models),
            status=info.status,
            address="local",
            transport="local",
            admin=True,
            extra=info.capabilities,
        )

    def addresses(self) -> dict[str, str]:
        return self.service.addresses()

    def transport_status(self) -> dict[str, str]:
        return self.service.transport_status()

    def live_jobs(self) -> list[LiveJob]:
        """Every job in flight on every engine, with its latest text."""
        return self.service.live_jobs()

    def chat(
        self, messages: Sequence[ChatMessage], *, model: str | None = None, **params: Any
    ) -> ChatReply:
        return LocalReply(
            self.service.submit(
                Ask(
                    model=model,
                    messages=messages,
                    params=SamplingParams(**params),
                    client_id="local",
                    identity="local",
                )
            )
        )

    async def engines(self) -> list[EngineStatus]:
        return self.service.engines()

    async def library(self) -> list[LibraryEntry]:
        return await self.service.library_entries()

    async def queue(self) -> list[QueueSnapshot]:
        return self.service.queues()

    async def metrics(self) -> list[MetricsSnapshot]:
        return self.service.metrics()

    async def usage(self) -> UsageReport:
        return await self.service.usage.report()  # the person at the host sees everyone

    async def add_engine(self, request: AddEngineRequest) -> None:
        await self.service.add_engine(request)
        self.refresh_info()

    async def remove_engine(self, engine_id: str) -> None:
        await self.service.remove_engine(engine_id)
        self.refresh_info()

    async def pull_model(self, name: str) -> AsyncIterator[dict[str, Any]]:
        async for event in self.service.pull_model(name):
            yield event

    async def delete_model(self, name: str) -> None:
        await self.service.delete_model(name)

    async def copy_model(self, source: str, destination: str) -> None:
        await self.service.copy_model(source, destination)

    async def load_model(self, name: str) -> None:
        await self.service.load_model(name, None)
        self.refresh_info()

    async def unload_model(self, name: str) -> None:
        await self.service.load_model(name, 0)
        self.refresh_info()

    async def reload_engine(self, engine_id: str, model_path: str | None = None) -> None:
        await self.service.reload_engine(engine_id, model_path)

    async def drain_engine(self, engine_id: str, deadline_ms: int = 5000) -> None:
        await self.service.drain_engine(engine_id, deadline_ms)

    async def resume_engine(self, engine_id: str) -> None:
        self.service.resume_engine(engine_id)

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def close(self) -> None:
        self._closed.set()
