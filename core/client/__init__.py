"""One client API over both transports: `await connect("<server-id>" | "http(s)://…")`."""

from .base import ChatReply, ChatStats, Client, HostInfo
from .connect import ConnectionState, Reconnector, connect, is_url
from .errors import explain

__all__ = [
    "ChatReply",
    "ChatStats",
    "Client",
    "ConnectionState",
    "HostInfo",
    "Reconnector",
    "connect",
    "explain",
    "is_url",
]
