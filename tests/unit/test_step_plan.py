"""The step planner's sharing of the prompt budget and its KV-stream fillers (issue 10 §2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infertui.core.engine.step_plan import (
    AGING_STEPS,
    admission_order,
    fillers,
    prompt_shares,
    ubatches,
)


def test_prompts_that_fit_get_all_they_need() -> None:
    assert prompt_shares([3, 100, 1], [0, 0, 0], 512) == [3, 100, 1]


def test_a_short_prompt_behind_a_long_one_finishes_in_one_step() -> None:
    """The long prompt arrived first, yet the short one is not kept waiting."""
    assert prompt_shares([3000, 20], [3, 0], 512) == [492, 20]


def test_equal_prompts_finish_one_after_another_oldest_first() -> None:
    assert prompt_shares([3000, 3000, 3000, 3000], [0, 0, 0, 0], 512) == [512, 0, 0, 0]
    # a step later the first has less left, so it goes on first: first come, first served
    assert prompt_shares([2488, 3000, 3000, 3000], [1, 1, 1, 1], 512) == [512, 0, 0, 0]


def test_the_prompt_closest_to_done_goes_first() -> None:
    assert prompt_shares([3000, 200, 2000], [0, 0, 0], 512) == [0, 200, 312]


def test_a_long_prompt_behind_ever_new_short_ones_gets_its_turn() -> None:
    """No starvation: waiting halves a prompt's claim every AGING_STEPS steps."""
    assert prompt_shares([3000, 20], [0, 0], 16)[0] == 0
    waited = AGING_STEPS * 8  # 3000 >> 8 = 11 < 20
    assert prompt_shares([3000, 20], [waited, 0], 16) == [16, 0]


def test_no_budget_means_no_prefill() -> None:
    assert prompt_shares([5, 6], [0, 0], 0) == [0, 0]
    assert prompt_shares([], [], 64) == []


@given(
    st.lists(
        st.tuples(st.integers(min_value=1, max_value=4000), st.integers(0, 200)),
        min_size=1,
        max_size=40,
    ),
    st.integers(min_value=0, max_value=2048),
)
def test_shares_spend_the_budget_on_whole_turns(
    prompts: list[tuple[int, int]], budget: int
) -> None:
    remaining = [r for r, _ in prompts]
    shares = prompt_shares(remaining, [w for _, w in prompts], budget)
    assert all(0 <= s <= r for s, r in zip(shares, remaining, strict=True))
    assert sum(shares) == min(budget, sum(remaining))  # no budget is wasted
    partial = [i for i, (s, r) in enumerate(zip(shares, remaining, strict=True)) if 0 < s < r]
    assert len(partial) <= 1, "at most one prompt is cut short: one extra ubatch at most"


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


def test_ubatches_are_rectangles_of_consecutive_sequences() -> None:
    """The mirror of llama.cpp's sequential split_equal, on cases worked by hand."""
    assert ubatches({0: 8, 1: 8, 2: 8}, 512) == [([0, 1, 2], 8)]
    # a running sequence's one token makes the first ubatch one token high
    assert ubatches({0: 1, 1: 5, 2: 5}, 512) == [([0, 1, 2], 1), ([1, 2], 4)]
    # a sequence that is done breaks the run: 0 and 2 are not consecutive
    assert ubatches({0: 3, 1: 1, 2: 3}, 512) == [([0, 1, 2], 1), ([0], 2), ([2], 2)]
    assert ubatches({0: 4, 2: 4}, 512) == [([0], 4), ([2], 4)]
    # at most n_ubatch tokens a ubatch
    assert ubatches({0: 10, 1: 10}, 8) == [([0, 1], 4), ([0, 1], 4), ([0, 1], 2)]


def test_admission_lays_prompts_shortest_first_ties_in_arrival_order() -> None:
    assert admission_order([20, 15, 25, 15]) == [1, 3, 0, 2]
    assert admission_order([]) == []


def _burst_ubatches(lengths: list[int], budget: int = 512) -> int:
    """Ubatches over a burst's prefill steps, prompts on sequences 0.. in the given order,
    the budget shared as the batch loop shares it, finished prompts decoding beside."""
    left, total = list(lengths), 0
    while any(left):
        todo = [i for i, n in enumerate(left) if n]
        shares = prompt_shares([left[i] for i in todo], [0] * len(todo), budget)
        chunks = {i: 1 for i, n in enumerate(left) if not n}
        chunks.update((i, s) for i, s in zip(todo, shares, strict=True) if s)
        total += len(ubatches(chunks, budget))
        for i, s in zip(todo, shares, strict=True):
            left[i] -= s
    return total


def test_a_burst_laid_out_by_length_takes_far_fewer_ubatches() -> None:
    """64 prompts of 15-25 tokens arriving at once (the bench's burst): in arrival order the
    prefill is a staircase of small ubatches, each running the whole graph."""
    lengths = [15 + (i * 7) % 11 for i in range(64)]
    arrival = _burst_ubatches(lengths)
    laid_out = _burst_ubatches([lengths[i] for i in admission_order(lengths)])
    assert laid_out * 3 <= arrival, (laid_out, arrival)
