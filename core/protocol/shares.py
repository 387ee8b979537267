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


class SessionBudget(_Frozen):
    """Spec 002 §10 (OC-CTRL-2068): what one session of an identity may use in all; unset:
    no limit. Tokens count in and out; time is decode time."""

    tokens: int | None = Field(None, ge=1, description="prompt and generated tokens in all")
    time_ms: int | None = Field(None, ge=1, description="decode time in all, in ms")


class BudgetLeft(_Frozen):
    """A session's budget as it stands, in SSE `metrics` frames and X-Budget-* headers."""

    session_id: str
    tokens_left: int | None = None
    time_left_ms: int | None = None

    def headers(self) -> dict[str, str]:
        out = {}
        if self.tokens_left is not None:
            out["x-budget-tokens-remaining"] = str(self.tokens_left)
        if self.time_left_ms is not None:
            out["x-budget-time-remaining-ms"] = str(self.time_left_ms)
        return out


class UserShare(_Frozen):
    """One identity now: its jobs on every engine and its use of its budgets."""

    identity: str
    running: int
    queued: int
    requests_last_minute: int
    tokens_last_minute: int
    tokens_today: int = Field(description="tokens in and out since 00:00 UTC")
    jobs_total: int = Field(0, description="jobs ended since the host started")
    tokens_total: int = Field(0, description="their tokens in and out")
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
