"""HTTP face of the host: specs 001, 002 and 004 served by FastAPI inside the host's loop."""

from .access import Access
from .app import create_app
from .server import HttpServer, is_loopback, parse_listen

__all__ = ["Access", "HttpServer", "create_app", "is_loopback", "parse_listen"]
