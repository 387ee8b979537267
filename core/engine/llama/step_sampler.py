"""Sampling every output row of a decode step: the chains in the graph hand back their token
ids; the host samples the rest from the logits, as fast as the rows allow. Greedy rows without
penalties are one numpy argmax over all of them (a tenth of what the native greedy sampler
costs on a 128k vocabulary); every other chain runs natively, spread over a few threads
(ctypes releases the GIL, so they really run in parallel)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import llama_cpp as llama
import numpy as np

from .fast_rows import FAST_ROWS
from .native import floats_at
from .sampler import NO_TOKEN, TOKEN_DATA, SamplerChain
from .short_calls import HOLDING, RELEASING, ShortCalls

Row = tuple[int, SamplerChain]  # (index in the batch, the chain that samples it)
_GROUPS_MIN_VOCAB = 8192  # below this a full pass is as cheap as the prefilter
_GROUP_ROWS = 128  # tokens per group of the top-k prefilter
_SUBGROUPS = 8  # runs per group that are read again only if they can hold a top-k token
_ROWS_PER_THREAD = 4  # fewer rows than this per thread are not worth a hand-off
# Without fast_rows.c, up to this many rows in a run, each row's candidates come alone
# (`_row_candidates`, ~45 µs a 32k row on the EPYC): the vectorised pass over a block costs
# ~150 µs even for one row, and wins from about eight rows on (bench/README.md, "One stream").
# fast_rows.c takes every run, row by row: 10-13 µs a 32k row against the block's 26-62, 21-35
# a 128k row against 46-58 (warm, the 2-core Xeon).
_ROWS_ALONE = 4
_VIEWS = 1024  # logits views kept (a context's output rows: its sequences and guesses)


class StepSampler:
    """Samples every output row of one decode step, as fast as the rows allow.

    Rows sampled on the host are split into contiguous parts, one per thread: numpy and
    llama.cpp's samplers release the GIL, so the parts run in parallel. Within a part, runs of
    rows of one kind are done together:

    - greedy: one argmax over the run's logits;
    - top-k chains (temperature, top-k, top-p, min-p, a seeded draw): a small superset of
      each row's top-k tokens is found (fast_rows.c row by row where the install built it;
      else numpy, `_row_candidates` row by row for a few rows, one vectorised pass,
      `_top_k_candidates`, for more) and the native chain runs on those only. Top-k keeps
      the same tokens from them as from the whole vocabulary, so the draw is the very one
      the full chain makes, at a fraction of its cost;
    - anything else (a bias, a penalty that can lift a token, Mirostat, a grammar): the
      native chain over the whole vocabulary.
    """

    def __init__(self, n_vocab: int, threads: int | None = None) -> None:
        self._n_vocab = n_vocab
        self._views: dict[int, np.ndarray] = {}  # logits rows by address (see `_logits`)
        self._rooms = threading.local()  # each thread's candidates for fast_rows.c
        self._threads = max(1, min(8, threads or os.cpu_count() or 1))
        self._pool = (
            ThreadPoolExecutor(self._threads - 1, thread_name_prefix="sampler")
            if self._threads > 1
            else None
        )

    def sample(
        self, ctx: object, rows: Sequence[Row], ranks: Sequence[int] | None = None
    ) -> list[int]:
        """The next token of each (batch index, chain), in order. Batch loop thread only.
        `ranks`, each row's place among the batch's outputs, saves asking llama.cpp where
        every row's logits are."""
        out = [NO_TOKEN] * len(rows)
        host: list[int] = []
        for k, (row, chain) in enumerate(rows):
            if not chain.on_backend:
                host.append(k)
                continue
            token = int(llama.llama_get_sampled_token_ith(ctx, row))
            if token == NO_TOKEN:
                # The device ran only the chain's first samplers: llama.cpp hands their
                # candidates, not the vocabulary's logits, to the native chain to finish.
                token = chain.sample(ctx, row)
            elif chain.stateful:
                llama.llama_sampler_accept(chain.ptr, token)
            out[k] = token
        if not host:
            return out
        if len(host) == 1:  # one stream: none of the machinery for many rows
            k = host[0]
            out[k] = self._sample_row(ctx, *rows[k])
            return out
        # The first read synchronises the context and puts its outputs in batch order; after
        # it, reading logits has no side effects, so threads may share the rest.
        addresses = self._addresses(ctx, rows, host, ranks)
        n_parts = min(self._threads, max(1, len(host) // _ROWS_PER_THREAD))
        size = -(-len(host) // n_parts)
        parts = [host[i : i + size] for i in range(0, len(host), size)]
        futures = []
        if self._pool is not None:
            futures = [
                self._pool.submit(self._sample_part, ctx, rows, part, addresses, out)
                for part in parts[1:]
            ]
        else:
            for part in parts[1:]:
                self._sample_part(ctx, rows, part, addresses, out)
        self._sample_part(ctx, rows, parts[0], addresses, out)
        for future in futures:
            future.result()
        return out

    def _addresses(
        self, ctx: object, rows: Sequence[Row], host: list[int], ranks: Sequence[int] | None
    ) -> dict[int, int]:
        """Where each host row's logits are: llama.cpp keeps output rows in batch order, so
        two reads and arithmetic do, checked on the last row; else one read per row."""
        first, last = host[0], host[-1]
        base = _address(ctx, rows[first][0], RELEASING)  # (may wait for the device)
        if ranks is not None:
            stride = self._n_vocab * 4
            at = {k: base + (ranks[k] - ranks[first]) * stride for k in host}
            if last == first or _address(ctx, rows[last][0]) == at[last]:
                return at
        return {k: _address(ctx, rows[k][0]) for k in host}

    def _logits(self, ctx: object, row: int) -> np.ndarray:
        """A row's logits, read in place: a view made once per address (llama.cpp keeps its
        output buffer from step to step). The context has synchronised (step.py)."""
        address = _address(ctx, row)
        view = self._views.get(address)
        if view is None:
            if len(self._views) >= _VIEWS:  # (a buffer made anew leaves the old addresses)
                self._views.clear()
            view = self._views[address] = floats_at(address, self._n_vocab)
        return view

    def _sample_part(
        self,
        ctx: object,
        rows: Sequence[Row],
        part: list[int],
        addresses: dict[int, int],
        out: list[int],
    ) -> None:
        for kind, run in self._runs(rows, part, addresses):
            if kind == "native":
                for k in run:
                    out[k] = rows[k][1].sample(ctx, rows[k][0])
                continue
            size = len(run) * self._n_vocab
            block = floats_at(addresses[run[0]], size).reshape(len(run), self._n_vocab)
            if kind == "greedy":
                for k, token in zip(run, block.argmax(1).tolist(), strict=True):
                    out[k] = token
            else:
                self._top_k(block, [rows[k][1] for k in run], run, out)

    def _sample_row(self, ctx: object, row: int, chain: SamplerChain) -> int:
        kind = self._kind(chain)
        if kind == "greedy":
            return int(self._logits(ctx, row).argmax())
        if kind == "top_k":  # (one row: no other thread samples meanwhile)
            token = self._fast_top_k(_address(ctx, row), chain, hold_gil=True)
            if token >= 0:
                return token
            candidates = _row_candidates(self._logits(ctx, row), chain.top_k)
            return chain.sample_from(candidates, hold_gil=True)
        return chain.sample(ctx, row)

    def _fast_top_k(self, address: int, chain: SamplerChain, *, hold_gil: bool) -> int:
        """A top-k row's token through fast_rows.c; -1 where it is not built (or declines)."""
        if FAST_ROWS is None:
            return -1
        room = getattr(self._rooms, "room", None)
        if room is None:  # (the whole vocabulary: a row whose top tokens tie may need it)
            room = self._rooms.room = np.empty(self._n_vocab, dtype=TOKEN_DATA)
        return FAST_ROWS.sample(address, self._n_vocab, chain.top_k, chain.ptr, room,
                                hold_gil=hold_gil)  # fmt: skip

    def _runs(
        self, rows: Sequence[Row], part: list[int], addresses: dict[int, int]
    ) -> list[tuple[str, list[int]]]:
        """Consecutive rows of one kind whose logits lie back to back in memory."""
        stride = self._n_vocab * 4
        runs: list[tuple[str, list[int]]] = []
        for k in part:
            kind = self._kind(rows[k][1])
            if (
                runs
                and runs[-1][0] == kind
                and (kind == "native" or addresses[runs[-1][1][-1]] + stride == addresses[k])
            ):
                runs[-1][1].append(k)
            else:
                runs.append((kind, [k]))
        return runs

    def draw_in_c(self, chain: SamplerChain) -> int | None:
        """How C (lone_run.c) draws this chain's tokens as this sampler would: 0 greedy, else
        the chain's top-k over fast_rows.c's candidates; None where it cannot."""
        kind = self._kind(chain)
        if kind == "greedy":
            return 0
        return chain.top_k if kind == "top_k" and FAST_ROWS is not None else None

    def _kind(self, chain: SamplerChain) -> str:
        if chain.greedy:
            return "greedy"
        # (a top-k as large as the groups are many would keep the whole vocabulary)
        groups = self._n_vocab // _GROUP_ROWS
        if chain.top_k and self._n_vocab >= _GROUPS_MIN_VOCAB and chain.top_k < groups:
            return "top_k"
        return "native"

    def _top_k(
        self, block: np.ndarray, chains: list[SamplerChain], run: list[int], out: list[int]
    ) -> None:
        if FAST_ROWS is not None or len(run) <= _ROWS_ALONE:
            for logits, chain, k in zip(block, chains, run, strict=True):
                token = self._fast_top_k(logits.ctypes.data, chain, hold_gil=False)
                out[k] = (
                    token if token >= 0 else chain.sample_from(_row_candidates(logits, chain.top_k))
                )
            return
        candidates, bounds = _top_k_candidates(block, max(chain.top_k for chain in chains))
        for r, (chain, k) in enumerate(zip(chains, run, strict=True)):
            out[k] = chain.sample_from(candidates[bounds[r] : bounds[r + 1]])

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def _address(ctx: object, row: int, calls: ShortCalls = HOLDING) -> int:
    address = calls.logits_address(ctx, row)
    if not address:
        raise RuntimeError(f"llama.cpp has no logits for batch row {row}")
    return int(address)


def _row_candidates(row: np.ndarray, top_k: int) -> np.ndarray:
    """A small superset of one row's `top_k` highest tokens, as llama_token_data in ascending
    token order. The head of the row is cut into interleaved groups of `_GROUP_ROWS` tokens
    (see `_top_k_candidates`); at least top_k tokens reach the top_k-th highest group maximum,
    so every top-k token does, and the candidates are the tokens that reach it. Five numpy
    calls over a contiguous row: what decides their cost is the calls, not the arithmetic."""
    nb = len(row) // _GROUP_ROWS
    group_max = row[: nb * _GROUP_ROWS].reshape(_GROUP_ROWS, nb).max(axis=0)
    floor = np.partition(group_max, nb - top_k)[nb - top_k]
    ids = np.flatnonzero(row >= floor)
    candidates = np.zeros(len(ids), dtype=TOKEN_DATA)
    candidates["id"] = ids
    candidates["logit"] = row[ids]
    return candidates


def _top_k_candidates(block: np.ndarray, top_k: int) -> tuple[np.ndarray, list[int]]:
    """A small superset of each row's `top_k` highest tokens, as llama_token_data in ascending
    token order: all rows' candidates in one array, and where each row's begin (and end).

    The vocabulary's head is cut into `nb` interleaved groups of `_GROUP_ROWS` tokens (group g
    holds tokens g, g + nb, g + 2nb, ...), each in `_SUBGROUPS` runs of consecutive members,
    so that all maxima take one vectorised pass. At least top_k tokens reach the lowest of the
    top_k group maxima (the floor), so every top_k token does: only the subgroups whose maximum
    reaches the floor are read again, and of them only the tokens that reach it are kept. The
    tail that does not fill a group is held to the same floor.
    """
    rows, n_vocab = block.shape
    nb = n_vocab // _GROUP_ROWS
    run = _GROUP_ROWS // _SUBGROUPS
    head = block[:, : nb * _GROUP_ROWS].reshape(rows, _SUBGROUPS, run, nb)
    sub_max = head.max(axis=2)  # (rows, subgroups, nb)
    group_max = sub_max.max(axis=1)
    groups = np.argpartition(group_max, nb - top_k, axis=1)[:, nb - top_k :]
    floor = np.take_along_axis(group_max, groups, axis=1).min(axis=1)
    reaching = np.take_along_axis(sub_max, groups[:, None, :], axis=2) >= floor[:, None, None]
    row, sub, pick = np.nonzero(reaching)
    member = sub[:, None] * run + np.arange(run)  # (picked subgroups, run)
    ids = member * nb + groups[row, pick][:, None]
    rows_of = np.broadcast_to(row[:, None], ids.shape)
    if nb * _GROUP_ROWS < n_vocab:
        tail = np.arange(nb * _GROUP_ROWS, n_vocab)
        ids = np.concatenate([ids.ravel(), np.tile(tail, rows)])
        rows_of = np.concatenate([rows_of.ravel(), np.repeat(np.arange(rows), len(tail))])
    ids, rows_of = ids.ravel(), rows_of.ravel()
    logits = block[rows_of, ids]
    keep = logits >= floor[rows_of]
    ids, rows_of, logits = ids[keep], rows_of[keep], logits[keep]
    order = np.lexsort((ids, rows_of))  # by row, then by token id
    candidates = np.zeros(len(order), dtype=TOKEN_DATA)
    candidates["id"] = ids[order]
    candidates["logit"] = logits[order]
    ends = np.cumsum(np.bincount(rows_of, minlength=rows)).tolist()
    return candidates, [0, *ends]
