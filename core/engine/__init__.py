"""The engines: a GGUF model batch-decoded by llama.cpp (the only code that imports llama_cpp),
or an OpenAI-compatible upstream server; both behind one interface (interface.py)."""

from . import openmp  # noqa: F401  (first: before llama.cpp loads)
from .bundled import BUNDLED_MODEL_ID, BUNDLED_SAMPLING, bundled_model_path, is_bundled
from .interface import Engine, HealthHook, open_engine
from .llama.backend import engine_version, supports_gpu_offload, system_info
from .llama.engine import LlamaEngine
from .llama.memory import free_memory
from .types import (
    AnySpec,
    EngineSpec,
    GenerationRequest,
    Publisher,
    UpstreamSpec,
    default_threads,
)
from .upstream.engine import UpstreamEngine

__all__ = [
    "BUNDLED_MODEL_ID",
    "BUNDLED_SAMPLING",
    "AnySpec",
    "Engine",
    "EngineSpec",
    "GenerationRequest",
    "HealthHook",
    "LlamaEngine",
    "Publisher",
    "UpstreamEngine",
    "UpstreamSpec",
    "bundled_model_path",
    "default_threads",
    "engine_version",
    "free_memory",
    "is_bundled",
    "open_engine",
    "supports_gpu_offload",
    "system_info",
]
