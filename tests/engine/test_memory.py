"""The memory check and `--parallel auto` against a GPU's free memory (issue 10 §3), with a
pretend GPU: the arithmetic is the same on a real one, which this machine does not have."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from infertui.core.engine.llama import memory
from infertui.core.engine.llama.devices import MIB, Device, cards_in_use
from infertui.core.protocol.errors import ErrorKind, InferError

GIB = 1024 * MIB


@dataclass
class ModelShape:
    """What memory.py reads of a loaded model: an 8B Llama shape, all on the GPU."""

    n_embd: int = 4096
    n_vocab: int = 32_000
    offloaded_fraction: float = 1.0

    def kv_bytes_per_sequence(self, n_ctx_seq: int, n_ubatch: int) -> int:
        return 32 * 8 * (128 + 128) * 2 * n_ctx_seq  # layers x kv heads x (K + V) x f16


def gpu(free_gib: float, total_gib: float = 80.0) -> Device:
    return Device(0, "CUDA0", "NVIDIA H100 80GB HBM3", "gpu", int(free_gib * GIB),
                  int(total_gib * GIB))  # fmt: skip


@pytest.fixture
def card(monkeypatch: pytest.MonkeyPatch):
    def set_free(free_gib: float) -> None:
        monkeypatch.setattr(memory, "devices", lambda: [gpu(free_gib)])

    monkeypatch.setattr(memory, "available_ram_bytes", lambda: 64 * GIB)
    return set_free


def test_auto_fills_the_gpu_up_to_llama_cpps_limit(card) -> None:
    card(75.0)
    n, why = memory.auto_parallel(ModelShape(), n_ctx_seq=1024, n_batch=512)
    assert n == memory.max_sequences() == 256
    assert "bound by llama.cpp" in why and "on the GPU" in why


def test_auto_is_bound_by_free_vram_with_long_contexts(card) -> None:
    card(20.0)
    n, why = memory.auto_parallel(ModelShape(), n_ctx_seq=8192, n_batch=512)
    kv_per_slot = ModelShape().kv_bytes_per_sequence(8192, 512)  # 1 GiB
    assert 1 <= n < 20 * GIB / kv_per_slot
    assert f"{n} slots x 8192 tokens" in why and "bound by free memory" in why
    memory.check_context_memory(ModelShape(), 8192, n, 512)  # what auto picks fits


def test_a_context_too_big_for_the_gpu_is_out_of_memory_before_llama_cpp_tries(card) -> None:
    card(8.0)
    with pytest.raises(InferError) as failed:
        memory.check_context_memory(ModelShape(), 8192, 64, 512)
    assert failed.value.kind is ErrorKind.OUT_OF_MEMORY
    assert "on the GPU" in failed.value.message and "--parallel" in failed.value.message


def test_more_slots_than_llama_cpp_allows_is_a_clear_error(card) -> None:
    card(75.0)
    with pytest.raises(InferError) as failed:
        memory.check_context_memory(ModelShape(), 512, 1000, 512)
    assert failed.value.kind is ErrorKind.INVALID_PARAMS
    assert "256" in failed.value.message


def test_weights_bigger_than_the_free_vram_are_refused(card) -> None:
    card(4.0)
    with pytest.raises(InferError) as failed:
        memory.check_weights_fit("big.gguf", 5 * GIB, n_gpu_layers=-1)
    assert failed.value.kind is ErrorKind.OUT_OF_MEMORY and "on the GPU" in failed.value.message
    memory.check_weights_fit("big.gguf", 3 * GIB, n_gpu_layers=-1)


def test_no_gpu_means_ram_and_a_cpu_sized_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "devices", lambda: [])
    monkeypatch.setattr(memory, "available_ram_bytes", lambda: 64 * GIB)
    monkeypatch.setattr(memory.os, "cpu_count", lambda: 2)
    n, why = memory.auto_parallel(ModelShape(offloaded_fraction=0.0), 1024, 512)
    assert n == memory.CPU_SLOTS_PER_CORE * 2
    assert "of memory" in why and "bound by CPU cores" in why


def test_any_count_of_layers_past_the_model_s_means_all_of_them() -> None:
    """-ngl 99 and the engine manager's default 100 offload every layer: sampling in the graph
    and the overlap must come on as they do for -1 (they stayed off)."""
    from infertui.core.engine.llama.engine import all_layers

    n_layer = 32  # and the output layer: 33 in all
    assert all_layers(-1, n_layer) and all_layers(99, n_layer) and all_layers(33, n_layer)
    assert not all_layers(32, n_layer)  # the output layer stays on the CPU: logits there
    assert not all_layers(0, n_layer) and not all_layers(8, n_layer)


def test_a_gpu_out_of_memory_while_loading_is_said_as_such() -> None:
    """llama.cpp's last line is "failed to load model"; the cause comes before it."""
    from infertui.core.engine.llama.native import last_error, out_of_memory

    lines = [
        "llama_model_load: loading model tensors, this can take a while...",
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 40960.00 MiB on device 0: "
        "cudaMalloc failed: out of memory",
        "alloc_tensor_range: failed to allocate CUDA0 buffer of size 42949672960",
        "llama_model_load: error loading model: unable to allocate CUDA0 buffer",
        "llama_model_load_from_file_impl: failed to load model",
    ]
    reason = last_error(lines)
    assert reason is not None and out_of_memory(reason)
    assert "CUDA0 buffer" in reason
    assert last_error(["llama_model_load: error loading model: bad magic"]) == (
        "error loading model: bad magic"
    )
    assert not out_of_memory("bad magic")
    broken = [  # every load logs no_alloc: a broken model is not out of memory
        "print_info: no_alloc = 0",
        "llama_model_load: error loading model: missing tensor 'blk.0.attn_q.weight'",
        "llama_model_load_from_file_impl: failed to load model",
    ]
    reason = last_error(broken)
    assert reason is not None and not out_of_memory(reason)


def test_sliding_window_layers_count_their_window_not_the_context() -> None:
    """Gemma 3 (one layer in six attends to all, the others to 512 tokens), as llama.cpp
    sizes its caches: the bundled model's KV buffers at 32768 x 1 are 96 + 15 MiB, where
    counting every layer whole made 576 (and --parallel auto gave five times too few)."""
    from infertui.core.engine.llama.native import kv_cells

    per_cell = 1 * (256 + 256) * 2  # the bundled model: 1 KV head of 256, f16 K and V
    assert kv_cells(18, 512, 6, 32768, 512) * per_cell == (96 + 15) * MIB
    assert kv_cells(18, 512, 6, 1024, 512) * per_cell == 18 * MIB  # window + ubatch = context
    assert kv_cells(18, 0, 0, 4096, 512) == 18 * 4096  # no window: every layer whole
    assert kv_cells(18, 512, 0, 4096, 512) == 18 * 4096  # pattern unknown: an upper bound


def test_a_model_spread_over_cards_reports_all_of_them() -> None:
    """The dashboards and /v1/host/metrics showed the first card alone for a model split
    over two: half its VRAM, and the other card's total missing."""
    gib = 2**30
    one = Device(0, "CUDA0", "NVIDIA H100 80GB HBM3", "gpu", 30 * gib, 80 * gib)
    two = Device(1, "CUDA1", "NVIDIA H100 80GB HBM3", "gpu", 40 * gib, 80 * gib)
    assert cards_in_use([]) is None
    alone = cards_in_use([one])
    assert alone is not None
    assert alone.name == "CUDA0 NVIDIA H100 80GB HBM3"
    assert (alone.used_bytes, alone.total_bytes) == (50 * gib, 80 * gib)
    both = cards_in_use([one, two])
    assert both is not None
    assert both.name == "CUDA0+CUDA1 2 x NVIDIA H100 80GB HBM3"
    assert (both.used_bytes, both.total_bytes) == (90 * gib, 160 * gib)
    other = Device(1, "CUDA1", "NVIDIA A100 40GB", "gpu", 10 * gib, 40 * gib)
    mixed = cards_in_use([one, other])
    assert mixed is not None and mixed.name == "CUDA0+CUDA1 NVIDIA A100 40GB, NVIDIA H100 80GB HBM3"
