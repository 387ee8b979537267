"""What the ledger keeps: a job's record and an artifact, and how each is a table's row."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True, kw_only=True)
class JobRecord:
    """One job as the ledger keeps it."""

    job_id: str
    identity: str  # who asked: "alice", "key1", "http:127.0.0.1", "p2p:ab12…"
    engine: str
    model_ref: str | None
    session_id: str | None
    correlation_id: str | None
    priority: str  # "interactive" | "batch"
    outcome: str  # its finish reason, or "error"
    error_code: str | None
    error_message: str | None
    tokens_in: int
    tokens_out: int
    queue_ms: float
    decode_ms: float
    ttft_ms: float | None
    admitted_at: float  # unix time
    ended_at: float
    params: dict[str, Any]  # redacted: never the prompt
    transcript: dict[str, Any] | None = None


@dataclass(frozen=True)
class Artifact:
    """A spec 002 artifact, or a job's record read as one (kind `job`)."""

    id: str  # "sha256:<hex>" of its kind and content; a job's record: the job id
    kind: str
    content: Any
    tags: list[str] = field(default_factory=list)
    lineage: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0


def day_of(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d")


def artifact_id(kind: str, content: Any) -> str:
    """Content-addressed: the same kind and content give the same id, whatever the key order."""
    canonical = json.dumps(
        {"kind": kind, "content": content}, sort_keys=True, separators=(",", ":")
    )
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def job_row(record: JobRecord) -> tuple[Any, ...]:
    """A record as the jobs table's columns. An odd value in params or the transcript (an
    enum, a path) is kept as its text rather than losing the record."""
    transcript = record.transcript
    return (
        record.job_id, record.identity, day_of(record.ended_at), record.engine,
        record.model_ref, record.session_id, record.correlation_id, record.priority,
        record.outcome, record.error_code, record.error_message, record.tokens_in,
        record.tokens_out, record.queue_ms, record.decode_ms, record.ttft_ms,
        record.admitted_at, record.ended_at, json.dumps(record.params, default=str),
        json.dumps(transcript, default=str) if transcript is not None else None,
    )  # fmt: skip


def record_of(row: sqlite3.Row) -> JobRecord:
    values = {key: row[key] for key in row.keys() if key != "day"}  # noqa: SIM118
    values["params"] = json.loads(values["params"])
    values["transcript"] = (
        json.loads(values["transcript"]) if values["transcript"] is not None else None
    )
    return JobRecord(**values)
