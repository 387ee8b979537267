"""The generation endpoints served direct: a request for one of them goes from the middleware
stack straight to its route's function, past FastAPI's routing and dependency solving.

A burst's requests are read in one turn of the event loop and then served one after another,
so each waits for the work of those before it: going direct cuts that work (measured in
bench/README.md, "Figures behind the code"). Only what these routes need is done here: their
body as strict JSON into their request model, the function, its response. Everything else
stays FastAPI's: the routes are registered with it as before (the OpenAPI document, every
other endpoint), a request not taken here goes on to it, and errors leave as FastAPI's
would: through the app's own exception handlers, and a crash through the server-error
middleware. Each answer is the one FastAPI's path gives
(tests/http/test_direct_routes.py compares them, headers included).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi._compat import ModelField
from fastapi.datastructures import DefaultPlaceholder
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute, serialize_response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .routing import StrictJSONRequest, json_typed


@dataclass(frozen=True, slots=True)
class _DirectRoute:
    route: APIRoute
    body: ModelField
    request_name: str

    @classmethod
    def of(cls, route: APIRoute) -> _DirectRoute:
        """The direct route of a route whose whole input is one JSON body and the request, and whose
        response is FastAPI's default; anything more is FastAPI's to do."""
        dependant = route.dependant
        [body] = dependant.body_params
        model = body.field_info.annotation
        plain = not (
            dependant.dependencies
            or dependant.path_params
            or dependant.query_params
            or dependant.header_params
            or dependant.cookie_params
            or dependant.response_param_name
            or dependant.background_tasks_param_name
            or route.response_model_include
            or route.response_model_exclude
            or route.response_model_exclude_unset
            or route.response_model_exclude_defaults
            or route.response_model_exclude_none
            or route.status_code not in (None, 200)
            or not isinstance(route.response_class, DefaultPlaceholder)
            or getattr(body.field_info, "embed", False)
        )
        plain = plain and inspect.iscoroutinefunction(route.endpoint)  # not sync, no generator
        if not (plain and isinstance(model, type) and issubclass(model, BaseModel)):
            raise ValueError(f"{route.path} needs FastAPI's own handling")
        assert dependant.request_param_name is not None, route.path
        return cls(route, body, dependant.request_param_name)

    async def respond(self, request: StrictJSONRequest) -> Response:
        body = await request.json()
        value, errors = self.body.validate(body, {}, loc=("body",))  # FastAPI's own check
        if errors:
            raise RequestValidationError(errors, body=body)
        result = await self.route.endpoint(**{self.body.name: value, self.request_name: request})
        if isinstance(result, Response):
            return result
        if self.route.response_field is None:
            return JSONResponse(await serialize_response(response_content=result))
        content = await serialize_response(
            field=self.route.response_field,
            response_content=result,
            by_alias=self.route.response_model_by_alias,
            dump_json=True,
        )
        return Response(content, media_type="application/json")


def direct_routes(routes: Iterable[BaseRoute], paths: Iterable[str]) -> dict[str, _DirectRoute]:
    """The direct of the POST routes at these paths, checked now: a route that cannot go direct
    serve as FastAPI would (a dependency, a sync function...) is a ValueError at start-up."""
    wanted = set(paths)
    posts = [r for r in routes if isinstance(r, APIRoute) and "POST" in (r.methods or ())]
    direct = {route.path: _DirectRoute.of(route) for route in posts if route.path in wanted}
    if missing := wanted - direct.keys():
        raise ValueError(f"no POST route for {sorted(missing)}")
    return direct


class DirectRoutes:
    """ASGI middleware, the innermost: POSTs of JSON to the direct' paths are served here, all
    else goes on to the app. Errors go to the app's exception handlers, as FastAPI's
    exception middleware would hand them over; a crash (no handler short of `Exception`) is
    raised on, to the server-error middleware outside, as it would be."""

    def __init__(self, app: ASGIApp, fastapi: FastAPI, direct: dict[str, _DirectRoute]) -> None:
        self.app = app
        self._handlers = fastapi.exception_handlers
        self._direct = direct

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        direct = self._direct.get(scope["path"]) if scope["type"] == "http" else None
        if direct is None or scope["method"] != "POST" or not _json_typed(scope):
            await self.app(scope, receive, send)
            return
        request = StrictJSONRequest(scope, receive)
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            if await _body(request):
                response = await direct.respond(request)
                await response(scope, receive, sending)
                return
        except Exception as exc:
            handler = self._handler_for(exc)
            if started or handler is None:
                raise
            if inspect.iscoroutinefunction(handler):
                response = await handler(request, exc)
            else:
                response = await run_in_threadpool(handler, request, exc)
            await response(scope, receive, send)
            return
        await self.app(scope, _replaying(b"", receive), send)  # FastAPI's answer to no body

    def _handler_for(self, exc: Exception) -> Any:
        for cls in type(exc).__mro__:
            if cls is Exception:  # the server-error middleware's, not the exception one's
                return None
            if cls in self._handlers:
                return self._handlers[cls]
        return None


async def _body(request: StrictJSONRequest) -> bytes:
    """The body, or FastAPI's refusals: an HTTPException (the body limit's 408 and 413) as it
    is, anything else (a client gone halfway) as a 400."""
    try:
        return await request.body()
    except HTTPException:
        raise
    except Exception as exc:
        raise HTTPException(400, "There was an error parsing the body") from exc


def _json_typed(scope: Scope) -> bool:
    """A body typed as JSON, which a direct route takes (a script's untyped one is typed so by
    then; a page's other types are refused by the app, see routing.py)."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            return json_typed(value.decode("latin-1"))
    return False


def _replaying(body: bytes, receive: Receive) -> Receive:
    """`receive` with the body read already given again first."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
