"""Whether a job fits its engine (OC-CTRL-2010): its prompt and reply within the context, an
embedding within what one input may hold. Each refusal names what to shorten."""

from __future__ import annotations

from collections.abc import Sequence

from ..engine import Engine
from ..engine.llama.embedder import MAX_INPUT_TOKENS
from ..protocol.errors import ErrorKind, InferError


def check_fits(
    engine: Engine,
    engine_id: str,
    tokens: Sequence[int],
    asked_max: int | None,
    *,
    embed: bool,
    chat: bool,
) -> int:
    """The job's max_tokens (what it asked, at most the rest of the context; 0 to embed), or
    InferError. A limit past the context is cut to the room left, as llama-server and Ollama
    take it: clients send 4,096 or more whatever the model (refused, a chat with such a client
    could never start), and the reply ends at the context's end either way ("length"). An
    upstream tokenizes on its own server: its prompt's size is not known here (no tokens), so
    only max_tokens is checked, and its server has the last word."""
    if embed:
        if engine.embeddings is None:
            raise InferError(
                ErrorKind.INVALID_PARAMS,
                f"engine '{engine_id}' is an upstream server; ask it for embeddings directly",
                param="model",
                engine_id=engine_id,
            )
        if not tokens:  # (an empty text: nothing too long, nothing to embed)
            raise InferError(
                ErrorKind.INVALID_PARAMS,
                "an input is empty: each needs at least one token",
                param="input",
                engine_id=engine_id,
            )
        if len(tokens) > MAX_INPUT_TOKENS:
            raise InferError(
                ErrorKind.CONTEXT_OVERFLOW,
                f"an input of {len(tokens)} tokens: embeddings take 1 to "
                f"{MAX_INPUT_TOKENS} tokens per input",
                param="input",
                engine_id=engine_id,
            )
        return 0
    if not tokens and engine.tokenizer is not None:
        # a model that reads no start token (SmolLM2) has nothing to go on, as llama.cpp's
        # own tools say; llama_decode would refuse the empty batch
        raise InferError(
            ErrorKind.INVALID_PARAMS,
            "the prompt is empty: this model needs at least one token to go on from",
            param="prompt",
            engine_id=engine_id,
        )
    info = engine.describe()
    n_ctx, n_prompt = info.n_ctx, len(tokens)
    if engine.tokenizer is None:
        max_tokens = asked_max if asked_max is not None else n_ctx
        if max_tokens <= n_ctx:
            return max_tokens
        bound = f"the context of {n_ctx} tokens" if info.parameters.n_ctx else (
            f"{n_ctx} tokens, the most infertui asks of an upstream that does not say its "
            "context"
        )  # fmt: skip
        raise InferError(ErrorKind.CONTEXT_OVERFLOW,
                         f"max_tokens {max_tokens} is more than {bound}",
                         param="max_tokens", engine_id=engine_id)  # fmt: skip
    room = n_ctx - n_prompt
    if room < 1:
        raise InferError(
            ErrorKind.CONTEXT_OVERFLOW,
            f"a prompt of {n_prompt} tokens leaves no room for a reply in the context of "
            f"{n_ctx} tokens",
            param="messages" if chat else "prompt",
            engine_id=engine_id,
        )
    return room if asked_max is None else min(asked_max, room)
