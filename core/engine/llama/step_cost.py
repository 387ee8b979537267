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

    @property
    def fixed_tokens(self) -> float:
        """The fixed part in tokens' worth: a/b."""
        return self.fixed / self.per_token

    @classmethod
    def measure(cls, ctx: LlamaContext, seq: int, token: int, rounds: int = 2) -> StepCost:
        """Time decodes of 1 and 1 + 8 tokens on a free sequence (left empty after), the
        median of `rounds` each; each token with a logits row where the context has rows
        for guesses, else the last only (a filler has none)."""
        batch = Batch(9)
        times: dict[int, list[float]] = {1: [], 9: []}
        try:
            for _ in range(rounds + 1):  # the first round warms up
                for n in (1, 9):
                    rows = [1] * n if ctx.guesses >= n - 1 else [0] * (n - 1) + [1]
                    batch.fill([token] * n, list(range(n)), [seq] * n, rows)
                    start = time.perf_counter()
                    ctx.decode(batch)
                    ctx.synchronize()
                    times[n].append(time.perf_counter() - start - ctx.waited_s)
                    ctx.free_sequence(seq)
        finally:
            batch.free()
        one, nine = (statistics.median(times[n][1:]) for n in (1, 9))
        per_token = max((nine - one) / 8, one / 64)  # (noise must not make it ~0 or less)
        return cls(max(one - per_token, per_token / 4), per_token)
