"""The usage ledger: every job's record and spec 002's artifacts, in one SQLite file."""

from .records import Artifact, JobRecord, artifact_id, day_of
from .store import Ledger

__all__ = ["Artifact", "JobRecord", "Ledger", "artifact_id", "day_of"]
