"""The host: HostService, the one door to engines, pools and transports for every face."""

from .prepare import Ask
from .service import HostService, Transport
from .specs import engine_spec, spec_from_entry

__all__ = ["Ask", "HostService", "Transport", "engine_spec", "spec_from_entry"]
