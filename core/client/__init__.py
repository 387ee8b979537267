"""One client API over both transports: `await connect("<server-id>" | "http(s)://…" |
"topic:NAME")`."""

from .base import ChatReply, ChatStats, Client, HostInfo, HostLoad
from .connect import ConnectionState, Reconnector, check_target, connect, is_url
from .errors import explain
from .topic import TopicClient

__all__ = [
    "ChatReply",
    "ChatStats",
    "Client",
    "ConnectionState",
    "HostInfo",
    "HostLoad",
    "Reconnector",
    "TopicClient",
    "check_target",
    "connect",
    "explain",
    "is_url",
]
