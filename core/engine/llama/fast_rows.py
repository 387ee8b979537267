"""fast_rows.c, where the install compiled it: one logits row's top-k candidates and its draw
in one call (step_sampler.py's top-k rows). `FAST_ROWS` is None where it was not built (no
C compiler, no Python headers): numpy does the same work then, at about twice the cost."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from .hot_loops import LIBRARY, llama_function
from .sampler import TOKEN_DATA

_ROW = ctypes.c_void_p  # const float * (an address: the logits stay llama.cpp's)


class FastRows:
    """The library's two functions, bound holding the GIL (one stream: nothing else samples)
    and letting it go (the sampler's threads, side by side)."""

    def __init__(self, path: str) -> None:
        self._apply = llama_function("llama_sampler_apply")
        self._accept = llama_function("llama_sampler_accept")
        self._holding = self._bind(ctypes.PyDLL(path))
        self._releasing = self._bind(ctypes.CDLL(path))
        candidates = ctypes.CDLL(path).infertui_row_candidates
        int32 = ctypes.c_int32
        candidates.restype = int32
        candidates.argtypes = [_ROW, int32, int32, ctypes.c_void_p, int32]
        self._candidates = candidates

    @staticmethod
    def _bind(library: ctypes.CDLL) -> Any:
        sample = library.infertui_sample_row
        sample.restype = ctypes.c_int32
        pointer, int32 = ctypes.c_void_p, ctypes.c_int32  # (row, vocab, top_k, chain, ...)
        sample.argtypes = [_ROW, int32, int32, pointer, pointer, pointer, pointer, int32]
        return sample

    def sample(
        self, row: int, n_vocab: int, top_k: int, chain: int, out: np.ndarray, *, hold_gil: bool
    ) -> int:
        """The token a chain (top-k first) draws from the logits at address `row`, accepted;
        -1 where the row has no candidates this way (nothing drawn). `out`: TOKEN_DATA room
        for the row."""
        call = self._holding if hold_gil else self._releasing
        token = int(
            call(row, n_vocab, top_k, chain, self._apply, self._accept, out.ctypes.data, len(out))
        )
        if token < -1:
            raise RuntimeError("the sampler chain selected no token")
        return token

    def candidates(self, row: np.ndarray, top_k: int) -> np.ndarray:
        """The row's candidates as step_sampler._row_candidates makes them (for the tests)."""
        logits = np.ascontiguousarray(row, dtype=np.float32)
        out = np.zeros(len(logits), dtype=TOKEN_DATA)
        n = self._candidates(logits.ctypes.data, len(logits), top_k, out.ctypes.data, len(out))
        if n < 0:
            raise ValueError(f"no candidates for a row of {len(logits)} with top_k {top_k}")
        return out[:n]


FAST_ROWS = FastRows(LIBRARY) if LIBRARY else None
