"""Settings: a TOML file under the XDG config dir, then `INFERTUI_*` environment, then flags
(settings.py). One module per part of the file: `[host]` (host.py), its `[host.engine]`
(engine.py), `[client]` and `[ui]` (client.py)."""

from .client import ChatSampling, ClientSettings, UiSettings
from .engine import EngineDefaults
from .host import (
    HostSettings,
    HttpSettings,
    LedgerSettings,
    P2PSettings,
    SharesSettings,
    UpstreamSettings,
    UserPolicy,
)
from .settings import Settings, config_path, first_problem, load_settings, save_to_file

__all__ = [
    "ChatSampling",
    "ClientSettings",
    "EngineDefaults",
    "HostSettings",
    "HttpSettings",
    "LedgerSettings",
    "P2PSettings",
    "Settings",
    "SharesSettings",
    "UiSettings",
    "UpstreamSettings",
    "UserPolicy",
    "config_path",
    "first_problem",
    "load_settings",
    "save_to_file",
]
