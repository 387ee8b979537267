"""A lone stream's run (lone_run.c): while one stream decodes with nothing beside it, its
decodes follow one another in C, and a thread here hands each token to the step's code (its
text, stop strings, events) while the next decode runs.

Between two decodes the batch loop's Python step costs ~70 µs a token, which decides one
stream's rate where a decode is short: a tiny model on a CPU, a 1B model on a GPU. In a run,
only the sampling stays between two decodes (greedy, or a top-k row: step_sampler.py).

The reader looks for tokens every token's time while they come, and waits to be woken only
once they stop coming: C writes its wake byte only then, since waking a thread on another
core costs the decoding thread ~19 µs a token in a VM (an interprocessor interrupt).

The run ends where C stops (the job's last token, `limit`, `max_s`, a failure) or where
`stop` is called from any thread: a stop string or a cancel (the reader), a new job (the
batch loop's event-loop side). A run stopped by the reader may have decoded a token or two
past the job's end: the step trims those cells.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .hot_loops import LIBRARY, llama_function
from .native import Batch, LlamaContext, LlamaModel
from .sampler import TOKEN_DATA, SamplerChain

log = logging.getLogger(__name__)

MAX_S = 0.25  # seconds a run goes at most: the loop's figures and checks stay current
# The reader's pace: it looks every token's time (at least LOOK_S[0] apart) and waits to be
# woken after MISSES looks in a row that find nothing, or where tokens take longer than
# LOOK_S[1]: beside those a wake-up is cheap, and looks would take turns with the decode's
# threads where they fill the CPUs.
FIRST_LOOK_S, LOOK_S = 0.0005, (0.00005, 0.002)
MISSES = 3
IN_GRAPH = -1  # `run`'s top_k where the chain runs in the graph (a GPU's, all layers there)
# A job's own end tokens C checks (chat turn markers: a few). Past these the reader still
# ends the job at one (`Stepper._ends`), a decode later.
_MAX_ENDS = 64

_p, _i32, _f64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_double


class _Run(ctypes.Structure):
    """lone_run.c's `lone_run`, field for field."""

    _fields_ = [
        ("ctx", _p), ("vocab", _p), ("decode", _p), ("logits", _p), ("is_eog", _p),
        ("sampled", _p), ("chain_sample", _p), ("batch", _p), ("n_vocab", _i32),
        ("top_k", _i32), ("in_graph", _i32), ("stateful", _i32), ("chain", _p), ("apply", _p),
        ("accept", _p), ("room", _p), ("room_size", _i32), ("ends", _p), ("n_ends", _i32),
        ("ignore_eos", _i32), ("limit", _i32), ("max_s", _f64), ("wake_fd", _i32),
        ("stop", _i32), ("sleeping", _i32), ("count", _i32), ("tokens", _p), ("decoded", _i32),
        ("rc", _i32), ("decode_s", _f64),
    ]  # fmt: skip


_LAYOUT = 4  # lone_run.c's LAYOUT


def _load() -> ctypes.CDLL | None:
    """The library (CDLL: a run lets go of the GIL), where it is built and as new as this
    file: a library built before the struct changed would read the wrong fields."""
    if LIBRARY is None:
        return None
    library = ctypes.CDLL(LIBRARY)
    layout = getattr(library, "infertui_lone_run_layout", None)
    if layout is None or layout() != _LAYOUT << 16 | ctypes.sizeof(_Run):
        log.warning("the host's C loops were built from older sources (pip install -e . builds "
                    "them again): a lone stream goes step by step")  # fmt: skip
        return None
    return library


_LIBRARY = _load()
AVAILABLE = _LIBRARY is not None  # whether LoneRun can be made


@dataclass
class Ran:
    """How a run went: `decoded` decodes (each a cell of the sequence), and `rc`: 0; llama_
    decode's code where it failed; -1 where the last decode's row is left to the caller to
    sample; -2 where the chain selected no token."""

    decoded: int
    rc: int
    decode_s: float


# The reader's part: takes tokens in order, says whether the stream goes on (False: it ended).
Taker = Callable[[Sequence[int]], bool]


class LoneRun:
    """Runs a lone stream's decodes in C on the calling thread (the batch loop's), reading its
    tokens on a thread of its own. `stop` is thread-safe; everything else is the batch
    loop's."""

    def __init__(self, model: LlamaModel, ctx: LlamaContext, batch: Batch) -> None:
        if _LIBRARY is None:
            raise RuntimeError("the host's C loops are not built")
        self._call = _LIBRARY.infertui_lone_run
        self._call.argtypes, self._call.restype = [ctypes.POINTER(_Run)], None
        self._count = _LIBRARY.infertui_lone_run_count
        self._count.argtypes, self._count.restype = [ctypes.POINTER(_Run)], ctypes.c_int32
        self._sleep = _LIBRARY.infertui_lone_run_sleep
        self._awake = _LIBRARY.infertui_lone_run_awake
        for call in (self._sleep, self._awake):
            call.argtypes, call.restype = [ctypes.POINTER(_Run)], None
        self._n_vocab = model.n_vocab
        self._tokens = np.zeros(4096, dtype=np.int32)
        self._room = np.empty(model.n_vocab, dtype=TOKEN_DATA)
        self._ends = np.zeros(_MAX_ENDS, dtype=np.int32)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        run = self._run = _Run()
        self._ref = ctypes.byref(run)  # what the C calls take
        run.ctx, run.vocab, run.batch = ctx.ptr, model.vocab, ctypes.addressof(batch.raw)
        run.decode = llama_function("llama_decode")
        run.logits = llama_function("llama_get_logits_ith")
        run.is_eog = llama_function("llama_vocab_is_eog")
        run.sampled = llama_function("llama_get_sampled_token_ith")
        run.chain_sample = llama_function("llama_sampler_sample")
        run.apply = llama_function("llama_sampler_apply")
        run.accept = llama_function("llama_sampler_accept")
        run.n_vocab, run.room, run.room_size = model.n_vocab, self._room.ctypes.data, model.n_vocab
        run.ends, run.tokens, run.wake_fd = self._ends.ctypes.data, self._tokens.ctypes.data, -1
        self._batch = batch
        # the reader's state for the run under way
        self._take: Taker | None = None
        self._taken = 0
        self._ended = False
        self._first_at, self._first_count = 0.0, 0  # the run's first look that took tokens
        self._error: BaseException | None = None
        self._lock = threading.Lock()  # held while tokens are taken
        self._quit = False
        self._reader = threading.Thread(target=self._read, name="lone-run-reader", daemon=True)
        self._reader.start()

    def stop(self) -> None:
        """Thread-safe: the run under way (or the next, until `arm`) decodes no more."""
        self._run.stop = 1

    def arm(self) -> None:
        """Let the next run go (the batch loop, under the lock that `stop`'s callers take)."""
        self._run.stop = 0

    def run(
        self,
        slot_seq: int,
        token: int,
        pos: int,
        chain: SamplerChain,
        top_k: int,
        ends: Sequence[int],
        ignore_eos: bool,
        limit: int,
        take: Taker,
    ) -> Ran:
        """Decode `token` at `pos` of sequence `slot_seq` and on, sampling each next token with
        `chain` (top_k 0: greedy; IN_GRAPH: the chain runs in the graph), up to `limit` tokens;
        `take` gets them on the reader thread, and those it has not taken when C stops on
        this one. Returns once every token the run made is taken (or the stream ended)."""
        run = self._run
        self._batch.fill([token], [pos], [slot_seq], [1])
        run.in_graph, run.stateful = int(top_k == IN_GRAPH), int(chain.stateful)
        run.top_k, run.chain = max(top_k, 0), ctypes.cast(chain.ptr, ctypes.c_void_p)
        ends = list(ends)[:_MAX_ENDS]
        self._ends[: len(ends)] = ends
        run.n_ends, run.ignore_eos = len(ends), int(ignore_eos)
        run.limit, run.max_s = min(limit, len(self._tokens)), MAX_S
        run.count = run.decoded = run.rc = 0
        run.decode_s = 0.0
        with self._lock:
            self._taken, self._ended, self._error = 0, False, None
            self._take = take
        try:
            run.wake_fd = self._wake_w
            self._call(self._ref)
            run.wake_fd = -1
            with self._lock:  # the tokens the reader has not taken yet, taken here
                self._look()
        finally:
            with self._lock:
                self._take = None
        if self._error is not None:
            raise self._error
        return Ran(run.decoded, run.rc, run.decode_s)

    def close(self) -> None:
        self._quit = True
        self._wake()
        self._reader.join(5)
        if not self._reader.is_alive():  # (else it may still read: its pipe stays open)
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # (full: the reader has wakes waiting)
            os.write(self._wake_w, b"\0")

    def _read(self) -> None:
        while True:
            self._sleep(self._ref)  # from here on, C wakes this thread after each token
            with self._lock:
                waiting = self._running() and self._count(self._ref) > self._taken
            if not waiting:
                self._wait()
            self._awake(self._ref)
            if self._quit:
                return
            misses = 0
            while misses < MISSES:  # look every token's time while the run makes tokens
                with self._lock:
                    took, runs = self._look(), self._running()
                if not runs:
                    break
                misses = 0 if took else misses + 1
                pace = self._pace()
                if pace > LOOK_S[1]:
                    break
                time.sleep(max(pace, LOOK_S[0]))

    def _wait(self) -> None:
        """Until a byte comes: C's after a token, or `close`'s."""
        os.read(self._wake_r, 4096)

    def _pace(self) -> float:
        """A token's time in this run since its first token (whose decode may have planned a
        new graph), FIRST_LOOK_S before its second."""
        since = self._taken - self._first_count
        return (time.perf_counter() - self._first_at) / since if since > 0 else FIRST_LOOK_S

    def _running(self) -> bool:
        """Under the lock: whether a run's tokens are still to be taken."""
        return self._take is not None and not self._ended

    def _look(self) -> bool:
        """Under the lock: hand the tokens made since the last look to the run's taker.
        Whether there were any."""
        take = self._take
        if take is None or self._ended:
            return False
        count = int(self._count(self._ref))
        if count <= self._taken:
            return False
        tokens = self._tokens[self._taken : count].tolist()
        if not self._taken:
            self._first_at, self._first_count = time.perf_counter(), count
        self._taken = count
        try:
            goes_on = take(tokens)
        except BaseException as exc:  # raised on the batch loop's thread
            self._error, goes_on = exc, False
        if not goes_on:
            self._ended = True
            self.stop()
        return True
