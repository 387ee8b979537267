"""Issue 37 §4: each identity's limits, on a clock the test moves: queued jobs, requests and
tokens per minute, tokens per day; each refusal a 429's kind with when to try again, and
OpenAI's x-ratelimit-* headers for what is left."""

from __future__ import annotations

import pytest

from infertui.core.protocol.errors import ErrorKind, InferError
from infertui.core.protocol.shares import UserLimits
from infertui.core.scheduler.shares import DAY, MAX_NAMED, Policy, Shares


class Clock:
    def __init__(self, now: float = 10 * DAY + 3600) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def sharing_with(clock: Clock, **limits: int) -> Shares:
    return Shares({"alice": Policy(UserLimits(**limits))}, clock=clock)


def refusal(shares: Shares, who: str = "alice") -> InferError:
    with pytest.raises(InferError) as caught:
        shares.admit(who)
    return caught.value


def test_queued_jobs_beyond_the_cap_are_refused_as_client_busy() -> None:
    shares = sharing_with(Clock(), queued=2)
    for _ in range(2):
        shares.admit("alice")
        shares.queued("alice")
    err = refusal(shares)
    assert err.kind is ErrorKind.CLIENT_BUSY and err.mapping.http_status == 429
    assert "2 job(s) waiting" in err.message
    shares.started("alice")  # one leaves the queue: room again
    shares.admit("alice")
    shares.admit("bob")  # others are not held by alice's cap


def test_requests_per_minute_refuse_until_the_oldest_leaves_the_window() -> None:
    clock = Clock()
    shares = sharing_with(clock, requests_per_minute=3)
    for step in range(3):
        clock.now += 10 * step
        shares.admit("alice")
    err = refusal(shares)  # requests at 0, 10, 30 s; now 30 s
    assert err.kind is ErrorKind.RATE_LIMITED and err.retriable
    assert err.retry_after_ms == 30_000  # the first leaves the minute at 60 s
    assert err.mapping.openai_code == "rate_limit_exceeded"
    clock.now += 30
    shares.admit("alice")


def test_tokens_per_minute_count_what_jobs_used_when_they_end() -> None:
    clock = Clock()
    shares = sharing_with(clock, tokens_per_minute=1000)
    shares.admit("alice")
    shares.queued("alice")
    shares.started("alice")
    shares.admit("alice")  # nothing used yet: a running job is never cut short
    shares.ended("alice", started=True, tokens=1200)
    err = refusal(shares)
    assert err.kind is ErrorKind.BUDGET_SPENT and err.retry_after_ms == 60_000
    headers = shares.rate_headers("alice")
    assert headers["x-ratelimit-limit-tokens"] == "1000"
    assert headers["x-ratelimit-remaining-tokens"] == "0"
    assert headers["x-ratelimit-reset-tokens"] == "1m0s"
    clock.now += 61
    shares.admit("alice")
    assert shares.rate_headers("alice")["x-ratelimit-remaining-tokens"] == "1000"


def test_tokens_per_day_refuse_until_midnight_utc_and_survive_a_restart() -> None:
    clock = Clock(10 * DAY + 23 * 3600)  # 23:00 UTC
    shares = sharing_with(clock, tokens_per_day=5000)
    shares.restore_today({"alice": 4000})  # what the ledger says she used before a restart
    shares.queued("alice")
    shares.ended("alice", started=False, tokens=1500)
    err = refusal(shares)
    assert err.kind is ErrorKind.BUDGET_SPENT and err.retry_after_ms == 3600_000
    assert shares.rate_headers("alice")["x-ratelimit-remaining-tokens-day"] == "0"
    clock.now += 3601  # a new day
    shares.admit("alice")
    assert shares.rate_headers("alice")["x-ratelimit-remaining-tokens-day"] == "5000"


def test_an_identity_without_limits_gets_no_rate_headers_and_is_never_refused() -> None:
    shares = Shares()
    for _ in range(1000):
        shares.admit("bob")
    assert shares.rate_headers("bob") == {}


def test_users_show_each_identitys_jobs_and_use() -> None:
    clock = Clock()
    shares = sharing_with(clock, tokens_per_day=10_000)
    shares.admit("bob")
    shares.queued("bob")
    shares.queued("bob")
    shares.started("bob")
    shares.ended("bob", started=True, tokens=300)
    users = {u.identity: u for u in shares.users()}
    assert users["alice"].limits.tokens_per_day == 10_000  # a policy of her own: shown
    bob = users["bob"]
    assert (bob.running, bob.queued, bob.tokens_today, bob.requests_last_minute) == (0, 1, 300, 1)


def test_past_addresses_are_forgotten_so_the_table_stays_bounded() -> None:
    clock = Clock()
    shares = Shares(clock=clock)
    for n in range(MAX_NAMED):
        shares.admit(f"http:10.0.{n // 256}.{n % 256}")
    clock.now += 61  # their requests left the window: nothing to remember them by
    shares.admit("http:10.9.9.9")
    assert len(shares.users()) == 1
