"""OpenMP's waiting, set before llama.cpp's CPU backend (and with it libgomp) loads.

ggml's CPU backend meets its threads at an OpenMP barrier after every node of the graph.
libgomp spins there a while before it sleeps, but only 100 spins once the process holds more
OpenMP threads than CPUs, which a host does as soon as it loads a second model (each engine's
thread has a team of its own): every barrier then sleeps and wakes, and an engine beside an
idle one decoded at less than half its speed (35-44 against 86-109 tokens/s, the bundled
model on two cores, bench/bench_two_engines.py). `ACTIVE` makes that 1,000 spins;
`GOMP_SPINCOUNT` keeps a lone team's wait at libgomp's usual 300,000 (`ACTIVE` alone spins for
ever: a core busy while the host is idle). Where the user set a wait policy, neither is
touched (a spin count overrides what the policy implies). Engines on the CPU also take turns
to decode once their threads outnumber the CPUs (llama/cpu_turns.py).
"""

from __future__ import annotations

import os

if "OMP_WAIT_POLICY" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "ACTIVE"
    os.environ.setdefault("GOMP_SPINCOUNT", "300000")
