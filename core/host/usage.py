"""The host's usage ledger: a record of every job in an SQLite file in the data dir
(core/ledger), spec 002's artifacts beside them, and what they report (issue 37 §5).

A job's record is made on the event loop as it ends (a few microseconds) and written by the
ledger's own thread in batches; a restart reads back what each identity used today, so that
a daily token budget holds across it. Prompts and replies are kept only with `keep_text`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from .. import paths
from ..config import LedgerSettings
from ..ledger import Artifact, JobRecord, Ledger, day_of
from ..protocol.errors import ErrorKind, InferError
from ..protocol.events import Finished
from ..protocol.orchestrator import ArtifactRecord
from ..protocol.shares import UsageReport
from ..scheduler import Job
from ..scheduler.shares import Shares

log = logging.getLogger(__name__)

LEDGER_FILE = "ledger.sqlite"


class UsageLedger:
    def __init__(self, settings: LedgerSettings, shares: Shares, engine_version: str) -> None:
        self.settings = settings
        self.keep_text = settings.enabled and settings.keep_text
        self._shares = shares
        self._version = engine_version
        self.path = paths.data_dir() / LEDGER_FILE  # where the host's data dir is now
        self._ledger: Ledger | None = None

    async def open(self) -> None:
        """Open the ledger (if kept) and give each identity back what it used today."""
        if not self.settings.enabled:
            return
        self._ledger = await asyncio.to_thread(
            Ledger.open, self.path, retention_days=self.settings.retention_days
        )
        today = await asyncio.to_thread(self._ledger.usage, since=day_of(time.time()))
        self._shares.restore_today({row.identity: row.tokens_in + row.tokens_out for row in today})
        log.info("usage ledger: %s", self.path)

    async def close(self) -> None:
        if self._ledger is not None:
            ledger, self._ledger = self._ledger, None
            await asyncio.to_thread(ledger.close)

    def job_ended(self, job: Job, final: Finished) -> None:
        """Record a job that ended, however it ended (the pool's hook, on the event loop)."""
        if self._ledger is not None:
            self._ledger.record(self._record(job, final))

    def _record(self, job: Job, final: Finished) -> JobRecord:
        t, error, request = final.timings, final.error, job.request
        now = time.time()
        params = request.params
        info = job.engine.describe()
        transcript: dict[str, Any] = {
            "started": {"queue_position": job.queue_position,
                        "predicted_start_ms": job.predicted_start_ms},
            "tokens": t.tokens_out,
        }  # fmt: skip
        if error is not None:
            transcript["error"] = {"code": error.mapping.orch_code, "message": error.message}
        else:
            transcript["end"] = {"tokens_out": t.tokens_out, "decode_time_ms": round(t.decode_ms)}
        if job.kept_text is not None:
            transcript["prompt"] = request.prompt_text or [
                m.model_dump(mode="json") for m in request.messages or ()
            ]
            transcript["text"] = "".join(job.kept_text)
        return JobRecord(
            job_id=job.id,
            identity=job.identity,
            engine=job.pool_id,
            model_ref=info.model_names[0] if info.model_names else None,
            session_id=job.session_id,
            correlation_id=job.correlation_id,
            priority="batch" if job.batch else "interactive",
            outcome=final.finish_reason if error is None else "error",
            error_code=error.mapping.orch_code if error is not None else None,
            error_message=error.message if error is not None else None,
            tokens_in=t.tokens_in,
            tokens_out=t.tokens_out,
            queue_ms=round(t.queue_wait_ms, 1),
            decode_ms=round(t.decode_ms, 1),
            ttft_ms=round(t.ttft_ms, 1) if t.ttft_ms is not None else None,
            admitted_at=now - (time.perf_counter() - job.enqueued_at),
            ended_at=now,
            params={
                "max_tokens": request.max_tokens,  # prompts and inputs are redacted
                "ctx": info.n_ctx,
                "engine_version": self._version,
                "temperature": params.temperature,
                "top_p": params.top_p,
                "seed": params.seed,
            },
            transcript=transcript,
        )

    # ---- what it reports ---------------------------------------------------------------------

    async def report(
        self,
        *,
        identity: str | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> UsageReport:
        """Per identity and UTC day from the ledger, and who is on the host now; only
        `identity`'s where one is given (a key that is not the admin sees its own)."""
        users = [u for u in self._shares.users() if identity is None or u.identity == identity]
        if self._ledger is None:
            return UsageReport(users=tuple(users), ledger=False)
        ledger = self._ledger
        await asyncio.to_thread(ledger.flush)  # the jobs that just ended count
        days = await asyncio.to_thread(ledger.usage, since=since, until=until, identity=identity)
        return UsageReport(days=tuple(days), users=tuple(users))

    async def put_artifact(
        self,
        content: Any,
        *,
        kind: str,
        tags: Sequence[str] = (),
        lineage: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
    ) -> ArtifactRecord:
        ledger = self._needs_ledger()
        artifact = await asyncio.to_thread(
            ledger.put_artifact, content, kind=kind, tags=tags, lineage=lineage, meta=meta
        )
        return _record(artifact)

    async def artifact(self, artifact_id: str) -> ArtifactRecord | None:
        ledger = self._needs_ledger()
        await asyncio.to_thread(ledger.flush)  # a job that just ended is readable at once
        artifact = await asyncio.to_thread(ledger.artifact, artifact_id)
        return _record(artifact) if artifact is not None else None

    def _needs_ledger(self) -> Ledger:
        if self._ledger is None:
            raise InferError(
                ErrorKind.NOT_FOUND,
                "this host keeps no ledger (host.ledger.enabled is off): no artifacts",
            )
        return self._ledger


def _record(artifact: Artifact) -> ArtifactRecord:
    return ArtifactRecord(**asdict(artifact))
