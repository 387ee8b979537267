"""Exception handlers: every error leaves in the shape of its endpoint's spec, never a trace."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from ...protocol.errors import ErrorKind, InferError, kind_for_status
from .dialects import dialect_of, error_response

log = logging.getLogger(__name__)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(InferError)
    async def on_infer_error(request: Request, err: InferError) -> JSONResponse:
        return error_response(err, dialect_of(request.url.path))

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        first = most_telling(err.errors()) or {"loc": (), "msg": "invalid request"}
        loc = field_path(first.get("loc", ()))
        param = loc[0] if loc else None
        where = ".".join(loc)
        message = f"invalid '{where}': {first['msg']}" if where else str(first["msg"])
        if not where and first.get("type") == "missing":  # no body at all ("Field required")
            message = "the request has no body: send its fields as a JSON object"
        kind = ErrorKind.INVALID_PARAMS
        return error_response(InferError(kind, message, param=param), dialect_of(request.url.path))

    @app.exception_handler(ValidationError)
    async def on_conversion(request: Request, err: ValidationError) -> JSONResponse:
        # a request that passed its own model but not the engine's (a safety net: request
        # models carry the engine's bounds, so this is a 400, never a 500)
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        bad = InferError(
            ErrorKind.INVALID_PARAMS, f"invalid '{where}': {first['msg']}", param=where
        )
        return error_response(bad, dialect_of(request.url.path))

    @app.exception_handler(HTTPException)
    async def on_http(request: Request, err: HTTPException) -> JSONResponse:
        kind = kind_for_status(err.status_code)
        detail = str(err.detail)
        if err.status_code == 404 and detail == "Not Found":
            detail = f"unknown endpoint {request.method} {request.url.path}"
        elif err.status_code == 405:
            detail = f"method {request.method} is not allowed on {request.url.path}"
        elif err.status_code == 408:
            detail = "the request body came too slowly (http.body_timeout_s)"
        elif err.status_code == 413:  # a body without a length, cut at the limit
            limit = request.app.state.max_body_bytes
            detail = f"the request body is over the host's limit of {limit:,} bytes"
        return error_response(InferError(kind, detail), dialect_of(request.url.path))

    @app.exception_handler(Exception)
    async def on_crash(request: Request, err: Exception) -> JSONResponse:
        return crash_response(request.method, request.url.path, err)


# How pydantic names the member of a union it tried: `str`, `constrained-str`, `list[str]`,
# `function-after[...]`, a model's class (the API's own fields are lower case)
_UNION_MEMBER = re.compile(
    r"^(str|int|float|bool|none|list|dict|constrained-\w+|[A-Z]\w*|[\w-]+\[.*\])$"
)
# Errors that say a union member's shape was not the one sent (its kind, words, choices)
_OTHER_SHAPE = re.compile(r"(_type|_parsing|^literal_error|^enum)$")


def field_path(loc: Sequence[Any]) -> list[str]:
    """An error's place as the request names it: no `body`, no union member tried."""
    return [
        str(p) for p in loc
        if p not in ("body", "query", "path")
        and not (isinstance(p, str) and _UNION_MEMBER.match(p))
    ]  # fmt: skip


def most_telling(errors: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The error to say, for the request's first bad field: where a union's members each
    failed, the one whose shape matched (`input: []` is a list too short, not a string
    expected); where none did, what each expected, or the deepest error."""
    if not errors:
        return None

    def path(error: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(field_path(error.get("loc", ())))

    def depth(error: Mapping[str, Any]) -> int:
        return len(path(error))

    field = path(errors[0])[:1]
    group = [e for e in errors if path(e)[:1] == field]
    shaped = [e for e in group if not _OTHER_SHAPE.search(str(e.get("type", "")))]
    if shaped:
        deepest: Mapping[str, Any] = max(shaped, key=depth)
        return dict(deepest)
    if len({path(e) for e in group}) == 1:  # `think: "x"`: a boolean, or high, medium, low
        return {**group[0], "msg": " or ".join(dict.fromkeys(str(e["msg"]) for e in group))}
    deepest = max(group, key=depth)
    return dict(deepest)


def crash_response(method: str, path: str, err: Exception) -> JSONResponse:
    """A 500 in the path's error shape, the error logged with its trace."""
    log.exception("unhandled error on %s %s", method, path, exc_info=err)
    internal = InferError(ErrorKind.INTERNAL, f"internal error: {type(err).__name__}")
    return error_response(internal, dialect_of(path))
