"""The host's sharing settings as the scheduler reads them: each identity's weight, class and
limits (issue 37)."""

from __future__ import annotations

from ..config import SharesSettings, UserPolicy
from ..protocol.shares import Priority, UserLimits
from ..scheduler.shares import Policy, Shares


def policy_of(user: UserPolicy) -> Policy:
    limits = UserLimits(
        weight=user.weight,
        running=user.running,
        queued=user.queued,
        requests_per_minute=user.requests_per_minute,
        tokens_per_minute=user.tokens_per_minute,
        tokens_per_day=user.tokens_per_day,
    )
    return Policy(limits, Priority(user.priority))


def shares_from(settings: SharesSettings) -> Shares:
    return Shares(
        {name: policy_of(user) for name, user in settings.users.items()},
        policy_of(settings.default),
        interactive_slots=settings.interactive_slots,
    )
