"""Models by name: pull them from the Hugging Face Hub, Ollama's registry or a URL (checked
by sha256, resumed when cut), and keep them in a library the host serves from."""

from .names import ModelName, parse_name, split_peer
from .pull import PullEvent, pull, pull_plan
from .store import Library, LibraryModel

__all__ = [
    "Library",
    "LibraryModel",
    "ModelName",
    "PullEvent",
    "parse_name",
    "pull",
    "pull_plan",
    "split_peer",
]
