"""The step planner's sharing of the prompt budget and its KV-stream fillers (issue 10 §2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infertui.core.engine.step_plan import fair_shares, fillers


def test_prompts_that_fit_get_all_they_need() -> None:
    assert fair_shares([3, 100, 1], 512) == [3, 100, 1]


def test_a_short_prompt_behind_a_long_one_finishes_in_one_step() -> None:
    """Fairness: the long prompt arrived first, yet the short one is not kept waiting."""
    assert fair_shares([3000, 20], 512) == [492, 20]


def test_the_budget_is_split_evenly_between_long_prompts() -> None:
    assert fair_shares([3000, 3000, 3000, 3000], 512) == [128, 128, 128, 128]


def test_leftover_single_tokens_go_to_the_oldest_prompts() -> None:
    assert fair_shares([100, 100, 100], 10) == [4, 3, 3]


def test_no_budget_means_no_prefill() -> None:
    assert fair_shares([5, 6], 0) == [0, 0]
    assert fair_shares([], 64) == []


@given(
    st.lists(st.integers(min_value=1, max_value=4000), min_size=1, max_size=40),
    st.integers(min_value=0, max_value=2048),
)
def test_shares_are_max_min_fair(remaining: list[int], budget: int) -> None:
    shares = fair_shares(remaining, budget)
    assert all(0 <= s <= r for s, r in zip(shares, remaining, strict=True))
    assert sum(shares) == min(budget, sum(remaining))  # no budget is wasted
    unfinished = [s for s, r in zip(shares, remaining, strict=True) if s < r]
    if unfinished:  # anyone left wanting got at least as much as anyone else, give or take one
        assert min(unfinished) >= max(shares) - 1
    if budget >= len(remaining):
        assert all(s >= 1 for s in shares), "no prompt starves"


@pytest.mark.parametrize(
    ("active", "free", "expected"),
    [
        ([0, 1, 2], [3, 4], []),  # packed: nothing to fill
        ([0, 3], [1, 2, 4, 5], [1, 2]),  # a hole between two running sequences
        ([2, 5], [0, 1, 3, 4, 6], [3, 4]),  # free slots outside the range stay out
        ([], [0, 1], []),
    ],
)
def test_fillers_close_the_holes_between_running_sequences(
    active: list[int], free: list[int], expected: list[int]
) -> None:
    assert fillers(active, free) == expected
