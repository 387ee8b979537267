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
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..protocol.errors import ErrorKind, InferError
from ..protocol.shares import Priority, UserLimits, UserShare

MINUTE = 60.0
DAY = 86400.0
MAX_NAMED = 256  # identities tracked one by one; beyond, addresses of the past are forgotten


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


class _Use:
    """One identity's jobs now and its use of its budgets."""

    __slots__ = ("day", "day_tokens", "queued", "requests", "running", "tokens")

    def __init__(self) -> None:
        self.queued = 0
        self.running = 0
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

    def ended(self, identity: str, *, started: bool, tokens: int) -> None:
        """A job of `identity` ended, having used `tokens` (in and out)."""
        use, now = self._of(identity), self._clock()
        if started:
            use.running -= 1
        else:
            use.queued -= 1
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
                limits=self.policy(name).limits,
            )
            for name, use in sorted(self._use.items())
        ]

    def rate_headers(self, identity: str) -> dict[str, str]:
        """OpenAI's `x-ratelimit-*` headers for an identity with per-minute limits (and ours
        for its daily tokens); none for one without."""
        limits, now = self.policy(identity).limits, self._clock()
        use = self._use.get(identity) or _Use()
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

    def running(self) -> Counter[str]:
        return Counter({name: use.running for name, use in self._use.items() if use.running})


def _duration(seconds: float) -> str:
    """A reset time as OpenAI writes it: 1s, 6m0s."""
    whole = math.ceil(seconds)
    return f"{whole // 60}m{whole % 60}s" if whole >= 60 else f"{whole}s"
