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

How sure a guess is depends on its run: how many tokens before it the stream has followed
the guess's source (for a lookup, how far back its text matches the place it copies from;
for a draft model, how many of its guesses were kept in a row). A stream that has copied 40
tokens is likely copying on; one that matched 3 is as likely paraphrasing. The engine learns
the rate of kept guesses for each run length (in doubling bands) from every guess it checks,
so a stream's j-th guess is kept with the product of the rates at the runs it passes.

How many: a step costs about `a + b * tokens` seconds (measured when the engine loads,
step_cost.py). A guess kept with probability p adds p tokens for b seconds; it is worth it while
the step's tokens per second grow, that is while p > T / (a/b + N), with T the tokens the step
yields already and N the tokens it decodes; a guess counts as a little more than a token
there, for the host's own work on its row (which the step cost leaves out; the engine times
it, StepCost.row). On a CPU, where
b is large against a, a step of eight streams wants p > 1 and guessing turns itself off as
the batch grows; on a GPU, b is small and guesses stay worth it far longer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .step_cost import StepCost

NGRAM_SIZES = (5, 4, 3, 2)  # the longest match first: it is the likeliest source
MAX_GUESSES = 32  # per stream and step, and in all per step (the context's spare rows)
MAX_PAUSE = 8  # steps a stream goes at most without a lookup (see Guesser.offer)
BANDS = 8  # run lengths 0, 1, 2-3, 4-7, ... 64 and more
DRAFT_PRIOR = 0.8  # a draft model's guesses, kept before any was checked (KeptRates.for_drafts)
# Before any guess is checked, a guess after a run of r tokens is kept with Laplace's rule of
# succession at the band's shortest run: (r + 1) / (r + 2), worth this many checked guesses.
_PRIOR_WEIGHT = 4.0
_FORGET = 0.99  # each guess checked in a band weighs its older ones down: ~100 remembered
_IDLE_FORGET = 0.998  # and each step without guesses, all bands: the priors come back
_IDLE_BATCH = 16  # idle steps whose fading is applied at once (idle() runs every step)


def band(run: int) -> int:
    """The band of run lengths `run` is in: 0, 1, 2-3, 4-7, ...; the last holds the rest."""
    return min(run.bit_length(), BANDS - 1)


def _prior(band: int) -> float:
    shortest = 0 if band == 0 else 1 << (band - 1)
    return (shortest + 1) / (shortest + 2)


class KeptRates:
    """The engine's rates of kept guesses by run length, learnt from every guess checked (a
    guess counts only if those before it in its step were kept: the later ones were never
    checked). Shared by the engine's streams: a new stream starts from what the others
    learnt, and does not pay to find out again where guesses fail."""

    def __init__(self, priors: Sequence[float] | None = None) -> None:
        self._priors = list(priors) if priors else [_prior(b) for b in range(BANDS)]
        self._kept = [0.0] * BANDS
        self._checked = [0.0] * BANDS
        self._rates = list(self._priors)  # read at every step: kept current
        self.surest = max(self._rates)  # the best chance any first guess has
        self._idle = 0  # steps without guesses whose fading is not applied yet

    @classmethod
    def for_drafts(cls) -> KeptRates:
        """A draft model's: its run starts at 0 with every stream and after every guess
        dropped, where the rule of succession says 0.5, below what a guess costs a CPU at one
        stream (it would never guess, nor learn); a draft is about as sure at any run."""
        return cls([DRAFT_PRIOR] * BANDS)

    def rate(self, run: int) -> float:
        """How likely a guess after a run of `run` tokens is kept."""
        return self._rates[band(run)]

    def chances(self, run: int, n: int, floor: float) -> list[float]:
        """How likely each of up to `n` guesses after a run of `run` tokens is kept, while
        that is above `floor`."""
        rates, last = self._rates, BANDS - 1
        out: list[float] = []
        chance = 1.0
        for j in range(run, run + n):
            chance *= rates[min(j.bit_length(), last)]  # (band(j), inline: per guess)
            if chance <= floor:
                break
            out.append(chance)
        return out

    def kept(self, run: int, guessed: int, kept: int) -> None:
        """Learn from a step: of `guessed` guesses after a run of `run`, the first `kept`
        were kept."""
        for j in range(min(guessed, kept + 1)):
            b = band(run + j)
            self._kept[b] = self._kept[b] * _FORGET + (1.0 if j < kept else 0.0)
            self._checked[b] = self._checked[b] * _FORGET + 1.0
        self._update()

    def idle(self) -> None:
        """A step without guesses: what was learnt fades a little, so that a rate too low to
        guess at (which no guess will correct) comes back to try again."""
        self._idle += 1
        if self._idle == _IDLE_BATCH:  # (applied a batch of steps at a time: it is per token)
            fade = _IDLE_FORGET**_IDLE_BATCH
            self._kept = [k * fade for k in self._kept]
            self._checked = [c * fade for c in self._checked]
            self._idle = 0
            self._update()

    def _update(self) -> None:
        self._rates = [
            (k + _PRIOR_WEIGHT * prior) / (c + _PRIOR_WEIGHT)
            for prior, k, c in zip(self._priors, self._kept, self._checked, strict=True)
        ]
        self.surest = max(self._rates)


@dataclass
class Guesser:
    """One stream's prompt lookup: the n-grams of its text so far, each at the latest place
    it ended, and the run of its latest guesses (see the module's docstring)."""

    tokens: list[int]  # the prompt, then every token generated
    rates: KeptRates = field(default_factory=KeptRates)  # the engine's, shared by its streams
    run: int = 0  # how long a run the latest guesses follow
    _ends: dict[tuple[int, ...], int] = field(default_factory=dict)
    _indexed: int = 0  # n-grams ending before this index are in `_ends`
    _seen: int = 0  # of the stream's generated tokens, those appended to `tokens`
    _pause: int = 0  # steps between lookups, while they find nothing worth guessing
    _paused: int = 0  # steps left before the next lookup

    def looks(self) -> bool:
        """Whether the stream looks for guesses this step (asked once a step). One whose
        lookups find nothing worth guessing (text that does not repeat) looks again after a
        pause that doubles up to MAX_PAUSE steps: a lookup is host work between two decodes."""
        if self._paused:
            self._paused -= 1
            return False
        return True

    def offer(
        self, generated: Sequence[int], limit: int, floor: float, alone: float
    ) -> tuple[list[int], list[float]]:
        """Up to `limit` guesses and their chances, those above `floor`. Lookups pause where
        even a stream alone would not guess (`alone`: the least chance then): no match, or a
        run at which guesses fail; not where a big batch raises the floor for a while."""
        guesses = self.guess(generated, limit) if limit else []
        chances = self.chances(len(guesses), floor) if guesses else []
        pays_alone = bool(guesses) and self.rates.rate(self.run) > alone
        self._pause = 0 if pays_alone else min(max(1, 2 * self._pause), MAX_PAUSE)
        self._paused = self._pause
        return guesses[: len(chances)], chances

    def text(self, generated: Sequence[int]) -> list[int]:
        """The stream's text: its prompt and the tokens it has generated."""
        self.tokens.extend(generated[self._seen :])
        self._seen = len(generated)
        return self.tokens

    def guess(self, generated: Sequence[int], limit: int) -> list[int]:
        """Up to `limit` tokens that followed the latest earlier occurrence of the text's
        last n tokens (n from the longest of NGRAM_SIZES); `run` becomes how far back the
        text matches there."""
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
                run = size
                longest = min(at, 1 << (BANDS - 2))  # (runs from there on share the last band)
                while run < longest and tokens[at - run - 1] == tokens[n - run - 1]:
                    run += 1
                self.run = run
                return tokens[at : at + limit]
        return []

    def chances(self, n: int, floor: float) -> list[float]:
        """How likely each of the stream's next `n` guesses is kept, while above `floor`."""
        return self.rates.chances(self.run, n, floor)

    def kept(self, guessed: int, kept: int) -> None:
        """Learn from a step: of `guessed` guesses the first `kept` were kept. A draft
        model's run grows with the guesses kept in a row and ends at one dropped."""
        self.rates.kept(self.run, guessed, kept)
        self.run = self.run + kept if kept == guessed else 0


def least_chance(yields: float, tokens: float, cost: StepCost) -> float:
    """The chance below which no guess pays in a step that yields `yields` tokens and decodes
    `tokens` (taking guesses only raises it: see `plan_guesses`)."""
    return yields * (1 + cost.row) / (cost.fixed_tokens + tokens)


def plan_guesses(
    chances: Sequence[Sequence[float]], yields: float, tokens: int, cost: StepCost, room: int
) -> list[int]:
    """How many guesses each stream decodes this step. `chances`: how likely each stream's
    guesses are kept, in order (each no likelier than the one before); `yields` the tokens
    the step gives without guesses (one per stream, and the prompt tokens it reads), `tokens`
    those it decodes; `room` the guesses the step can hold. Guesses go in order of their
    chance while it exceeds what a guess costs the step's rate (see the module's docstring)."""
    taken = [0] * len(chances)
    best_next = [stream[0] if stream else 0.0 for stream in chances]
    decoded = float(tokens)  # a guess counts 1 + cost.row: its token, and the host's work on it
    while room > 0:
        best = max(range(len(chances)), key=best_next.__getitem__, default=None)
        if best is None or best_next[best] <= least_chance(yields, decoded, cost):
            break
        yields += best_next[best]
        decoded += 1 + cost.row
        room -= 1
        taken[best] += 1
        stream = chances[best]
        best_next[best] = stream[taken[best]] if taken[best] < len(stream) else 0.0
    return taken
