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

        async def strict(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict
