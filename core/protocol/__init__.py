"""Wire models of specs 000, 001, 002, 004 and the error taxonomy. Depends on pydantic only.

The shared vocabulary is importable from here: messages and sampling, the error taxonomy,
job events and the snapshots every face serves. Each dialect's own wire models stay in its
module (`openai`, `ollama`, `orchestrator`, `p2p`), for the face that speaks it.
"""

from .common import ChatMessage, SamplingParams, without_oldest_turn
from .errors import ErrorKind, InferError
from .events import Admitted, Finished, JobEvent, TokenText
from .host_api import AddEngineRequest
from .shares import Priority, UsageDay, UsageReport, UserLimits, UserShare
from .snapshots import (
    EngineParameters,
    EngineState,
    EngineStatus,
    FinishReason,
    LibraryEntry,
    LiveJob,
    MemoryUsage,
    MetricsSnapshot,
    Percentiles,
    PoolState,
    QueueEntry,
    QueueSnapshot,
    SlotSnapshot,
    SnapshotKind,
    TimingStats,
)

__all__ = [
    "AddEngineRequest",
    "Admitted",
    "ChatMessage",
    "EngineParameters",
    "EngineState",
    "EngineStatus",
    "ErrorKind",
    "FinishReason",
    "Finished",
    "InferError",
    "JobEvent",
    "LibraryEntry",
    "LiveJob",
    "MemoryUsage",
    "MetricsSnapshot",
    "Percentiles",
    "PoolState",
    "Priority",
    "QueueEntry",
    "QueueSnapshot",
    "SamplingParams",
    "SlotSnapshot",
    "SnapshotKind",
    "TimingStats",
    "TokenText",
    "UsageDay",
    "UsageReport",
    "UserLimits",
    "UserShare",
    "without_oldest_turn",
]
