"""The ledger: an SQLite file that keeps a record of every job and spec 002's artifacts.

Written by one thread of its own, in batches: `record` only queues a record (the host calls it
on its event loop, once per job), and the writer gathers what came within `flush_interval_s`
(or `max_batch` records) into one transaction. WAL mode with `synchronous=NORMAL`: a killed
process loses no committed transaction (a power cut may lose the last ones). Reads go through
a connection of their own, from any thread. Records older than `retention_days` are deleted
at open and about once an hour. Nothing the writer meets stops it: a record it cannot write is
logged and dropped, since the host must never stop for its ledger.
"""

from __future__ import annotations

import json
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..protocol.shares import UsageDay
from .records import Artifact, JobRecord, artifact_id, job_row, record_of

log = logging.getLogger(__name__)

_USAGE_FIELDS = (
    "day", "identity", "jobs", "failures", "tokens_in", "tokens_out", "queue_ms", "decode_ms",
)  # fmt: skip

SCHEMA_VERSION = 1  # PRAGMA user_version: a later schema migrates from it
PRUNE_EVERY_S = 3600.0
DAY_S = 86400.0
BUSY_TIMEOUT_S = 10.0
WAIT_S = 30.0  # the longest put_artifact or prune waits on the writer

# IMMEDIATE: a deferred BEGIN reads the schema first, and SQLite refuses at once (no busy
# wait) a reader's step up to writing while another host writes: two hosts started together.
_SCHEMA = f"""
BEGIN IMMEDIATE;
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
CREATE INDEX IF NOT EXISTS jobs_by_end ON jobs (ended_at);
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
PRAGMA user_version = {SCHEMA_VERSION};
COMMIT;
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
_INSERT_ARTIFACT = "INSERT OR IGNORE INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?)"


# What the writer is asked besides records; each ends the batch it arrives in, so that
# whoever waits on it is answered at once.
@dataclass
class _Flush:
    done: Future[bool]


@dataclass
class _Put:
    row: tuple[Any, ...]
    done: Future[None]


@dataclass
class _Prune:
    now: float
    done: Future[int]


class _Stop:
    pass


_Command = _Flush | _Put | _Prune | _Stop


class Ledger:
    """The ledger's file: `open` it, `record` jobs, read sums, keep artifacts, `close`."""

    def __init__(
        self, path: Path, retention_days: int, flush_interval_s: float, max_batch: int
    ) -> None:
        self.path = path
        self.retention_days = retention_days
        self._interval = flush_interval_s
        self._max_batch = max(1, max_batch)
        self._inbox: queue.SimpleQueue[JobRecord | _Command] = queue.SimpleQueue()
        self._closed = False
        self._lost = 0  # records not written since the last flush (the writer's own)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = _connect(path)
        version = self._writer.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            log.warning(
                "ledger %s has schema %d, newer than this infertui's %d: used as it is",
                path, version, SCHEMA_VERSION,
            )  # fmt: skip
        else:
            self._writer.executescript(_SCHEMA)
        self._reader = _connect(path)
        self._reader.execute("PRAGMA query_only = ON")
        self._read_lock = threading.Lock()
        self._prune_logged(time.time())
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
        """Queue a job's record (any thread, never blocks nor raises): the writer commits it
        within `flush_interval_s`. Encoding waits for the writer, off the caller's loop."""
        if self._closed:
            log.debug("ledger closed: record of %s dropped", record.job_id)
            return
        self._inbox.put(record)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every record given before this call is committed; False if that took
        longer than `timeout` or some record since the last flush could not be written."""
        if self._closed:
            return True
        done: Future[bool] = Future()
        self._inbox.put(_Flush(done))
        try:
            return done.result(timeout)
        except TimeoutError:
            return False

    def put_artifact(
        self,
        content: Any,
        *,
        kind: str,
        tags: Sequence[str] = (),
        lineage: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
    ) -> Artifact:
        """Keep an artifact, committed when this returns; one with the same kind and content
        is kept once (the first, with its tags and meta). Raises TypeError for content that
        is not JSON, sqlite3.Error if the write failed, RuntimeError once closed."""
        self._open_or_raise()
        row = (
            artifact_id(kind, content), kind, json.dumps(content), json.dumps(list(tags)),
            json.dumps(list(lineage)), json.dumps(dict(meta or {})), time.time(),
        )  # fmt: skip
        done: Future[None] = Future()
        self._inbox.put(_Put(row, done))
        done.result(WAIT_S)
        kept = self.artifact(row[0])
        assert kept is not None  # committed above, and the reader sees every commit
        return kept

    def prune(self, now: float | None = None) -> int:
        """Delete jobs and artifacts older than `retention_days` (0: keep all) on the writer
        thread; the number of rows deleted. The hourly prune keeps its own schedule."""
        self._open_or_raise()
        done: Future[int] = Future()
        self._inbox.put(_Prune(time.time() if now is None else now, done))
        return done.result(WAIT_S)

    def close(self) -> None:
        """Commit what was recorded, stop the writer, close the file (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._inbox.put(_Stop())
        self._thread.join(WAIT_S)
        if self._thread.is_alive():  # a stuck disk: leave its connection to the daemon thread
            log.warning("ledger: writer still busy after %.0f s; closing without it", WAIT_S)
        else:
            self._writer.close()
        with self._read_lock:
            self._reader.close()

    def _open_or_raise(self) -> None:
        if self._closed:
            raise RuntimeError(f"ledger {self.path} is closed")

    def _write_loop(self) -> None:
        next_prune = time.monotonic() + PRUNE_EVERY_S
        stopping = False
        while True:
            wait = 0.0 if stopping else max(0.0, next_prune - time.monotonic())
            batch = self._gather(wait, draining=stopping)
            if not batch and stopping:
                return  # drained: what came before close (or raced it) is committed
            if batch and isinstance(batch[-1], _Stop):
                stopping = True
                batch.pop()
            if batch:
                try:
                    self._commit(batch)
                except Exception:  # a bug here must not cost the host its ledger
                    log.exception("ledger: batch of %d not handled", len(batch))
            if not stopping and time.monotonic() >= next_prune:
                self._prune_logged(time.time())
                next_prune = time.monotonic() + PRUNE_EVERY_S

    def _gather(self, wait: float, *, draining: bool) -> list[JobRecord | _Command]:
        """The next batch: its first item (waiting up to `wait` s), then records until
        `max_batch` or `flush_interval_s`, or only those already queued when `draining`;
        a command ends it."""
        try:
            first = self._inbox.get(timeout=wait) if wait > 0 else self._inbox.get_nowait()
        except queue.Empty:
            return []
        batch = [first]
        deadline = time.monotonic() + self._interval
        while len(batch) < self._max_batch and isinstance(batch[-1], JobRecord):
            left = deadline - time.monotonic()
            try:
                if draining:
                    batch.append(self._inbox.get_nowait())
                elif left > 0:
                    batch.append(self._inbox.get(timeout=left))
                else:
                    break
            except queue.Empty:
                break
        return batch

    def _commit(self, batch: list[JobRecord | _Command]) -> None:
        """Write a batch's records (and an artifact that ends it) in one transaction, then
        answer the command that ends it. Should the transaction fail, each row is tried in
        one of its own, so that one odd row (an int too big, a type sqlite cannot bind)
        costs only itself."""
        command = batch[-1] if not isinstance(batch[-1], JobRecord) else None
        rows: list[tuple[Any, ...]] = []
        for item in batch:
            if isinstance(item, JobRecord):
                try:
                    rows.append(job_row(item))
                except Exception:  # a circular params dict, say: that record only
                    log.exception("ledger: record of %s not kept", item.job_id)
                    self._lost += 1
        put = command if isinstance(command, _Put) else None
        writes = [(_INSERT_JOB, row) for row in rows]
        if put is not None:
            writes.append((_INSERT_ARTIFACT, put.row))
        failed: dict[int, Exception] = {}
        try:
            with self._writer:
                if rows:
                    self._writer.executemany(_INSERT_JOB, rows)
                if put is not None:
                    self._writer.execute(_INSERT_ARTIFACT, put.row)
        except Exception:
            for n, (sql, row) in enumerate(writes):
                try:
                    with self._writer:
                        self._writer.execute(sql, row)
                except Exception as exc:  # a full disk, a file locked past the busy timeout
                    failed[n] = exc
            if failed:
                first = next(iter(failed.values()))
                log.error("ledger: %d of %d rows not written: %s", len(failed), len(writes), first)
                self._lost += sum(1 for n in failed if n < len(rows))
        if put is not None:
            if (error := failed.get(len(rows))) is not None:
                put.done.set_exception(error)
            else:
                put.done.set_result(None)
        if isinstance(command, _Flush):
            command.done.set_result(self._lost == 0)
            self._lost = 0
        elif isinstance(command, _Prune):
            try:
                command.done.set_result(self._prune(command.now))
            except Exception as exc:
                command.done.set_exception(exc)

    def _prune(self, now: float) -> int:
        if self.retention_days <= 0:
            return 0
        before = now - self.retention_days * DAY_S
        with self._writer:
            jobs = self._writer.execute("DELETE FROM jobs WHERE ended_at < ?", (before,))
            kept = self._writer.execute("DELETE FROM artifacts WHERE created_at < ?", (before,))
        return jobs.rowcount + kept.rowcount

    def _prune_logged(self, now: float) -> None:
        """The scheduled prune: a failure waits for the next one."""
        try:
            if deleted := self._prune(now):
                log.info("ledger: %d rows past %d days deleted", deleted, self.retention_days)
        except sqlite3.Error as exc:
            log.warning("ledger: prune failed: %s", exc)

    # ---- reading -----------------------------------------------------------------------------

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._read_lock:
            return self._reader.execute(sql, args).fetchall()

    def usage(
        self, *, since: str | None = None, until: str | None = None, identity: str | None = None
    ) -> list[UsageDay]:
        """Per identity and UTC day (`since` and `until` inclusive, "YYYY-MM-DD"), by day
        then identity."""
        where, args = ["day >= ?", "day <= ?"], [since or "", until or "9999"]
        if identity is not None:
            where.append("identity = ?")
            args.append(identity)
        rows = self._read(
            "SELECT day, identity, COUNT(*), SUM(outcome = 'error'), SUM(tokens_in), "
            "SUM(tokens_out), ROUND(SUM(queue_ms), 1), ROUND(SUM(decode_ms), 1) FROM jobs "
            f"WHERE {' AND '.join(where)} GROUP BY day, identity ORDER BY day, identity",
            args,
        )
        return [UsageDay(**dict(zip(_USAGE_FIELDS, row, strict=True))) for row in rows]

    def tokens_since(self, identity: str, since: float) -> int:
        """Tokens in and out of `identity`'s jobs that ended at unix time `since` or later."""
        rows = self._read(
            "SELECT COALESCE(SUM(tokens_in + tokens_out), 0) FROM jobs "
            "WHERE identity = ? AND ended_at >= ?",
            (identity, since),
        )
        return int(rows[0][0])

    def jobs(self, *, identity: str | None = None, limit: int = 100) -> list[JobRecord]:
        """The latest jobs, newest first."""
        where, args = ("WHERE identity = ?", [identity]) if identity is not None else ("", [])
        rows = self._read(
            f"SELECT * FROM jobs {where} ORDER BY ended_at DESC LIMIT ?", [*args, limit]
        )
        return [record_of(row) for row in rows]

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
        record = record_of(rows[0])
        return Artifact(
            record.job_id, "job", asdict(record),
            [record.identity, record.engine, record.outcome], [], {}, record.ended_at,
        )  # fmt: skip


def _connect(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, check_same_thread=False, timeout=BUSY_TIMEOUT_S)
    connection.row_factory = sqlite3.Row
    mode = _journal_wal(connection)
    if mode != "wal":  # a file system without shared memory: still correct, only slower
        log.warning("ledger %s: journal mode %s, not WAL", path, mode)
    connection.execute("PRAGMA synchronous = NORMAL")
    return connection


def _journal_wal(connection: sqlite3.Connection) -> str:
    """Switch a new file to WAL, waiting out another host's switch: SQLite answers "locked"
    at once there, without its busy wait. The journal mode it is in after."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            return str(connection.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
