"""The engine: the only code that imports llama_cpp. Loads GGUF models and batch-decodes them."""

from .backend import engine_version, supports_gpu_offload, system_info
from .bundled import BUNDLED_MODEL_ID, bundled_model_path
from .engine import Engine
from .types import EngineEvent, EngineSpec, GenerationRequest, Publisher, default_threads

__all__ = [
    "BUNDLED_MODEL_ID",
    "Engine",
    "EngineEvent",
    "EngineSpec",
    "GenerationRequest",
    "Publisher",
    "bundled_model_path",
    "default_threads",
    "engine_version",
    "supports_gpu_offload",
    "system_info",
]
