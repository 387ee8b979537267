"""Issue 38 §2, the policy of speculative decoding without a model: what a stream guesses
from its own text (prompt lookup) and how long a run it follows, how the engine's rates of
kept guesses by run follow what the model kept, and how many guesses a step takes for a
device's measured step cost, turning itself down as the batch grows."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from infertui.core.engine.llama import guess_plan
from infertui.core.engine.llama.drafts import (
    MAX_GUESSES,
    MAX_PAUSE,
    Guesser,
    KeptRates,
    least_chance,
    plan_guesses,
)
from infertui.core.engine.llama.guess_plan import GuessPlan
from infertui.core.engine.llama.step_cost import StepCost

CPU = StepCost(fixed=0.006, per_token=0.006)  # the bundled model on two EPYC cores, measured
GPU = StepCost(fixed=0.004, per_token=0.0001)


def geometric(rate: float, n: int) -> list[float]:
    """The chances of n guesses each kept with `rate` once those before it were."""
    return [rate ** (j + 1) for j in range(n)]


def test_a_stream_guesses_what_followed_the_latest_place_its_last_tokens_occurred() -> None:
    prompt = [1, 2, 3, 4, 5, 6, 9, 2, 3, 4, 7, 8]
    guesser = Guesser(list(prompt))
    assert guesser.guess([], 4) == []  # "7 8" never came before
    assert guesser.guess([2, 3, 4], 3) == [7, 8, 2]  # the latest "2 3 4", not the first
    assert guesser.run == 3  # "8 2 3 4" against "9 2 3 4": three tokens match
    assert guesser.guess([2, 3, 4, 7], 8) == [8, 2, 3, 4, 7]  # up to the text's end
    assert guesser.run == 4
    assert guesser.guess([2, 3, 4, 7, 11], 4) == []  # nothing ends in 11 before


def test_the_run_is_how_far_back_the_text_matches_its_source() -> None:
    passage = list(range(100, 140))
    guesser = Guesser([7, *passage, 8])
    assert guesser.guess(passage[:3], 4) == passage[3:7]
    assert guesser.run == 3
    assert guesser.guess(passage[:30], 4) == passage[30:34]
    assert guesser.run == 30  # a stream 30 tokens into a quote


def test_the_longest_match_wins_over_a_later_shorter_one() -> None:
    guesser = Guesser([5, 6, 7, 1, 9, 6, 7, 2, 0])
    assert guesser.guess([5, 6, 7], 2) == [1, 9]  # "5 6 7" matches 3 tokens; a later "6 7": 2
    guesser = Guesser([3, 1, 3, 2, 8])
    assert guesser.guess([3], 1) == []  # one token alone is too short a match


def test_rates_are_learnt_by_run_and_come_back_when_idle() -> None:
    rates = KeptRates()
    assert rates.rate(3) < rates.rate(40)  # before any guess: a long run is likelier to go on
    for _ in range(20):  # short matches fail (a paraphrase), long runs hold (a quote)
        rates.kept(3, 4, 0)  # only the first guess counts: the others were never checked
        rates.kept(20, 8, 8)
    assert rates.rate(3) < 0.3 and rates.rate(20) > 0.97
    rates.kept(20, 8, 3)  # one miss among many kept: an edit in a quote
    assert rates.rate(20) > 0.95
    low = rates.rate(3)
    for _ in range(3000):
        rates.idle()
    assert low < rates.rate(3) <= KeptRates().rate(3) + 1e-9


def test_a_draft_models_run_grows_with_its_guesses_kept_and_ends_at_one_dropped() -> None:
    guesser = Guesser([])
    guesser.kept(4, 4)
    guesser.kept(3, 3)
    assert guesser.run == 7
    guesser.kept(4, 2)
    assert guesser.run == 0


def test_one_stream_takes_more_guesses_the_surer_they_are() -> None:
    unsure = plan_guesses([geometric(0.6, 32)], 1, 1, CPU, MAX_GUESSES)
    sure = plan_guesses([geometric(0.95, 32)], 1, 1, CPU, MAX_GUESSES)
    certain = plan_guesses([geometric(0.999, 32)], 1, 1, CPU, MAX_GUESSES)
    assert unsure[0] <= 1 < sure[0] < certain[0] == MAX_GUESSES
    assert plan_guesses([geometric(0.999, 5)], 1, 1, CPU, MAX_GUESSES) == [5]  # what it has
    assert plan_guesses([geometric(0.4, 32)], 1, 1, CPU, MAX_GUESSES) == [0]  # below the cost


def test_no_guess_below_the_least_chance_pays() -> None:
    floor = least_chance(1, 1, CPU)
    assert plan_guesses([[floor]], 1, 1, CPU, MAX_GUESSES) == [0]
    assert plan_guesses([[floor + 0.01]], 1, 1, CPU, MAX_GUESSES) == [1]
    assert len(KeptRates().chances(3, 32, floor)) < len(KeptRates().chances(3, 32, 0.0)) == 32


def test_guessing_turns_down_as_the_batch_grows_on_a_cpu_and_not_on_a_gpu() -> None:
    def taken(streams: int, cost: StepCost, rate: float = 0.9) -> float:
        """Guesses per stream."""
        offers = [geometric(rate, 32)] * streams
        return sum(plan_guesses(offers, streams, streams, cost, MAX_GUESSES)) / streams

    cpu = [taken(n, CPU) for n in (1, 2, 8, 32)]
    assert cpu[0] > cpu[1] > cpu[2] == cpu[3] == 0  # 3, 2, 0, 0 a stream
    gpu = [taken(n, GPU) for n in (1, 2, 8, 32)]
    assert all(n > 0 for n in gpu) and gpu[0] > cpu[0]
    assert sum(plan_guesses([geometric(0.99, 32)] * 8, 8, 8, GPU, 10)) == 10  # the step's room


def test_the_surest_streams_guess_first() -> None:
    offers = [geometric(0.7, 32), geometric(0.99, 32), geometric(0.0, 32), []]
    taken = plan_guesses(offers, 4, 4, GPU, MAX_GUESSES)
    assert taken[1] > taken[0] and taken[2] == taken[3] == 0


def test_a_stream_deep_in_a_quote_guesses_further_than_one_that_just_matched() -> None:
    """Short replies that paraphrase their prompt (guesses failing at once) taught each new
    stream the same lesson again, a failed guess at a time (0.7x at one stream, measured);
    guesses of a fixed rate per stream then ran 32 long through the edit of a quote (0.89x):
    the engine's rates by run, learnt from every stream, set both apart."""
    rates = KeptRates()
    for _ in range(8):
        stream = Guesser([], rates)
        stream.run = 3
        stream.kept(1, 0)
        stream.run = 30
        stream.kept(8, 8)
    floor = least_chance(1, 1, CPU)
    just_matched, deep = Guesser([], rates), Guesser([], rates)
    just_matched.run, deep.run = 3, 30
    assert just_matched.chances(32, floor) == []  # below what one guess costs a CPU
    assert plan_guesses([deep.chances(32, floor)], 1, 1, CPU, MAX_GUESSES)[0] >= 4


def test_a_stream_whose_lookups_find_nothing_looks_less_often_and_not_for_long() -> None:
    """A lookup is host work between two decodes (26 us a token on the tiny model, where no
    guess ever paid): text that does not repeat pauses its lookups, doubling up to
    MAX_PAUSE steps; once its text repeats it is found within that many."""
    guesser = Guesser([1, 2, 3])
    lookups = []
    look = guesser.guess
    guesser.guess = lambda text, limit: lookups.append(limit) or look(text, limit)  # type: ignore[method-assign]
    generated: list[int] = []
    for token in range(100, 140):
        generated.append(token)
        if guesser.looks():
            guesser.offer(generated, 8, 0.5, 0.5)
    assert len(lookups) <= 8  # of 40 steps
    steps = 0
    guesses: list[int] = []
    while not guesses:  # the text now repeats what it said before
        generated.append(100 + steps % 40)
        if guesser.looks():
            guesses, chances = guesser.offer(generated, 8, 0.5, 0.5)
        steps += 1
    assert steps <= MAX_PAUSE + 2 and chances


def test_a_big_batch_raising_the_floor_pauses_no_lookup() -> None:
    """A match whose guesses would pay a stream alone is looked up again next step, though
    this step's batch wanted more than its chance."""
    passage = list(range(100, 140))
    guesser = Guesser([7, *passage, 8])
    guesses, chances = guesser.offer(passage[:10], 8, 0.999, 0.5)  # (32 streams on a CPU)
    assert guesses == chances == [] and guesser.looks()
    guesses, chances = guesser.offer(passage[:11], 8, 0.5, 0.5)
    assert chances and guesses == passage[11 : 11 + len(chances)]


def test_a_draft_model_starts_sure_enough_to_guess_at_one_stream_on_a_cpu() -> None:
    """A draft's run starts at 0 with every stream and after every dropped guess, where the
    rule of succession says 0.5: on a CPU it would never guess, and so never learn."""
    floor = least_chance(1, 1, CPU)
    assert KeptRates().rate(0) <= floor < KeptRates.for_drafts().rate(0)
    guesser = Guesser([], KeptRates.for_drafts())
    assert plan_guesses([guesser.chances(8, floor)], 1, 1, CPU, MAX_GUESSES)[0] >= 1


def plan_for(cost: StepCost) -> GuessPlan:
    seqs: Any = SimpleNamespace(ctx=SimpleNamespace(n_ctx_seq=4096))
    return GuessPlan(seqs, cost, None)


# A tiny model on one CPU thread, as the engine measured it at load: a second token adds 0.8
# of a lone decode, so a sure guess would pay a lone stream.
TINY_AT_LOAD = StepCost(fixed=0.0002, per_token=0.0004, one=0.0006, second=0.00048)


def test_a_lone_stream_stops_guessing_where_its_own_steps_say_a_guess_costs_a_token() -> None:
    """In use, the steps that guessed one token took 2.1x a lone decode (measured: the tiny
    32k model on one Xeon thread, all logits rows): after a few such steps no guess pays a
    lone stream, and after many lone runs the plan tries again, in case the steps were slow
    only for a while."""
    plan = plan_for(TINY_AT_LOAD)
    assert plan.may_pay_alone()
    plan.time_lone_run(0.0006 * 200, 200)
    for _ in range(guess_plan.TRUSTED):
        plan.time_guessing(2.1 * 0.0006, 1)
    assert not plan.may_pay_alone()
    runs = 0
    while not plan.may_pay_alone() and runs < 1000:
        plan.time_lone_run(0.0006 * 200, 200)
        runs += 1
    assert 10 < runs < 200


def test_guesses_that_cost_a_lone_step_little_in_use_go_on() -> None:
    """A GPU's step, or a model whose layers outweigh its logits: a guess adds a few per cent
    to a lone decode, and the plan goes on guessing, its learnt cost near what it measures."""
    plan = plan_for(TINY_AT_LOAD)
    plan.time_lone_run(0.0006 * 200, 200)
    for _ in range(3 * guess_plan.TRUSTED):
        plan.time_guessing(0.0006 * 1.05 + 0.0006 * 0.05, 2)  # two guesses, 5 % each
    assert plan.may_pay_alone()
    assert 0.00002 < plan.cost.second < 0.00012 and plan.cost.one == pytest.approx(0.0006)
