"""Client errors: the one InferError family, with a plain sentence for people per kind.

Every failure a client sees is an InferError whose `kind` names the condition and whose
`mapping` gives the spec codes (spec 000's `p2p_code`, spec 004's `openai_code`).
`explain()` turns one into a sentence fit for a status line or a script's stderr.
"""

from __future__ import annotations

from ..protocol.errors import ErrorKind, InferError

_SENTENCES: dict[ErrorKind, str] = {
    ErrorKind.INVALID_SERVER_ID: (
        "That is not a server ID (52 z-base-32 characters) or an http(s) URL."
    ),
    ErrorKind.HOST_OFFLINE: "No host is answering at that address right now.",
    # the host's own connections too (a pull's source): its words say which
    ErrorKind.CONNECT_FAILED: "Could not connect.",
    ErrorKind.HOST_DISCONNECTED: "The connection to the host dropped.",
    ErrorKind.TIMEOUT_NO_RESPONSE: "The host stopped answering.",
    ErrorKind.QUEUE_FULL: "The host is busy: its queue is full.",
    ErrorKind.CLIENT_BUSY: "The host is busy with your other requests.",
    # every cause: loading, draining or drained, failed, an upstream server out of reach
    ErrorKind.POOL_UNREADY: "The model is not ready: it may be loading or draining, or its "
    "server cannot be reached.",
    ErrorKind.MODEL_NOT_FOUND: "The host does not serve that model.",
    ErrorKind.NO_ENGINE: "The host has no model loaded.",
    ErrorKind.CONTEXT_OVERFLOW: "The conversation is longer than the model's context.",
    ErrorKind.UNAUTHORIZED: "The host wants a valid API key (--api-key or INFERTUI_API_KEY).",
    ErrorKind.FORBIDDEN: "The host does not allow this.",
    ErrorKind.ABORTED: "The reply was stopped.",
}


def explain(err: BaseException) -> str:
    """One line for people: what happened, then the host's own words when they add something."""
    if not isinstance(err, InferError):
        return f"Unexpected error: {err}"
    sentence = _SENTENCES.get(err.kind)
    if sentence is None:
        return err.message
    if err.retry_after_ms:
        sentence += f" Try again in {err.retry_after_ms / 1000:.1f} s."
    if err.message and err.message.rstrip(".") not in sentence:
        sentence += f" ({err.message})"
    return sentence
