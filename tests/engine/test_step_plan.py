"""The step planner's sharing of the prompt budget, its KV-stream fillers and where it decodes
the finishing prompts' last tokens apart (issue 10 §2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infertui.core.engine.llama.step_plan import (
    AGING_STEPS,
    APART_ALONE,
    admission_order,
    fillers,
    last_tokens_apart,
    output_ubatches,
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


def test_only_holes_cheaper_than_an_extra_ubatch_are_filled() -> None:
    """On a CPU a filler costs about what a step's fixed part does (widest ~1): a hole of one
    is filled, a wider one splits the step into two ubatches instead."""
    active, free = [0, 2, 6, 7, 9], [1, 3, 4, 5, 8, 10]
    assert fillers(active, free, widest=1) == [1, 8]
    assert fillers(active, free, widest=3) == [1, 3, 4, 5, 8]
    assert fillers(active, free, widest=0.5) == []
    assert fillers(active, free) == [1, 3, 4, 5, 8]


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


def test_rows_are_counted_in_the_ubatches_where_their_sequences_end() -> None:
    # 0 decodes (one token), 1 and 2 finish prompts of 5 and 7 tokens: rows in three ubatches
    assert output_ubatches({0: 1, 1: 5, 2: 7}, [0, 1, 2], 512) == 3
    # a prompt chunk that does not finish gives no row
    assert output_ubatches({0: 1, 1: 5, 2: 7}, [0, 1], 512) == 2
    assert output_ubatches({0: 1, 1: 1, 2: 1}, [0, 1, 2], 512) == 1


def test_beside_running_sequences_a_new_prompt_gives_its_last_token_apart() -> None:
    """7 running, one new prompt of 13 tokens: two ubatches with rows in one decode (measured
    103 ms), one when the prompt goes first without its last token (86 ms)."""
    assert last_tokens_apart(range(7), {7: 13}, [7], [], 512)
    # a chunk that does not finish the prompt has no row to move
    assert not last_tokens_apart(range(7), {7: 13}, [], [], 512)
    # a last chunk of one token is already in the running sequences' rectangle
    assert not last_tokens_apart(range(7), {7: 1}, [7], [], 512)


def test_alone_a_burst_is_split_only_where_its_rows_scatter_widely() -> None:
    """With nothing running the extra decode costs more: two prompts of 12 and 14 tokens stay
    one decode (79 ms against 85), eight of 10-14 tokens are split (264 ms against 286)."""
    assert not last_tokens_apart([], {0: 12, 1: 14}, [0, 1], [], 512)
    assert not last_tokens_apart([], dict.fromkeys(range(8), 12), range(8), [], 512)
    burst = dict(enumerate([10, 11, 11, 12, 12, 13, 14, 14]))
    assert output_ubatches(burst, burst, 512) >= APART_ALONE
    assert last_tokens_apart([], burst, burst, [], 512)


def test_a_free_sequence_in_the_rectangle_gets_a_filler_not_a_veto() -> None:
    """Running 0 and 2 around a free 1, a prompt finishing on 3: the second decode fills 1 and
    is one run, so the split goes ahead."""
    assert last_tokens_apart([0, 2], {3: 9}, [3], [1], 512)


def test_a_prompt_that_goes_on_between_them_keeps_the_step_one_decode() -> None:
    """Sequence 1 holds a prompt that does not finish this step: it gives no token to the
    second decode and, holding a job, takes no filler, so that decode would be two runs
    with a row ubatch each, as many as one decode has; nothing would be won."""
    assert not last_tokens_apart([0, 2], {1: 300, 3: 9}, [3], [], 512)
    # where the split still saves output passes despite the hole, it goes ahead
    assert last_tokens_apart([0, 2], {1: 300, 3: 9, 4: 10, 5: 11}, [3, 4, 5], [], 512)


@given(
    st.lists(
        st.sampled_from(["free", "running", "finishing", "going on", "waiting"]),
        min_size=1,
        max_size=16,
    ),
    st.lists(st.integers(1, 60), min_size=16, max_size=16),
)
def test_a_split_always_saves_output_passes(roles: list[str], lengths: list[int]) -> None:
    """Any mix of sequences: where the planner splits, the second decode (running sequences,
    finishing prompts' last tokens, fillers on free sequences) runs the output layer at least
    once less than the one decode would have. `waiting` holds a job that gives no token (it
    copies another's cells later)."""
    seqs = dict(enumerate(roles))
    running = [q for q, role in seqs.items() if role == "running"]
    finishing = [q for q, role in seqs.items() if role == "finishing"]
    chunks = {q: lengths[q] for q, role in seqs.items() if role in ("finishing", "going on")}
    free = [q for q, role in seqs.items() if role == "free"]
    if not last_tokens_apart(running, chunks, finishing, free, 512):
        return
    rows = [*running, *finishing]
    one = dict.fromkeys(running, 1) | chunks
    one |= dict.fromkeys(fillers(one, free), 1)
    second = dict.fromkeys(rows, 1)
    second |= dict.fromkeys(fillers(second, free), 1)
    assert output_ubatches(second, rows, 512) < output_ubatches(one, rows, 512)
    if not any(role in ("going on", "waiting") for role in roles):
        assert output_ubatches(second, rows, 512) == 1  # nothing cuts the rectangle
