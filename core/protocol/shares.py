"""Sharing one host between people: the class of a job, and what each identity is doing and
has used, as every face shows it (issue 37)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from .snapshots import _Frozen


class Priority(StrEnum):
    """Interactive work (a person waiting on the reply) takes a free slot before batch work;
    neither stops the other's running jobs (no preemption)."""

    INTERACTIVE = "interactive"
    BATCH = "batch"


def priority_of(service_tier: str | None = None, rank: int | None = None) -> Priority | None:
    """What an OpenAI `service_tier` ("flex" is batch) or vLLM's `priority` (lower runs
    first; above 0 is batch) says; None when neither says anything."""
    if service_tier == "flex" or (rank is not None and rank > 0):
        return Priority.BATCH
    if service_tier is not None or rank is not None:
        return Priority.INTERACTIVE
    return None


class UserLimits(_Frozen):
    """What one identity may do; None: no limit."""

    weight: float = 1.0
    running: int | None = None
    queued: int | None = None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    tokens_per_day: int | None = None


class UserShare(_Frozen):
    """One identity now: its jobs on every engine and its use of its budgets."""

    identity: str
    running: int
    queued: int
    requests_last_minute: int
    tokens_last_minute: int
    tokens_today: int = Field(description="tokens in and out since 00:00 UTC")
    limits: UserLimits


class UsageDay(_Frozen):
    """One identity's jobs on one UTC day, from the ledger."""

    day: str
    identity: str
    jobs: int
    failures: int
    tokens_in: int
    tokens_out: int
    queue_ms: float
    decode_ms: float


class UsageReport(_Frozen):
    """`GET /v1/host/usage`: the ledger per identity and day, and who is on the host now."""

    days: tuple[UsageDay, ...] = ()
    users: tuple[UserShare, ...] = ()
    ledger: bool = Field(True, description="false: this host keeps no ledger (only `users`)")
