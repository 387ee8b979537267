"""JSON text from the network, parsed strictly.

Python's json module accepts a lone UTF-16 surrogate escape ("\\ud800"), which no UTF-8
encoder can write back: the text then fails deep inside, at tokenization or when an error
message quoting it is sent (a 500 on HTTP, a lost session on Hyperswarm). pydantic's parser
(jiter) refuses it at the door, and is as fast.
"""

from __future__ import annotations

from typing import Any

import pydantic_core

from .errors import ErrorKind, InferError


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
