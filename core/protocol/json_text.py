"""JSON text from the network, parsed strictly; and JSON a model wrote, read without raising.

Python's json module accepts a lone UTF-16 surrogate escape ("\\ud800"), which no UTF-8
encoder can write back: the text then fails deep inside, at tokenization or when an error
message quoting it is sent (a 500 on HTTP, a lost session on Hyperswarm). pydantic's parser
(jiter) refuses it at the door, and is as fast.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic_core

from .errors import ErrorKind, InferError

# JSON read from a reply nests no deeper (pydantic's parser, at the door, allows as much):
# what is read is written and read again further on, deeper in the stack, by recursion
MAX_DEPTH = 200


def parse_json(data: bytes | str) -> Any:
    """The value of a JSON text; BAD_MESSAGE, saying where, when it is not valid JSON text."""
    try:
        return pydantic_core.from_json(data)
    except ValueError as exc:
        reason = str(exc)
        if "surrogate" in reason or "hex escape" in reason:  # jiter's words for it
            at = reason.rfind(" at line ")
            where = reason[at:] if at >= 0 else ""
            reason = f"a \\u escape that is no character (a lone UTF-16 surrogate){where}"
        raise InferError(ErrorKind.BAD_MESSAGE, f"invalid JSON: {reason}") from None


def read_json(text: Any) -> Any:
    """JSON text parsed (None if it is not JSON); anything else as it is (Ollama sends
    arguments as objects already). Never raises, whatever the model wrote (issue 34 §5).
    Raw control characters in strings are read: llama.cpp's grammar for a forced call lets
    the model write them, and what is read goes out escaped. What cannot go back out as JSON
    in UTF-8 is not JSON here: NaN and inf, a lone surrogate escape (no character), an
    integer past Python's digit limit, nesting deeper than MAX_DEPTH."""
    if not isinstance(text, str):
        return text
    try:
        value = json.loads(text, strict=False, parse_constant=_no_constant)
        if _too_deep(value):
            return None
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode()
    except (ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        return None
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _too_deep(value: Any) -> bool:
    """Whether containers nest deeper than MAX_DEPTH (a loop: recursion is what it guards)."""
    todo = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            if depth > MAX_DEPTH:
                return True
            todo.extend((child, depth + 1) for child in item)
    return False
