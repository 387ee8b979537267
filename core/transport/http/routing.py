"""The route class of every HTTP endpoint: request bodies parsed as strict JSON text
(core/protocol/json_text.py), so that text no encoder can write back is a 400 at the door."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from ...protocol.errors import InferError
from ...protocol.json_text import parse_json


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = parse_json(await self.body())
            except InferError as err:  # FastAPI passes HTTPExceptions on as they are
                raise HTTPException(400, detail=err.message) from None
        return self._json


class StrictJSONRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        takes_body = self.body_field is not None

        async def strict(request: Request) -> Response:
            strict_request = StrictJSONRequest(request.scope, request.receive)
            if takes_body and not json_typed(request.headers.get("content-type")):
                await _refuse_untyped(strict_request)
            return await handler(strict_request)

        return strict


def json_typed(content_type: str | None) -> bool:
    """Content-Type application/json or application/*+json: the bodies read as JSON."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media.count("/") == 1 and (  # email.message reads a/b/c as text/plain
        media == "application/json"
        or (media.startswith("application/") and media.endswith("+json"))
    )


async def _refuse_untyped(request: Request) -> None:
    """A page's body not sent as JSON is refused saying so, rather than with a validation
    error about its fields. It is not read as JSON anyway: a web page can send a form or
    text/plain to a host on localhost without asking (no CORS preflight), and must not be
    able to drive it that way. A script's untyped body never gets here: it is typed as JSON
    first (middleware.ScriptBodiesMiddleware)."""
    if await request.body():
        given = request.headers.get("content-type") or "no Content-Type"
        raise HTTPException(
            400, detail=f"send the body as JSON, with Content-Type: application/json (not {given})"
        )
