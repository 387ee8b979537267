"""Shares: who is asking, what each identity may do, and what each has used (issue 37).

One per host, shared by its pools. A pool asks it at admission whether an identity may queue
one more job (its queued cap, its requests and tokens per minute, its tokens per day), at each
slot handoff whether it may start one more (its running cap), and tells it when a job is
queued, starts and ends. Token budgets count what jobs really used, in and out, when they
end; a job already admitted is never cut short by them.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..protocol.errors import ErrorKind, InferError
from ..protocol.shares import BudgetLeft, Priority, SessionBudget, UserLimits, UserShare

MINUTE = 60.0
DAY = 86400.0
MAX_NAMED = 256  # identities tracked one by one; beyond, addresses of the past are forgotten
MAX_SESSIONS = 4096  # session budgets kept; beyond, the least recently used is dropped


@dataclass(frozen=True)
class Policy:
    """What one identity may do, and the class of its work when a request names none."""

    limits: UserLimits = field(default_factory=UserLimits)
    priority: Priority = Priority.INTERACTIVE


class _Window:
    """Events of the last minute (time, amount), with their sum."""

    __slots__ = ("events", "total")

    def __init__(self) -> None:
        self.events: deque[tuple[float, int]] = deque()
        self.total = 0

    def add(self, now: float, amount: int) -> None:
        self.used(now)  # what left the minute goes now: a window nobody reads stays small
        self.events.append((now, amount))
        self.total += amount

    def used(self, now: float) -> int:
        events = self.events
        while events and events[0][0] <= now - MINUTE:
            self.total -= events.popleft()[1]
        return self.total

    def frees_in(self, now: float, limit: int) -> float:
        """Seconds until the amount used falls below `limit`."""
        over = self.used(now) - limit + 1
        for at, amount in self.events:
            over -= amount
            if over <= 0:
                return max(at + MINUTE - now, 0.0)
        return 0.0


class _Session:
    """A session's budget: what its ended jobs used, and what its running ones may still."""

    __slots__ = ("budget", "reserved", "used_ms", "used_tokens")

    def __init__(self, budget: SessionBudget) -> None:
        self.budget = budget
        self.used_tokens = 0
        self.reserved = 0  # prompt plus max_tokens of its jobs not ended yet
        self.used_ms = 0.0

    def left(self, session_id: str) -> BudgetLeft:
        tokens, time_ms = self.budget.tokens, self.budget.time_ms
        return BudgetLeft(
            session_id=session_id,
            tokens_left=None if tokens is None else tokens - self.used_tokens - self.reserved,
            time_left_ms=None if time_ms is None else max(0, round(time_ms - self.used_ms)),
        )


class _Use:
    """One identity's jobs now and its use of its budgets."""

    __slots__ = (
        "day", "day_tokens", "jobs_total", "queued", "requests", "running", "tokens",
        "tokens_total",
    )  # fmt: skip

    def __init__(self) -> None:
        self.queued = 0
        self.running = 0
        self.jobs_total = 0
        self.tokens_total = 0
        self.requests = _Window()
        self.tokens = _Window()
        self.day = 0  # the UTC day `day_tokens` counts
        self.day_tokens = 0

    def today(self, now: float) -> int:
        if int(now // DAY) != self.day:
            self.day, self.day_tokens = int(now // DAY), 0
        return self.day_tokens


class Shares:
    def __init__(
        self,
        policies: Mapping[str, Policy] | None = None,
        default: Policy | None = None,
        *,
        interactive_slots: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._policies = dict(policies or {})
        self._default = default or Policy()
        self.interactive_slots = interactive_slots  # slots on each engine batch work never takes
        self._clock = clock
        self._use: dict[str, _Use] = {}
        self._sessions: OrderedDict[tuple[str, str], _Session] = OrderedDict()
        self.forgotten = _Use()  # the totals of identities no longer tracked one by one

    def policy(self, identity: str) -> Policy:
        return self._policies.get(identity, self._default)

    def weight(self, identity: str) -> float:
        return self.policy(identity).limits.weight

    def priority(self, identity: str, asked: Priority | None) -> Priority:
        return asked if asked is not None else self.policy(identity).priority

    def _of(self, identity: str) -> _Use:
        use = self._use.get(identity)
        if use is None:
            if len(self._use) >= MAX_NAMED:
                self._forget_idle()
            use = self._use[identity] = _Use()
        return use

    def _forget_idle(self) -> None:
        """Drop the identities that no limit needs to remember: no jobs, nothing in the last
        minute, and no tokens today that a daily budget would count."""
        now, daily = self._clock(), self._default.limits.tokens_per_day is not None
        for name, use in list(self._use.items()):
            if name in self._policies or use.queued or use.running:
                continue
            if use.requests.used(now) or use.tokens.used(now) or (daily and use.today(now)):
                continue
            self.forgotten.jobs_total += use.jobs_total
            self.forgotten.tokens_total += use.tokens_total
            del self._use[name]

    # ---- what a pool asks ----------------------------------------------------------------------

    def admit(self, identity: str) -> None:
        """Whether `identity` may queue one more job now; else a 429's InferError saying when
        to try again. Counts the request against its requests per minute."""
        limits, use, now = self.policy(identity).limits, self._of(identity), self._clock()
        if limits.queued is not None and use.queued >= limits.queued:
            raise InferError(
                ErrorKind.CLIENT_BUSY,
                f"'{identity}' already has {use.queued} job(s) waiting, its limit; wait for "
                "one to start",
                retry_after_ms=1000,
            )
        if limits.requests_per_minute is not None and (
            use.requests.used(now) >= limits.requests_per_minute
        ):
            wait = use.requests.frees_in(now, limits.requests_per_minute)
            raise InferError(
                ErrorKind.RATE_LIMITED,
                f"'{identity}' has made {limits.requests_per_minute} requests in the last "
                "minute, its limit",
                retry_after_ms=math.ceil(wait * 1000),
            )
        if limits.tokens_per_minute is not None and (
            use.tokens.used(now) >= limits.tokens_per_minute
        ):
            wait = use.tokens.frees_in(now, limits.tokens_per_minute)
            raise InferError(
                ErrorKind.BUDGET_SPENT,
                f"'{identity}' has used its {limits.tokens_per_minute} tokens per minute",
                retry_after_ms=math.ceil(wait * 1000),
            )
        if limits.tokens_per_day is not None and use.today(now) >= limits.tokens_per_day:
            raise InferError(
                ErrorKind.BUDGET_SPENT,
                f"'{identity}' has used its {limits.tokens_per_day} tokens for today (UTC)",
                retry_after_ms=math.ceil((DAY - now % DAY) * 1000),
            )
        use.requests.add(now, 1)

    def set_budget(self, identity: str, session_id: str, budget: SessionBudget) -> None:
        """Give one of the identity's sessions a budget (a new one replaces its limits)."""
        key = (identity, session_id)
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = _Session(budget)
            if len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        session.budget = budget
        self._sessions.move_to_end(key)

    def budget_left(self, identity: str, session_id: str | None) -> BudgetLeft | None:
        """Where a session with a budget stands; None for one without."""
        session = self._sessions.get((identity, session_id or ""))
        return session.left(session_id or "") if session is not None else None

    def reserve(
        self, identity: str, session_id: str | None, prompt_tokens: int, max_tokens: int
    ) -> tuple[int, int]:
        """A job of a session with a budget: its max_tokens, cut to what the budget has left
        after its prompt and the session's running jobs, and the tokens it holds of the
        budget until it ends; else BUDGET_SPENT. A job of no such session keeps its
        max_tokens and holds nothing."""
        session = self._sessions.get((identity, session_id or ""))
        if session is None:
            return max_tokens, 0
        left = session.left(session_id or "")
        if left.time_left_ms == 0:
            raise InferError(
                ErrorKind.BUDGET_SPENT,
                f"session '{session_id}' has used its {session.budget.time_ms} ms of decode time",
            )
        if left.tokens_left is not None:
            if left.tokens_left <= prompt_tokens:
                raise InferError(
                    ErrorKind.BUDGET_SPENT,
                    f"session '{session_id}' has {max(left.tokens_left, 0)} of its "
                    f"{session.budget.tokens} tokens left, not enough for a prompt of "
                    f"{prompt_tokens} and one token of reply",
                )
            max_tokens = min(max_tokens, left.tokens_left - prompt_tokens)
        session.reserved += prompt_tokens + max_tokens
        return max_tokens, prompt_tokens + max_tokens

    def may_start(self, identity: str) -> bool:
        """Whether one more of its jobs may take a slot (its running cap, on all engines)."""
        cap = self.policy(identity).limits.running
        return cap is None or self._of(identity).running < cap

    def queued(self, identity: str) -> None:
        self._of(identity).queued += 1

    def started(self, identity: str) -> None:
        use = self._of(identity)
        use.queued -= 1
        use.running += 1

    def ended(
        self,
        identity: str,
        *,
        started: bool,
        tokens: int,
        session_id: str | None = None,
        reserved: int = 0,
        decode_ms: float = 0.0,
    ) -> None:
        """A job of `identity` ended, having used `tokens` (in and out); in a session with a
        budget, what it `reserved` is given back and what it used is counted."""
        session = self._sessions.get((identity, session_id or "")) if session_id else None
        if session is not None:
            session.reserved -= reserved
            session.used_tokens += tokens
            session.used_ms += decode_ms
        use, now = self._of(identity), self._clock()
        if started:
            use.running -= 1
        else:
            use.queued -= 1
        use.jobs_total += 1
        use.tokens_total += tokens
        if tokens:
            use.tokens.add(now, tokens)
            use.today(now)
            use.day_tokens += tokens

    def restore_today(self, used: Mapping[str, int]) -> None:
        """Tokens each identity used earlier today (from the ledger, after a restart)."""
        now = self._clock()
        for identity, tokens in used.items():
            use = self._of(identity)
            use.today(now)
            use.day_tokens += tokens

    # ---- what the faces show -------------------------------------------------------------------

    def users(self) -> list[UserShare]:
        """Everyone with jobs now, a budget used this minute or today, or a policy of their own."""
        now = self._clock()
        for name in self._policies:
            self._of(name)
        return [
            UserShare(
                identity=name,
                running=use.running,
                queued=use.queued,
                requests_last_minute=use.requests.used(now),
                tokens_last_minute=use.tokens.used(now),
                tokens_today=use.today(now),
                jobs_total=use.jobs_total,
                tokens_total=use.tokens_total,
                limits=self.policy(name).limits,
            )
            for name, use in sorted(self._use.items())
        ]

    def rate_headers(self, identity: str) -> dict[str, str]:
        """OpenAI's `x-ratelimit-*` headers for an identity with per-minute limits (and ours
        for its daily tokens); none for one without."""
        limits = self.policy(identity).limits
        if (
            limits.requests_per_minute is None
            and limits.tokens_per_minute is None
            and limits.tokens_per_day is None
        ):
            return {}  # every request asks: most identities have no limit to tell
        now, use = self._clock(), self._use.get(identity) or _Use()
        headers: dict[str, str] = {}
        for kind, limit, window in (
            ("requests", limits.requests_per_minute, use.requests),
            ("tokens", limits.tokens_per_minute, use.tokens),
        ):
            if limit is None:
                continue
            headers[f"x-ratelimit-limit-{kind}"] = str(limit)
            headers[f"x-ratelimit-remaining-{kind}"] = str(max(limit - window.used(now), 0))
            headers[f"x-ratelimit-reset-{kind}"] = _duration(window.frees_in(now, 1))
        if limits.tokens_per_day is not None:
            left = max(limits.tokens_per_day - use.today(now), 0)
            headers["x-ratelimit-limit-tokens-day"] = str(limits.tokens_per_day)
            headers["x-ratelimit-remaining-tokens-day"] = str(left)
        return headers


def _duration(seconds: float) -> str:
    """A reset time as OpenAI writes it: 1s, 6m0s."""
    whole = math.ceil(seconds)
    return f"{whole // 60}m{whole % 60}s" if whole >= 60 else f"{whole}s"
