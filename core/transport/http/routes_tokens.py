"""llama-server's own endpoints. `POST /tokenize` and `POST /detokenize`: a client counts a
prompt's tokens, or reads tokens back, with the engine's own vocabulary (an upstream engine
tokenizes on its own server: a 400 says so). `GET /props`: the context per slot, the slots, the
default sampling and the chat template, where llama.cpp's web UI and its clients read them."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request

from ...protocol.openai_replies import ErrorEnvelope
from ...protocol.tokens import (
    DetokenizeRequest,
    DetokenizeResponse,
    Props,
    TokenizeRequest,
    TokenizeResponse,
)
from .deps import service_of
from .dialects import documented_errors
from .routing import StrictJSONRoute

router = APIRouter(
    tags=["llama-server's"], route_class=StrictJSONRoute,
    responses=documented_errors(ErrorEnvelope),
)  # fmt: skip


@router.post("/tokenize", summary="Text as the engine's tokens")
async def tokenize(body: TokenizeRequest, request: Request) -> TokenizeResponse:
    service = service_of(request)
    tokens = await service.tokenize(body.model, body.content, add_special=body.add_special)
    return TokenizeResponse(tokens=tokens)


@router.post("/detokenize", summary="The engine's tokens as text")
async def detokenize(body: DetokenizeRequest, request: Request) -> DetokenizeResponse:
    return DetokenizeResponse(content=service_of(request).detokenize(body.model, body.tokens))


@router.get("/props", summary="The engine's context, slots, default sampling and chat template")
async def props(request: Request, model: str | None = Query(None)) -> Props:
    return service_of(request).props(model)
