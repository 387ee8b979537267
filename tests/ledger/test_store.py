"""Issue 37 §5, the ledger's store: a record per job that survives a kill once committed, sums
per identity and UTC day, content-addressed artifacts (OC-CTRL-2065, 2066), a job's record as
an artifact (OC-CTRL-2067), bounded retention."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import textwrap
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from infertui.core.ledger import JobRecord, Ledger, artifact_id
from infertui.core.ledger.store import DAY_S, SCHEMA_VERSION

NOON = 20_000 * DAY_S + 12 * 3600  # a fixed day, at noon UTC


def job(n: int, who: str = "alice", *, at: float = NOON, outcome: str = "stop") -> JobRecord:
    return JobRecord(
        job_id=f"job-{who}-{n}", identity=who, engine="m", model_ref="m.gguf",
        session_id="s1", correlation_id=f"cid-{n}", priority="interactive", outcome=outcome,
        error_code="INTERNAL" if outcome == "error" else None,
        error_message="boom" if outcome == "error" else None, tokens_in=10, tokens_out=20,
        queue_ms=1.5, decode_ms=30.0, ttft_ms=4.0, admitted_at=at - 1, ended_at=at,
        params={"max_tokens": 20, "temperature": 0.8, "seed": None},
        transcript={"started": {"queue_position": 0}, "end": {"tokens_out": 20}},
    )  # fmt: skip


def test_a_record_comes_back_whole(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path / "ledger.sqlite", retention_days=0)
    ledger.record(job(1))
    assert ledger.flush()
    assert ledger.jobs() == [job(1)]
    ledger.close()


def test_the_file_is_wal_with_a_schema_version(tmp_path: Path) -> None:
    Ledger.open(tmp_path / "ledger.sqlite").close()
    with sqlite3.connect(tmp_path / "ledger.sqlite") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()


def open_at_once(path: Path, hosts: int) -> list[sqlite3.Error]:
    """`hosts` threads open the ledger at `path` at the same moment: what each raised."""
    together, failures = threading.Barrier(hosts), []

    def open_one() -> None:
        together.wait()
        try:
            Ledger.open(path).close()
        except sqlite3.Error as err:
            failures.append(err)

    openers = [threading.Thread(target=open_one) for _ in range(hosts)]
    for opener in openers:
        opener.start()
    for opener in openers:
        opener.join()
    return failures


def test_hosts_that_open_one_ledger_at_once_all_open_it(tmp_path: Path) -> None:
    """Two hosts started together (two GPUs, one data folder) open the same new file at
    once: each waits for the other's switch to WAL and schema, where SQLite said "database
    is locked" at once and the host did not start (12 of 120 opens here before)."""
    for trial in range(10):
        path = tmp_path / f"ledger-{trial}.sqlite"
        assert open_at_once(path, 4) == []
        check = sqlite3.connect(path)
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        check.close()


def test_usage_sums_come_without_float_noise(tmp_path: Path) -> None:
    """An audit read `"decode_ms": 286.20000000000005` in /v1/host/usage: sums to 0.1 ms."""
    ledger = Ledger.open(tmp_path / "ledger.sqlite", retention_days=0)
    for n, ms in enumerate((0.1, 0.2)):
        ledger.record(replace(job(n), decode_ms=ms, queue_ms=ms))
    ledger.flush()
    [row] = ledger.usage()
    assert row.decode_ms == row.queue_ms == 0.3


def test_usage_sums_each_identity_per_utc_day_with_its_failures(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path / "ledger.sqlite", retention_days=0)
    for n in range(3):
        ledger.record(job(n, "alice"))
    ledger.record(job(9, "alice", at=NOON + DAY_S, outcome="error"))
    ledger.record(job(1, "bob"))
    ledger.flush()
    rows = ledger.usage()
    assert [(r.day, r.identity, r.jobs, r.failures) for r in rows] == [
        ("2024-10-04", "alice", 3, 0),
        ("2024-10-04", "bob", 1, 0),
        ("2024-10-05", "alice", 1, 1),
    ]
    assert rows[0].tokens_in == 30 and rows[0].tokens_out == 60 and rows[0].decode_ms == 90.0
    assert [r.identity for r in ledger.usage(since="2024-10-05")] == ["alice"]
    assert [r.identity for r in ledger.usage(until="2024-10-04", identity="bob")] == ["bob"]
    assert [(r.day, r.identity) for r in ledger.usage(until="2024-10-04", identity="alice")] == [
        ("2024-10-04", "alice")
    ]
    assert ledger.tokens_since("alice", NOON + 1) == 30
    ledger.close()


def test_artifacts_are_content_addressed_and_the_first_is_kept(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path / "ledger.sqlite")
    first = ledger.put_artifact({"b": 1, "a": [1, 2]}, kind="plan", tags=["x"], meta={"by": "a"})
    again = ledger.put_artifact({"a": [1, 2], "b": 1}, kind="plan", tags=["y"])
    assert first.id == again.id == artifact_id("plan", {"a": [1, 2], "b": 1})
    assert again.tags == ["x"] and again.meta == {"by": "a"}
    assert ledger.put_artifact({"a": [1, 2], "b": 1}, kind="summary").id != first.id
    child = ledger.put_artifact("diff text", kind="diff", lineage=[first.id])
    assert ledger.artifact(child.id) == child and child.lineage == [first.id]
    assert ledger.artifact("sha256:nothing") is None
    ledger.close()


def test_a_jobs_record_reads_as_an_artifact_of_kind_job(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path / "ledger.sqlite", retention_days=0)
    ledger.record(job(1, outcome="error"))
    ledger.flush()
    artifact = ledger.artifact("job-alice-1")
    assert artifact is not None and artifact.kind == "job"
    assert artifact.content["error_message"] == "boom" and artifact.tags == ["alice", "m", "error"]
    ledger.close()


def test_retention_deletes_old_rows_and_zero_keeps_everything(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path / "ledger.sqlite", retention_days=7)
    ledger.record(job(1, at=NOON))
    ledger.record(job(2, at=NOON + 30 * DAY_S))
    ledger.flush()
    assert ledger.prune(now=NOON + 31 * DAY_S) == 1
    assert [r.job_id for r in ledger.jobs()] == ["job-alice-2"]
    ledger.close()
    forever = Ledger.open(tmp_path / "forever.sqlite", retention_days=0)
    forever.record(job(1, at=NOON))
    forever.flush()
    assert forever.prune(now=NOON + 9999 * DAY_S) == 0 and len(forever.jobs()) == 1
    forever.close()


def test_an_explicit_prune_leaves_the_hourly_one_on_its_schedule(tmp_path: Path) -> None:
    # a prune at a time long past must not make the next batch prune at today's date
    ledger = Ledger.open(tmp_path / "ledger.sqlite", retention_days=7)
    ledger.record(job(1))
    ledger.flush()
    assert ledger.prune(now=NOON) == 0
    ledger.record(job(2))
    ledger.flush()
    assert len(ledger.jobs()) == 2
    ledger.close()


def test_a_record_that_cannot_be_written_costs_only_itself(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = Ledger.open(tmp_path / "ledger.sqlite", retention_days=0)
    circular = job(2)
    circular.params["self"] = circular.params  # json cannot encode it
    too_big = JobRecord(**{**job(3).__dict__, "tokens_in": 2**70})  # sqlite cannot bind it
    odd = JobRecord(**{**job(4).__dict__, "params": {"path": tmp_path}})  # kept as its text
    with caplog.at_level(logging.ERROR, logger="infertui.core.ledger"):
        for record in (job(1), circular, too_big, odd, job(5)):
            ledger.record(record)
        assert not ledger.flush()  # two were lost
    assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 2
    kept = {r.job_id: r for r in ledger.jobs()}
    assert sorted(kept) == ["job-alice-1", "job-alice-4", "job-alice-5"]
    assert kept["job-alice-4"].params == {"path": str(tmp_path)}
    ledger.record(job(6))
    assert ledger.flush()  # the writer goes on
    assert ledger.put_artifact([1], kind="plan").content == [1]
    ledger.close()


def test_records_from_many_threads_are_all_kept(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path / "ledger.sqlite", retention_days=0)

    def send(who: str) -> None:
        for n in range(2500):
            ledger.record(job(n, who))

    threads = [threading.Thread(target=send, args=(f"t{k}",)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert ledger.flush(timeout=30)
    assert sum(row.jobs for row in ledger.usage()) == 10_000
    ledger.close()


def test_a_killed_host_loses_no_committed_record(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_store import job
        from infertui.core.ledger import Ledger
        ledger = Ledger.open(Path({str(path)!r}), retention_days=0)
        for n in range(1000):
            ledger.record(job(n))
        ledger.flush()
        print("flushed", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "flushed" and run.returncode == -9, run.stderr
    reopened = Ledger.open(path, retention_days=0)
    assert sum(row.jobs for row in reopened.usage()) == 1000
    reopened.close()


def test_close_is_idempotent_and_a_late_record_is_dropped(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path / "ledger.sqlite", retention_days=0)
    ledger.record(job(1))
    ledger.close()
    ledger.close()
    ledger.record(job(2))  # after close: dropped, never raised
    assert ledger.flush()
    with pytest.raises(RuntimeError):  # at once, not after waiting on a writer that is gone
        ledger.put_artifact({"a": 1}, kind="plan")
    reopened = Ledger.open(tmp_path / "ledger.sqlite", retention_days=0)
    assert [r.job_id for r in reopened.jobs()] == ["job-alice-1"]  # committed at close
    reopened.close()
