"""`infertui ask TARGET PROMPT`: one reply streamed to stdout, for scripts and pipes.

Text goes to stdout as it arrives; with --json each event is one NDJSON line instead. On an
error: one line on stderr and exit 1. Ctrl-C aborts the reply on the host and exits 130. A
reader that stops reading (`| head`) aborts it too, and `ask` exits 141 without a word, as a
process that SIGPIPE ends does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from dataclasses import asdict
from typing import Any, TextIO

from infertui.core.client import Client, connect, explain
from infertui.core.config import Settings
from infertui.core.protocol import ChatMessage, InferError
from infertui.core.transport.p2p.ids import load_seed


def conversation(prompt: str, system: str) -> list[ChatMessage]:
    messages = [ChatMessage(role="system", content=system)] if system else []
    return [*messages, ChatMessage(role="user", content=prompt)]


async def ask(
    target: str,
    prompt: str,
    settings: Settings,
    *,
    as_json: bool = False,
    out: TextIO = sys.stdout,
    quiet_limit: bool = False,
) -> int:
    """Stream one reply. Where it stops at a max_tokens that the settings file or environment
    gave (`quiet_limit` False; the chat's Ctrl+O saves one there), stderr says so: a script
    would otherwise take a cut reply for a whole one."""

    def emit(event: str, **fields: Any) -> None:
        out.write(json.dumps({"event": event, **fields}, ensure_ascii=False) + "\n")
        out.flush()

    try:
        client = await connect_to(target, settings)
    except InferError as err:
        return fail(err, emit if as_json else None)
    reply = client.chat(
        conversation(prompt, settings.client.system_prompt),
        model=settings.client.model,
        **settings.client.sampling(),
    )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, reply.abort)
    try:
        async for text in reply:
            if as_json:
                emit("chunk", text=text, request_id=reply.request_id)
            else:
                out.write(text)
                out.flush()
        stats = reply.stats
        if as_json:
            emit("end", request_id=reply.request_id, **(asdict(stats) if stats else {}))
        else:
            out.write("\n")
            out.flush()
    except InferError as err:
        return fail(err, emit if as_json else None)
    except BrokenPipeError:  # the reader is gone: so is the point of the reply
        reply.abort()
        _quiet(out)
        return SIGPIPE_EXIT
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        await client.close()
    if stats is not None and stats.host_stopped is not None:  # cut short, not by Ctrl-C
        why = f": {stats.host_stopped}" if stats.host_stopped else ""
        sys.stderr.write(f"infertui: the host stopped the reply before it was complete{why}\n")
        return 1
    limit = settings.client.max_tokens
    cut = stats is not None and stats.finish_reason == "length" and stats.tokens_out == limit
    if cut and not quiet_limit:  # (a reply that filled the context says nothing here)
        sys.stderr.write(
            f"infertui: the reply stopped at {limit} tokens, the settings' client.max_tokens "
            "(the config file or INFERTUI_CLIENT__MAX_TOKENS); --max-tokens N sets another\n"
        )
    return 130 if stats is not None and stats.finish_reason == "abort" else 0


SIGPIPE_EXIT = 128 + signal.SIGPIPE


def _quiet(out: TextIO) -> None:
    """Point a closed pipe's descriptor at /dev/null, so that the interpreter's last flush
    at exit does not print a second BrokenPipeError (Python's documented recipe)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out.fileno())


async def connect_to(target: str, settings: Settings) -> Client:
    """The host TARGET names, reached as `infertui connect` reaches it."""
    return await connect(
        target,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        bootstrap=settings.bootstrap,
        connect_timeout=settings.client.connect_timeout_s,
        seed=load_seed(role="client"),
    )


def fail(err: InferError, emit: Any) -> int:
    if emit is not None:
        emit("error", code=err.mapping.p2p_code, kind=err.kind.value, message=explain(err))
    sys.stderr.write(f"infertui: {explain(err)}\n")
    return 1
