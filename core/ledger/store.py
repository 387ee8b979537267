"""The ledger: an SQLite file that keeps a record of every job and spec 002's artifacts.

Written by one thread of its own, in batches: `record` only queues a record (the host calls it
on its event loop, once per job), and the writer gathers what came within `flush_interval_s`
(or `max_batch` records) into one transaction. WAL mode with `synchronous=NORMAL`: a killed
process loses no committed transaction (a power cut may lose the last ones). Reads go through
a connection of their own, from any thread. Records older than `retention_days` are deleted
at open and about once an hour.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
PRUNE_EVERY_S = 3600.0
DAY_S = 86400.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    identity TEXT NOT NULL,
    day TEXT NOT NULL,
    engine TEXT NOT NULL,
    model_ref TEXT,
    session_id TEXT,
    correlation_id TEXT,
    priority TEXT NOT NULL,
    outcome TEXT NOT NULL,
    error_code TEXT,
    error_message TEXT,
    tokens_in INTEGER NOT NULL,
    tokens_out INTEGER NOT NULL,
    queue_ms REAL NOT NULL,
    decode_ms REAL NOT NULL,
    ttft_ms REAL,
    admitted_at REAL NOT NULL,
    ended_at REAL NOT NULL,
    params TEXT NOT NULL,
    transcript TEXT
);
CREATE INDEX IF NOT EXISTS jobs_by_day ON jobs (day, identity);
CREATE INDEX IF NOT EXISTS jobs_by_identity ON jobs (identity, ended_at);
CREATE TABLE IF NOT EXISTS artifacts (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    content TEXT NOT NULL,
    tags TEXT NOT NULL,
    lineage TEXT NOT NULL,
    meta TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS artifacts_by_age ON artifacts (created_at);
"""
_JOB_COLUMNS = (
    "job_id", "identity", "day", "engine", "model_ref", "session_id", "correlation_id",
    "priority", "outcome", "error_code", "error_message", "tokens_in", "tokens_out", "queue_ms",
    "decode_ms", "ttft_ms", "admitted_at", "ended_at", "params", "transcript",
)  # fmt: skip
_INSERT_JOB = (
    f"INSERT OR REPLACE INTO jobs ({', '.join(_JOB_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(_JOB_COLUMNS))})"
)


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
class UsageRow:
    """One identity on one UTC day."""

    day: str
    identity: str
    jobs: int
    failures: int
    tokens_in: int
    tokens_out: int
    queue_ms: float
    decode_ms: float


@dataclass(frozen=True)
class Artifact:
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


_STOP = object()


class Ledger:
    def __init__(
        self, path: Path, retention_days: int, flush_interval_s: float, max_batch: int
    ) -> None:
        self.path = path
        self.retention_days = retention_days
        self._interval = flush_interval_s
        self._max_batch = max_batch
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = _connect(path)
        self._writer.executescript(_SCHEMA)
        self._writer.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self._reader = _connect(path)
        self._read_lock = threading.Lock()
        self._pruned_at = 0.0
        self._prune(time.time())
        self._thread = threading.Thread(target=self._write_loop, name="ledger", daemon=True)
        self._thread.start()

    @classmethod
    def open(
        cls,
        path: Path,
        *,
        retention_days: int = 90,
        flush_interval_s: float = 0.2,
        max_batch: int = 512,
    ) -> Ledger:
        return cls(path, retention_days, flush_interval_s, max_batch)

    # ---- writing -----------------------------------------------------------------------------

    def record(self, record: JobRecord) -> None:
        """Queue a job's record (any thread, never blocks): the writer commits it shortly."""
        if self._closed:
            log.debug("ledger closed: record of %s dropped", record.job_id)
            return
        self._inbox.put(record)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every record given before this call is committed."""
        if self._closed:
            return True
        done: Future[None] = Future()
        self._inbox.put(done)
        try:
            done.result(timeout)
        except TimeoutError:
            return False
        return True

    def put_artifact(
        self,
        content: Any,
        *,
        kind: str,
        tags: Sequence[str] = (),
        lineage: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
    ) -> Artifact:
        """Keep an artifact; one with the same kind and content is kept once (the first)."""
        artifact = Artifact(
            artifact_id(kind, content), kind, content, list(tags), list(lineage),
            dict(meta or {}), time.time(),
        )  # fmt: skip
        done: Future[None] = Future()
        self._inbox.put((artifact, done))
        done.result(30)
        kept = self.artifact(artifact.id)
        assert kept is not None
        return kept

    def _write_loop(self) -> None:
        while True:
            batch = [self._inbox.get()]
            deadline = time.monotonic() + self._interval
            while len(batch) < self._max_batch and batch[-1] is not _STOP:
                wait = deadline - time.monotonic()
                if wait <= 0 or isinstance(batch[-1], Future | tuple):
                    break  # someone waits on it (a flush, an artifact, a prune): commit now
                try:
                    batch.append(self._inbox.get(timeout=wait))
                except queue.Empty:
                    break
            self._write(batch)
            if batch[-1] is _STOP:
                return
            if time.time() - self._pruned_at > PRUNE_EVERY_S:
                self._prune(time.time())

    def _write(self, batch: list[Any]) -> None:
        jobs = [_job_row(item) for item in batch if isinstance(item, JobRecord)]
        artifacts = [item for item in batch if isinstance(item, tuple) and len(item) == 2]
        for item in batch:
            if isinstance(item, tuple) and len(item) == 3:  # ("prune", now, done)
                item[2].set_result(self._prune(item[1]))
        try:
            with self._writer:
                if jobs:
                    self._writer.executemany(_INSERT_JOB, jobs)
                for artifact, _ in artifacts:
                    self._writer.execute(
                        "INSERT OR IGNORE INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (artifact.id, artifact.kind, json.dumps(artifact.content),
                         json.dumps(artifact.tags), json.dumps(artifact.lineage),
                         json.dumps(artifact.meta), artifact.created_at),
                    )  # fmt: skip
        except (sqlite3.Error, TypeError, ValueError) as exc:  # a full disk, an odd value
            log.error("ledger: %d records not written: %s", len(batch), exc)
            for _, done in artifacts:
                done.set_exception(exc)
            artifacts = []
        for item in batch:
            if isinstance(item, Future):
                item.set_result(None)
        for _, done in artifacts:
            done.set_result(None)

    def prune(self, now: float | None = None) -> int:
        """Delete jobs and artifacts older than `retention_days` (0: keep all); the number of
        rows deleted. The writer thread does it."""
        done: Future[int] = Future()
        self._inbox.put(("prune", time.time() if now is None else now, done))
        return done.result(30)

    def _prune(self, now: float) -> int:
        self._pruned_at = now
        if self.retention_days <= 0:
            return 0
        before = now - self.retention_days * DAY_S
        with self._writer:
            jobs = self._writer.execute("DELETE FROM jobs WHERE ended_at < ?", (before,))
            kept = self._writer.execute("DELETE FROM artifacts WHERE created_at < ?", (before,))
        return jobs.rowcount + kept.rowcount

    def close(self) -> None:
        """Commit what was recorded, stop the writer, close the file (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._inbox.put(_STOP)
        self._thread.join(30)
        self._writer.close()
        with self._read_lock:
            self._reader.close()

    # ---- reading -----------------------------------------------------------------------------

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._read_lock:
            return self._reader.execute(sql, args).fetchall()

    def usage(
        self, *, since: str | None = None, until: str | None = None, identity: str | None = None
    ) -> list[UsageRow]:
        """Per identity and UTC day (both inclusive), by day then identity."""
        where, args = ["day >= ?", "day <= ?"], [since or "", until or "9999"]
        if identity is not None:
            where.append("identity = ?")
            args.append(identity)
        rows = self._read(
            "SELECT day, identity, COUNT(*), SUM(outcome = 'error'), SUM(tokens_in), "
            "SUM(tokens_out), SUM(queue_ms), SUM(decode_ms) FROM jobs "
            f"WHERE {' AND '.join(where)} GROUP BY day, identity ORDER BY day, identity",
            args,
        )
        return [UsageRow(*row) for row in rows]

    def tokens_since(self, identity: str, since: float) -> int:
        rows = self._read(
            "SELECT COALESCE(SUM(tokens_in + tokens_out), 0) FROM jobs "
            "WHERE identity = ? AND ended_at >= ?",
            (identity, since),
        )
        return int(rows[0][0])

    def jobs(self, *, identity: str | None = None, limit: int = 100) -> list[JobRecord]:
        """The latest jobs, newest first."""
        where, args = ("WHERE identity = ?", [identity]) if identity else ("", [])
        rows = self._read(
            f"SELECT * FROM jobs {where} ORDER BY ended_at DESC LIMIT ?", [*args, limit]
        )
        return [_record_of(row) for row in rows]

    def artifact(self, artifact_id: str) -> Artifact | None:
        """An artifact, or a job's record (kind `job`) under its job id; None if neither."""
        rows = self._read("SELECT * FROM artifacts WHERE id = ?", (artifact_id,))
        if rows:
            row = rows[0]
            return Artifact(
                row["id"], row["kind"], json.loads(row["content"]), json.loads(row["tags"]),
                json.loads(row["lineage"]), json.loads(row["meta"]), row["created_at"],
            )  # fmt: skip
        rows = self._read("SELECT * FROM jobs WHERE job_id = ?", (artifact_id,))
        if not rows:
            return None
        record = _record_of(rows[0])
        return Artifact(
            record.job_id, "job", asdict(record),
            [record.identity, record.engine, record.outcome], [], {}, record.ended_at,
        )  # fmt: skip


def _connect(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, check_same_thread=False, timeout=10)
    connection.row_factory = sqlite3.Row
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = NORMAL")
    return connection


def _job_row(record: JobRecord) -> tuple[Any, ...]:
    values = asdict(record)
    values["day"] = day_of(record.ended_at)
    values["params"] = json.dumps(record.params)
    values["transcript"] = json.dumps(record.transcript) if record.transcript is not None else None
    return tuple(values[column] for column in _JOB_COLUMNS)


def _record_of(row: sqlite3.Row) -> JobRecord:
    values = {key: row[key] for key in row.keys() if key != "day"}  # noqa: SIM118
    values["params"] = json.loads(values["params"])
    values["transcript"] = json.loads(values["transcript"]) if values["transcript"] else None
    return JobRecord(**values)
