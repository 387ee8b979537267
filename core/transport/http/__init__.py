"""HTTP face of the host: specs 001, 002 and 004 served by FastAPI inside the host's loop."""

from .app import create_app
from .server import HttpServer, parse_listen

__all__ = ["HttpServer", "create_app", "parse_listen"]
