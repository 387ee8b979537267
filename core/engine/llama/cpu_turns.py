"""Engines on the CPU take turns to decode once their threads outnumber the CPUs.

Each engine decodes on a thread of its own, and OpenMP gives each such thread a team of
workers, which ggml's CPU backend meets at a barrier after every node of the graph. While the
teams' threads add up to no more than the CPUs, decodes run side by side. Past that, two at
once oversubscribe the cores and the barriers wait on threads the system has put aside (two
2-thread engines on 2 cores decoding together: 46-84 tokens/s in all, one alone ~100,
bench/bench_two_engines.py), so they take turns: each decode has every core its engine was
given. (openmp.py sets how long those barriers spin.)
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import llama_cpp as llama

_CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
_turn = threading.Lock()
_teams: dict[int, int] = {}  # each decoding thread's OpenMP team: its threads


def decode(ptr: Any, raw: Any, on_cpu: bool, threads: int) -> tuple[int, float]:
    """llama_decode of a context's batch, in turn where it runs on the CPU and the teams'
    threads outnumber the CPUs: its return code, and the seconds it waited for its turn
    (which timings leave out)."""
    if not on_cpu:
        return int(llama.llama_decode(ptr, raw)), 0.0
    _teams[threading.get_ident()] = threads
    if not _outnumbered():
        return int(llama.llama_decode(ptr, raw)), 0.0
    start = time.perf_counter()
    with _turn:
        waited = time.perf_counter() - start
        return int(llama.llama_decode(ptr, raw)), waited


def takes_turns(on_cpu: bool) -> bool:
    """Whether a decode on the CPU now waits for its turn (the teams outnumber the CPUs)."""
    return on_cpu and _outnumbered()


def _outnumbered() -> bool:
    """Whether the teams' threads outnumber the CPUs."""
    return sum(tuple(_teams.values())) > _CPUS  # (a copy: other threads may join meanwhile)


def leave() -> None:
    """The calling thread decodes no more (its engine closed): its team no longer counts."""
    _teams.pop(threading.get_ident(), None)
