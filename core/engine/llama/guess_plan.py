"""Speculative decoding's plan: how many tokens each stream guesses ahead in a step (the
arithmetic is drafts.py's, over the step cost measured at load), and what the plan learns
from the steps that guessed: what a guessed row's sampling costs the host, and what a lone
stream's step costs in Python that a lone run (lone_run.py) does without."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .draft_model import DraftModel
from .drafts import MAX_GUESSES, least_chance, plan_guesses
from .slot import Slot
from .slot_table import SlotTable
from .step_cost import StepCost

_ROW_STEP = 0.05  # how fast the time of a guessed row's sampling follows each stream's rows
_ROWS_PER_UPDATE = 16  # guessed rows timed between two updates of the step cost's `row`
_LEAST_ROW = 0.02  # a guess never counts less than this over its token: the model's error
_HOST_STEP = 0.1  # how fast the Python time of a lone stream's step follows its steps
_LONE_STEP = 0.1  # how fast the cost of a lone stream's guesses follows its guessing steps
_LONE_TOKEN = 0.01  # and its lone decode, each decode of its runs (a short run weighs little)
TRUSTED = 4  # a lone stream's guessing steps timed before their cost replaces the load's
# Each decode of a lone run moves a guess's learnt cost back toward the load's measure by
# this much (2 % a 200-token run): a cost learnt too high for guesses to pay comes back, in
# time, to be tried again.
_FADE = 0.0001


class GuessPlan:
    """The guesses of the batch loop's steps (its thread only; a lone run's reader while it
    runs). `cost` is the step cost, its `row` learnt as guessed rows are timed."""

    def __init__(self, seqs: SlotTable, cost: StepCost, draft: DraftModel | None) -> None:
        self._seqs = seqs
        self._n_ctx_seq = seqs.ctx.n_ctx_seq
        self._draft = draft  # guesses from a draft model, not the text
        self.cost = cost
        self._alone = least_chance(1, 1, cost)  # what a guess needs at one stream
        self._row_s = 0.0  # host seconds a guessed row's sampling takes, lately
        self._rows_timed = 0
        self._step_host_s = 0.0  # a lone stream's step's seconds beside its decode, lately
        self._loaded = cost  # the step cost measured at load, which the learnt one fades to
        self._one_s = cost.one or cost.fixed + cost.per_token  # a lone decode, lately
        self._guess_s = cost.second or cost.per_token  # what a guess adds to it, lately
        self._guess_steps = 0  # a lone stream's guessing steps timed

    def take(
        self, decoding: Sequence[Slot], chunks: Sequence[tuple[Slot, int]], *, lone: bool
    ) -> dict[Slot, list[int]]:
        """The tokens each stream guesses ahead this step, as many as pay (drafts.py).
        `lone`: the one stream would otherwise run alone in C, so a guess must also pay the
        step's Python."""
        guessing = [(s, g) for s in decoding if (g := s.guesser) is not None and g.looks()]
        rates = self._seqs.kept_rates
        if not guessing:
            rates.idle()
            return {}
        tokens = len(decoding) + sum(n for _, n in chunks)  # what the step yields anyway
        floor, alone = least_chance(tokens, tokens, self.cost), self._alone
        if lone:
            floor = alone = self.cost.first_guess(self._step_host_s)
        if rates.surest <= floor:
            rates.idle()  # no guess can pay: none is looked for
            return {}
        limits = [
            max(0, min(
                MAX_GUESSES,
                slot.request.max_tokens - slot.request.tokens_out - 1,  # (the step's own token)
                self._n_ctx_seq - slot.n_past - 2,
            ))
            for slot, _ in guessing
        ]  # fmt: skip
        pairs = list(zip(guessing, limits, strict=True))
        if self._draft is None:  # the text's own continuations, then as many as pay
            found = [g.offer(s.generated, n, floor, alone) for (s, g), n in pairs]
            offers, chances = [o for o, _ in found], [c for _, c in found]
            if not any(chances):
                rates.idle()
                return {}
            taken = plan_guesses(chances, tokens, tokens, self.cost, MAX_GUESSES)
        else:  # as many as pay, then the draft model makes them
            chances = [g.chances(n, floor) for (_, g), n in pairs]
            taken = plan_guesses(chances, tokens, tokens, self.cost, MAX_GUESSES)
            asked = [
                (s.index, g.text(s.generated), n)
                for (s, g), n in zip(guessing, taken, strict=True)
                if n
            ]
            made = iter(self._draft.guess(asked))
            offers = [next(made) if n else [] for n in taken]
        if not any(taken):
            rates.idle()
        return {
            slot: offer[:n]
            for (slot, _), offer, n in zip(guessing, offers, taken, strict=True)
            if n
        }

    def may_pay_alone(self) -> bool:
        """Whether a guess could ever pay a lone stream: a chance is at most 1, and where a
        second token costs a step more than a first (a tiny model on a CPU) a lone run's
        reader need not look for one after every token. (Without the step's Python, which
        `take` weighs: an estimate of it too high once must not stop the looking for good.)"""
        return self.cost.first_guess(0.0) < 1.0

    def time_rows(self, seconds: float, rows: int) -> None:
        """Learn what sampling a guessed row costs the host, in tokens' worth of the step
        (StepCost.row), from the rows of each guessing stream: a greedy row is ~20 µs against
        a 6 ms token on the 2-core EPYC, a sampled 32k row ~120 µs against ~1 ms."""
        self._row_s += _ROW_STEP * (seconds / rows - self._row_s)
        self._rows_timed += rows
        if self._rows_timed >= _ROWS_PER_UPDATE:
            self._rows_timed = 0
            row = max(_LEAST_ROW, self._row_s / self.cost.per_token)
            self.cost = replace(self.cost, row=row)
            self._alone = least_chance(1, 1, self.cost)

    def time_lone_run(self, decode_s: float, decoded: int) -> None:
        """Learn what a decode costs a lone stream in C, from a run's `decoded` decodes, each
        weighing alike: a short run's first decode, which may plan the graph anew after a
        guessing step, must not make a lone decode look dear and guesses cheap."""
        if decoded:
            self._one_s += (1 - (1 - _LONE_TOKEN) ** decoded) * (decode_s / decoded - self._one_s)
            loaded = self._loaded.second or self._loaded.per_token
            self._guess_s += (1 - (1 - _FADE) ** decoded) * (loaded - self._guess_s)
            self._learnt_alone()

    def time_guessing(self, decode_s: float, guesses: int) -> None:
        """Learn what `guesses` add to a lone stream's decode, from a step that took them.
        The load's measure may say less than a step pays in use: a tiny model on a CPU, all
        logits rows, took 2.1x a lone decode for one guess, where the load measured 1.8x."""
        extra = max(self._one_s / 64, decode_s - self._one_s) / guesses  # (never 0: unset)
        self._guess_steps += 1  # (the first steps are averaged with the load's measure)
        self._guess_s += max(_LONE_STEP, 1 / (self._guess_steps + 1)) * (extra - self._guess_s)
        self._learnt_alone()

    def _learnt_alone(self) -> None:
        if self._guess_steps >= TRUSTED:
            self.cost = replace(self.cost, one=self._one_s, second=self._guess_s)

    def time_step(self, host_s: float) -> None:
        """Learn a lone stream's step's own Python (beside its decode and its guesses'
        checking), which a guess must pay where the stream could run alone."""
        self._step_host_s += _HOST_STEP * (host_s - self._step_host_s)
