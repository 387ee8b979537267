"""The usage ledger: every job's record and spec 002's artifacts, in one SQLite file."""

from .store import Artifact, JobRecord, Ledger, UsageRow, artifact_id

__all__ = ["Artifact", "JobRecord", "Ledger", "UsageRow", "artifact_id"]
