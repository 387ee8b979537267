"""What a decode step costs on this engine's device, as `fixed + per_token * tokens` seconds,
measured when the engine loads. Two choices weigh a token against the step's fixed part:
how many tokens a stream guesses ahead (drafts.py) and which holes between running sequences
are worth a filler token (step_plan.py)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from .native import Batch, LlamaContext


@dataclass(frozen=True)
class StepCost:
    """A decode step's seconds as `fixed + per_token * tokens`, from the engine's own device."""

    fixed: float
    per_token: float
    # The host's work on a guessed row (its sampling with the stream's chain), in tokens' worth:
    # a guess costs the step 1 + row tokens. A guess, until the engine has timed its own.
    row: float = 0.1
    # A lone stream's first guess, timed as it is: what a second token adds to a 1-token step
    # (on a tiny model on a CPU 0.8x of it, where the line through 1 and 9 tokens says 0.6x).
    one: float = 0.0  # a 1-token step's seconds (0: fixed + per_token)
    second: float = 0.0  # (0: per_token)

    def first_guess(self, host_s: float) -> float:
        """The least chance a lone stream's first guess needs to pay, where the step also
        costs `host_s` beyond a step without guesses."""
        one = self.one or self.fixed + self.per_token
        return ((self.second or self.per_token) + self.row * self.per_token + host_s) / one

    @property
    def fixed_tokens(self) -> float:
        """The fixed part in tokens' worth: a/b."""
        return self.fixed / self.per_token

    @classmethod
    def measure(cls, ctx: LlamaContext, seq: int, token: int, rounds: int = 3) -> StepCost:
        """Time decodes of 1, 2 and 1 + 8 tokens on a free sequence (left empty after), the
        median of `rounds` each; each token with a logits row where the context has rows
        for guesses, else the last only (a filler has none). Each size's first decode only
        warms up: it re-plans the graph (taking turns between the sizes, every decode did,
        which made a tiny model's 1-token step look 1.5x dearer than it is). The 1-token
        step warms up longer: it comes first after loading, when the weights are cold."""
        batch = Batch(9)
        times: dict[int, list[float]] = {1: [], 2: [], 9: []}
        try:
            for n in (1, 2, 9):
                rows = [1] * n if ctx.guesses >= n - 1 else [0] * (n - 1) + [1]
                batch.fill([token] * n, list(range(n)), [seq] * n, rows)
                warm = 2 * rounds if n == 1 else 0
                for _ in range(warm + rounds + 1):
                    start = time.perf_counter()
                    ctx.decode(batch)
                    ctx.synchronize()
                    times[n].append(time.perf_counter() - start - ctx.waited_s)
                    ctx.free_sequence(seq)
        finally:
            batch.free()
        one, two, nine = (statistics.median(times[n][-rounds:]) for n in (1, 2, 9))
        per_token = max((nine - one) / 8, one / 64)  # (noise must not make it ~0 or less)
        second = max(two - one, one / 64)
        return cls(max(one - per_token, per_token / 4), per_token, one=one, second=second)
