"""Speculative decoding: which tokens each stream guesses ahead, and how many are worth it.

A stream that guesses k tokens decodes them with its next token in one step, each with a
logits row, and keeps the guesses the model itself picks (step.py samples each row with the
stream's own chain and stops at the first that differs). Lossless: a guess is kept only where
the model would have picked it anyway, at temperature 0 and with sampling alike. A guess is a
fixed function of the text (no draw of its own), so keeping it where the chain's draw equals
it is the standard rejection scheme for a one-hot draft: every token keeps its probability,
and a seeded job draws the very numbers it draws without guesses.

Guesses come from the stream's own text (prompt lookup, as llama.cpp's `ngram-simple`): the
latest earlier place where its last few tokens occurred, and what followed there. It costs no
second model and pays where the output quotes its input: edits, summaries, code, quotes.

How many: a step costs about `a + b * tokens` seconds (measured when the engine loads,
step_cost.py). A guess kept with probability p adds p tokens for b seconds; it is worth it while
the step's tokens per second grow, that is while p > T / (a/b + N), with T the tokens the step
yields already and N the tokens it decodes; a guess counts as a little more than a token
there, for the host's own work on its row (which the step cost leaves out). Each stream's
j-th guess is kept with probability about alpha**j, alpha its recent rate of kept guesses,
which starts from the engine's. On a CPU, where b is large against a, a step of eight streams
wants p > 1 and guessing turns itself off as the batch grows; on a GPU, b is small and
guesses stay worth it far longer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .step_cost import StepCost

NGRAM_SIZES = (5, 4, 3)  # the longest match first: it predicts best (2 matched paraphrases)
MAX_GUESSES = 32  # per stream and step, and in all per step (the context's spare rows)
START_RATE = 0.8  # the engine's kept-guess rate before any guess was checked
_RATE_STEP = 0.3  # how fast a stream's rate follows each guess's outcome
_ENGINE_STEP = 0.1  # and the engine's, which seeds each new stream's
# A guessed token costs the step this much more than a token does: the host's own work on
# its row, which the step cost leaves out (at 32 streams on the 2-core EPYC, guesses that
# barely paid without it cost 30 %).
_MARGIN = 0.1
_RETURN_STEP = 0.005  # per step without guesses, back toward the engine's: streams try again


@dataclass
class KeptRate:
    """How often guesses are kept, learnt from each guess checked: a guess's place counts
    only if those before it were kept (the later ones were never checked)."""

    rate: float = START_RATE
    step: float = _ENGINE_STEP

    def kept(self, guessed: int, kept: int) -> None:
        """Learn from a step: of `guessed` guesses the first `kept` were kept."""
        for j in range(min(guessed, kept + 1)):
            self.rate += self.step * ((1.0 if j < kept else 0.0) - self.rate)


@dataclass
class Guesser:
    """One stream's prompt lookup: the n-grams of its text so far, each at the latest place
    it ended, and its recent rate of kept guesses, which starts from the engine's: where
    guesses have been failing, a new stream does not pay to find out again."""

    tokens: list[int]  # the prompt, then every token generated
    engine: KeptRate = field(default_factory=KeptRate)  # the engine's, shared by its streams
    _own: KeptRate = field(init=False)  # this stream's, quicker to follow
    _ends: dict[tuple[int, ...], int] = field(default_factory=dict)
    _indexed: int = 0  # n-grams ending before this index are in `_ends`
    _seen: int = 0  # of the stream's generated tokens, those appended to `tokens`

    def __post_init__(self) -> None:
        self._own = KeptRate(self.engine.rate, _RATE_STEP)

    @property
    def rate(self) -> float:
        return self._own.rate

    def text(self, generated: Sequence[int]) -> list[int]:
        """The stream's text: its prompt and the tokens it has generated."""
        self.tokens.extend(generated[self._seen :])
        self._seen = len(generated)
        return self.tokens

    def guess(self, generated: Sequence[int], limit: int) -> list[int]:
        """Up to `limit` tokens that followed the latest earlier occurrence of the text's
        last n tokens (n from the longest of NGRAM_SIZES)."""
        tokens = self.text(generated)
        n = len(tokens)
        ends = self._ends
        for end in range(self._indexed + 1, n):  # every n-gram with a token after it
            for size in NGRAM_SIZES:
                if end >= size:
                    ends[tuple(tokens[end - size : end])] = end
        self._indexed = max(self._indexed, n - 1)
        for size in NGRAM_SIZES:
            if n > size and (at := ends.get(tuple(tokens[n - size :]))) is not None:
                return tokens[at : at + limit]
        return []

    def kept(self, guessed: int, kept: int) -> None:
        """Learn from a step: of `guessed` guesses the first `kept` were kept."""
        self._own.kept(guessed, kept)
        self.engine.kept(guessed, kept)

    def idle(self) -> None:
        self._own.rate += _RETURN_STEP * (self.engine.rate - self._own.rate)


def plan_guesses(
    offers: Sequence[tuple[float, int]], yields: float, tokens: int, cost: StepCost, room: int
) -> list[int]:
    """How many guesses each stream decodes this step. `offers` are each stream's kept-guess
    rate and how many it can guess; `yields` the tokens the step gives without guesses
    (one per stream, and the prompt tokens it reads), `tokens` those it decodes; `room` the
    guesses the step can hold. Guesses go in order of their chance while it exceeds what a
    guess costs the step's rate (see the module's docstring)."""
    taken = [0] * len(offers)
    chances = [rate if n else 0.0 for rate, n in offers]
    fixed, decoded = cost.fixed_tokens, float(tokens)
    while room > 0:
        best = max(range(len(offers)), key=chances.__getitem__, default=None)
        cost_tokens = 1 + _MARGIN  # a guess: its token, and the host's work on its row
        if best is None or chances[best] <= yields * cost_tokens / (fixed + decoded):
            break
        yields += chances[best]
        decoded += cost_tokens
        room -= 1
        taken[best] += 1
        rate, n = offers[best]
        chances[best] = chances[best] * rate if taken[best] < n else 0.0
    return taken
