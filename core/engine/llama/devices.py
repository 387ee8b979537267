"""The compute devices llama.cpp sees (CPU, GPUs) and their memory, read through ggml's
backend registry. A CUDA build lists each card with its free and total memory; a CPU build
lists only the CPU, whose memory is the machine's RAM.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from llama_cpp._ggml import libggml

from .backend import init_backend

_lib = libggml
_lib.ggml_backend_dev_count.restype = ctypes.c_size_t
_lib.ggml_backend_dev_count.argtypes = []
_lib.ggml_backend_dev_get.restype = ctypes.c_void_p
_lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
_lib.ggml_backend_dev_name.restype = ctypes.c_char_p
_lib.ggml_backend_dev_name.argtypes = [ctypes.c_void_p]
_lib.ggml_backend_dev_description.restype = ctypes.c_char_p
_lib.ggml_backend_dev_description.argtypes = [ctypes.c_void_p]
_lib.ggml_backend_dev_type.restype = ctypes.c_int
_lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
_lib.ggml_backend_dev_memory.restype = None
_lib.ggml_backend_dev_memory.argtypes = [
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_size_t),
    ctypes.POINTER(ctypes.c_size_t),
]

_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}
MIB = 2**20


@dataclass(frozen=True, slots=True)
class Device:
    """One device as ggml reports it now."""

    index: int
    name: str  # "CUDA0", "CPU"
    description: str  # "NVIDIA H100 80GB HBM3"
    kind: str  # "cpu", "gpu", "igpu", "accel"
    free_bytes: int
    total_bytes: int

    @property
    def used_bytes(self) -> int:
        return max(0, self.total_bytes - self.free_bytes)

    @property
    def dedicated(self) -> bool:
        """A card with its own memory (where the KV cache and the weights must fit)."""
        return self.kind == "gpu"


def devices() -> list[Device]:
    """Every device llama.cpp can use, with its memory as of now."""
    init_backend()
    out = []
    for i in range(int(_lib.ggml_backend_dev_count())):
        dev = _lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        _lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        out.append(
            Device(
                index=i,
                name=(_lib.ggml_backend_dev_name(dev) or b"?").decode(),
                description=(_lib.ggml_backend_dev_description(dev) or b"").decode(),
                kind=_KINDS.get(int(_lib.ggml_backend_dev_type(dev)), "other"),
                free_bytes=int(free.value),
                total_bytes=int(total.value),
            )
        )
    return out


def gpus() -> list[Device]:
    """The devices with memory of their own, in llama.cpp's order (`--main-gpu` indexes it)."""
    return [d for d in devices() if d.dedicated]


@dataclass(frozen=True, slots=True)
class CardsInUse:
    """The cards a model is spread over, added up: what a dashboard shows as its GPU."""

    name: str  # "CUDA0 NVIDIA H100 80GB HBM3", or "CUDA0+CUDA1 2 x NVIDIA H100 80GB HBM3"
    used_bytes: int
    total_bytes: int


def cards_in_use(cards: list[Device]) -> CardsInUse | None:
    """One card as it is; several (a model spread over them) as one, their memory added up
    (the first alone hid the others: half the VRAM of a model split over two cards)."""
    if not cards:
        return None
    if len(cards) == 1:
        card = cards[0]
        name = f"{card.name} {card.description}".strip()
    else:
        kinds = sorted({card.description for card in cards})
        what = f"{len(cards)} x {kinds[0]}" if len(kinds) == 1 else ", ".join(kinds)
        name = f"{'+'.join(card.name for card in cards)} {what}".strip()
    used = sum(card.used_bytes for card in cards)
    return CardsInUse(name, used, sum(card.total_bytes for card in cards))
