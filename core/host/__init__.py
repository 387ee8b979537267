"""The host: engine registry, pools and (later) transports behind one HostService."""

from .registry import EngineRegistry, engine_status
from .service import HostService, Transport, engine_spec, spec_from_entry

__all__ = [
    "EngineRegistry",
    "HostService",
    "Transport",
    "engine_spec",
    "engine_status",
    "spec_from_entry",
]
