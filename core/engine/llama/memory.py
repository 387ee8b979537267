"""Will it fit? The weights, the KV cache and the compute buffers, against free RAM and free
device memory, checked before llama.cpp allocates: on the CPU the kernel would kill the whole
host when the pages are touched, and on a GPU the error would come late and obscure.

Also sizes `--parallel auto`: as many slots of `n_ctx` tokens as the memory left after the
weights holds, within llama.cpp's own limit of sequences per context.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import llama_cpp as llama

from ...protocol.errors import ErrorKind, InferError
from .devices import Device, devices

if TYPE_CHECKING:
    from .native import LlamaModel

log = logging.getLogger(__name__)

MIB = 2**20
HEADROOM = 0.9  # of free memory we plan to use; the rest absorbs estimate error and others
CPU_SLOTS_PER_CORE = 2  # `auto` on a CPU: beyond this, streams only slow each other down


def max_sequences() -> int:
    """llama.cpp's limit of sequences in one context (LLAMA_MAX_SEQ: 256 in 0.3.36)."""
    return int(llama.llama_max_parallel_sequences())


def available_ram_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def free_memory(offloaded: bool) -> tuple[int | None, str]:
    """Free memory where a model's weights and KV cache would go, and where that is said to
    be: the GPUs' when its layers are offloaded to them, else RAM (None where unknown)."""
    if offloaded and (cards := _gpus()):
        return sum(d.free_bytes for d in cards), "on the GPU"
    return available_ram_bytes(), "of memory"


def check_weights_fit(name: str, size: int, n_gpu_layers: int) -> None:
    """The weights against RAM (CPU) or against the GPUs' free memory (all layers offloaded)."""
    if n_gpu_layers == 0:
        free, where = available_ram_bytes(), "of memory"
    elif n_gpu_layers < 0 and (cards := _gpus()):
        free, where = sum(d.free_bytes for d in cards), "on the GPU"
    else:
        return  # split between RAM and GPU: llama.cpp's allocators fail cleanly there
    if free is not None and size > free * 0.95:
        raise InferError(
            ErrorKind.OUT_OF_MEMORY,
            f"{name} needs about {size / MIB:,.0f} MiB but only {free / MIB:,.0f} MiB is free "
            f"{where}",
        )


@dataclass(frozen=True, slots=True)
class ContextNeeds:
    """What a context of `n_seq` x `n_ctx_seq` tokens takes, split by where it lives."""

    device_bytes: int  # on the GPUs (KV of offloaded layers, compute buffers)
    host_bytes: int  # in RAM (KV of CPU layers, output buffers)


def context_needs(model: LlamaModel, n_ctx_seq: int, n_seq: int, n_batch: int) -> ContextNeeds:
    """An upper-bound estimate: an f16 KV cache, the activations of the largest ubatch and
    the logits of every output row on the device, and in RAM llama.cpp's output buffers
    (logits, plus the sampled logits, probabilities and candidates of in-graph samplers)."""
    kv = model.kv_bytes_per_sequence(n_ctx_seq, max(n_batch, n_seq)) * n_seq
    compute = max(n_batch, n_seq) * model.n_embd * 4 * 48 + n_seq * model.n_vocab * 4
    outputs = n_seq * model.n_vocab * 4 * 5
    on_device = model.offloaded_fraction
    if on_device > 0 and _gpus():
        return ContextNeeds(
            device_bytes=int(kv * on_device) + compute,
            host_bytes=int(kv * (1 - on_device)) + outputs,
        )
    return ContextNeeds(device_bytes=0, host_bytes=kv + compute + outputs)


def check_context_memory(model: LlamaModel, n_ctx_seq: int, n_seq: int, n_batch: int) -> None:
    """OUT_OF_MEMORY, with the sizes and what to lower, when the context cannot fit."""
    if n_seq > max_sequences():
        raise InferError(
            ErrorKind.INVALID_PARAMS,
            f"{n_seq} slots is more than llama.cpp's {max_sequences()} sequences per context; "
            f"use --parallel {max_sequences()} or less, or --parallel auto",
            param="n_parallel",
        )
    needs = context_needs(model, n_ctx_seq, n_seq, n_batch)
    cards = _gpus()
    if needs.device_bytes and cards:
        free = sum(d.free_bytes for d in cards)
        if needs.device_bytes > free * HEADROOM:
            raise _too_big(needs.device_bytes, free, "on the GPU", n_ctx_seq, n_seq)
    ram = available_ram_bytes()
    if ram is not None and needs.host_bytes > ram * HEADROOM:
        raise _too_big(needs.host_bytes, ram, "of memory", n_ctx_seq, n_seq)


def auto_parallel(model: LlamaModel, n_ctx_seq: int, n_batch: int) -> tuple[int, str]:
    """The number of slots for `--parallel auto`, and a sentence saying why."""
    limit = max_sequences()
    cards = _gpus() if model.offloaded_fraction > 0 else []
    if cards:
        free, where = sum(d.free_bytes for d in cards), "on the GPU"
        ceiling = limit
    else:
        free, where = available_ram_bytes() or 0, "of memory"
        ceiling = min(limit, CPU_SLOTS_PER_CORE * (os.cpu_count() or 1))

    def fits(n: int) -> bool:
        needs = context_needs(model, n_ctx_seq, n, n_batch)
        return (needs.device_bytes if cards else needs.host_bytes) <= free * HEADROOM

    if not fits(1):
        needed = context_needs(model, n_ctx_seq, 1, n_batch)
        raise _too_big(needed.device_bytes if cards else needed.host_bytes, free, where,
                       n_ctx_seq, 1)  # fmt: skip
    low, high = 1, limit
    while low < high:  # the largest n that fits: needs grow with n
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    n = min(low, ceiling)
    bound = "CPU cores" if n < low else ("llama.cpp" if low == limit else "free memory")
    return n, (
        f"--parallel auto: {n} slots x {n_ctx_seq} tokens ({free / MIB:,.0f} MiB free {where} "
        f"holds {low}{'+' if low == limit else ''}; bound by {bound}; llama.cpp allows {limit})"
    )


def _too_big(needed: int, free: int, where: str, n_ctx_seq: int, n_seq: int) -> InferError:
    return InferError(
        ErrorKind.OUT_OF_MEMORY,
        f"{n_seq} slots x {n_ctx_seq} tokens need about {needed / MIB:,.0f} MiB but only "
        f"{free / MIB:,.0f} MiB is free {where}; lower --ctx or --parallel (or use "
        "--parallel auto)",
        param="n_ctx",
    )


def _gpus() -> list[Device]:
    return [d for d in devices() if d.dedicated]
