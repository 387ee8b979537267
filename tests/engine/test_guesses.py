"""Issue 38 §2, the policy of speculative decoding without a model: what a stream guesses
from its own text (prompt lookup), how its rate of kept guesses follows what the model kept,
and how many guesses a step takes for a device's measured step cost, turning itself down as
the batch grows."""

from __future__ import annotations

from infertui.core.engine.llama.drafts import (
    MAX_GUESSES,
    START_RATE,
    Guesser,
    KeptRate,
    plan_guesses,
)
from infertui.core.engine.llama.step_cost import StepCost

CPU = StepCost(fixed=0.006, per_token=0.006)  # the bundled model on two EPYC cores, measured
GPU = StepCost(fixed=0.004, per_token=0.0001)


def test_a_stream_guesses_what_followed_the_latest_place_its_last_tokens_occurred() -> None:
    prompt = [1, 2, 3, 4, 5, 6, 9, 2, 3, 4, 7, 8]
    guesser = Guesser(list(prompt))
    assert guesser.guess([], 4) == []  # "7 8" never came before
    assert guesser.guess([2, 3, 4], 3) == [7, 8, 2]  # the latest "2 3 4", not the first
    assert guesser.guess([2, 3, 4, 7], 8) == [8, 2, 3, 4, 7]  # up to the text's end
    assert guesser.guess([2, 3, 4, 7, 11], 4) == []  # nothing ends in 11 before


def test_the_longest_match_wins_over_a_later_shorter_one() -> None:
    guesser = Guesser([5, 6, 7, 1, 9, 7, 2, 0])
    assert guesser.guess([5, 6, 7], 2) == [1, 9]  # "5 6 7" matches 3 tokens; "7" alone: 2
    guesser = Guesser([3, 1, 3, 2, 8])
    assert guesser.guess([3], 1) == []  # one token alone is too short a match


def test_the_kept_rate_follows_the_models_picks_and_returns_when_idle() -> None:
    guesser = Guesser([])
    for _ in range(12):
        guesser.kept(8, 8)
    assert guesser.rate > 0.99
    guesser.kept(8, 0)  # only the first guess counts: the others were never checked
    assert 0.6 < guesser.rate < 0.75
    for _ in range(10):
        guesser.kept(4, 0)
    low = guesser.rate
    assert low < 0.05
    for _ in range(300):
        guesser.idle()
    assert low < guesser.rate <= START_RATE + 1e-9


def test_one_stream_takes_more_guesses_the_surer_they_are() -> None:
    unsure = plan_guesses([(0.6, 32)], 1, 1, CPU, MAX_GUESSES)
    sure = plan_guesses([(0.95, 32)], 1, 1, CPU, MAX_GUESSES)
    certain = plan_guesses([(0.999, 32)], 1, 1, CPU, MAX_GUESSES)
    assert unsure[0] <= 1 < sure[0] < certain[0] == MAX_GUESSES
    assert plan_guesses([(0.999, 5)], 1, 1, CPU, MAX_GUESSES) == [5]  # no more than it has
    assert plan_guesses([(0.4, 32)], 1, 1, CPU, MAX_GUESSES) == [0]  # below the step's cost


def test_guessing_turns_down_as_the_batch_grows_on_a_cpu_and_not_on_a_gpu() -> None:
    def taken(streams: int, cost: StepCost, rate: float = 0.9) -> float:
        """Guesses per stream."""
        offers = [(rate, 32)] * streams
        return sum(plan_guesses(offers, streams, streams, cost, MAX_GUESSES)) / streams

    cpu = [taken(n, CPU) for n in (1, 2, 8, 32)]
    assert cpu[0] > cpu[1] > cpu[2] == cpu[3] == 0  # 3, 2, 0, 0 a stream
    gpu = [taken(n, GPU) for n in (1, 2, 8, 32)]
    assert all(n > 0 for n in gpu) and gpu[0] > cpu[0]
    assert sum(plan_guesses([(0.99, 32)] * 8, 8, 8, GPU, 10)) == 10  # the step's room


def test_the_surest_streams_guess_first() -> None:
    taken = plan_guesses([(0.7, 32), (0.99, 32), (0.0, 32), (0.9, 0)], 4, 4, GPU, MAX_GUESSES)
    assert taken[1] > taken[0] and taken[2] == taken[3] == 0


def test_a_new_stream_starts_from_what_the_engines_guesses_have_been_worth() -> None:
    """Short replies that paraphrase their prompt (guesses failing at once) taught each new
    stream the same lesson again, a failed guess at a time (0.7x at one stream, measured):
    the engine's rate, learnt from every stream, seeds the next one's."""
    engine = KeptRate()
    for _ in range(8):
        stream = Guesser([], engine)
        stream.kept(1, 0)
        stream.kept(1, 0)
    assert Guesser([], engine).rate < 0.5 < START_RATE  # below what one guess costs a CPU
    for _ in range(40):
        Guesser([], engine).kept(8, 8)
    assert Guesser([], engine).rate > 0.9
