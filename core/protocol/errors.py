"""The one error taxonomy: an internal kind per condition, mapped once to every spec's code.

    InferError                      raised anywhere in core; carries an ErrorKind
      .kind -> ErrorKind            one condition (QUEUE_FULL, CONTEXT_OVERFLOW, ...)
      .mapping -> ErrorMapping      that condition as spec 000 / 002 / 004 and HTTP see it

Transports never invent codes: they read `error.mapping` (or `ERROR_TABLE[kind]`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ErrorKind(StrEnum):
    """Every condition the host or client can report, named for what happened."""

    # admission and scheduling
    INVALID_PARAMS = "INVALID_PARAMS"
    CONTEXT_OVERFLOW = "CONTEXT_OVERFLOW"
    QUEUE_FULL = "QUEUE_FULL"
    CLIENT_BUSY = "CLIENT_BUSY"
    RATE_LIMITED = "RATE_LIMITED"  # an identity's requests per minute
    BUDGET_SPENT = "BUDGET_SPENT"  # an identity's tokens per minute or day, a session's budget
    POOL_UNREADY = "POOL_UNREADY"
    MODEL_NOT_FOUND = "MODEL_NOT_FOUND"
    NO_ENGINE = "NO_ENGINE"
    ENGINE_EXISTS = "ENGINE_EXISTS"
    # model loading
    MODEL_FILE_NOT_FOUND = "MODEL_FILE_NOT_FOUND"
    MODEL_INVALID = "MODEL_INVALID"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    MODEL_LOAD_FAILED = "MODEL_LOAD_FAILED"
    # pulling models
    DIGEST_MISMATCH = "DIGEST_MISMATCH"
    NO_SPACE = "NO_SPACE"
    # generation
    GENERATION_FAILED = "GENERATION_FAILED"
    ABORTED = "ABORTED"
    DECODE_TIMEOUT = "DECODE_TIMEOUT"
    # protocol and access
    BAD_MESSAGE = "BAD_MESSAGE"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    REQUEST_TIMEOUT = "REQUEST_TIMEOUT"
    UNSUPPORTED_VERSION = "UNSUPPORTED_VERSION"
    UNAUTHORIZED = "UNAUTHORIZED"
    FORBIDDEN = "FORBIDDEN"
    NOT_FOUND = "NOT_FOUND"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    CONFLICT = "CONFLICT"
    # connection (client side)
    INVALID_SERVER_ID = "INVALID_SERVER_ID"
    CONNECT_FAILED = "CONNECT_FAILED"
    HOST_OFFLINE = "HOST_OFFLINE"
    HOST_DISCONNECTED = "HOST_DISCONNECTED"
    TIMEOUT_NO_RESPONSE = "TIMEOUT_NO_RESPONSE"
    # anything else
    INTERNAL = "INTERNAL"


@dataclass(frozen=True, slots=True)
class ErrorMapping:
    """How one ErrorKind appears on each wire.

    p2p_code:     spec 000 `error.code`
    orch_code:    spec 002 ErrorKind (OC-CTRL-2030)
    openai_type:  spec 004 `error.type`
    openai_code:  spec 004 `error.code` (also used as spec 001's `code`)
    http_status:  status for a pre-stream error on every HTTP endpoint
    retriable:    whether the same request may succeed later (OC-CTRL-2032)
    """

    p2p_code: str
    orch_code: str
    openai_type: str
    openai_code: str
    http_status: int
    retriable: bool = False


_REQ = "invalid_request_error"
_SRV = "server_error"
_NF = "not_found_error"

ERROR_TABLE: dict[ErrorKind, ErrorMapping] = {
    ErrorKind.INVALID_PARAMS: ErrorMapping(
        "BAD_MESSAGE", "INVALID_PARAMS", _REQ, "invalid_params", 400
    ),
    ErrorKind.CONTEXT_OVERFLOW: ErrorMapping(
        "BAD_MESSAGE", "INVALID_PARAMS", _REQ, "context_length_exceeded", 400
    ),
    ErrorKind.QUEUE_FULL: ErrorMapping(
        "MODEL_BUSY", "ADMISSION_REJECT", _SRV, "queue_full", 429, retriable=True
    ),
    ErrorKind.CLIENT_BUSY: ErrorMapping(
        "MODEL_BUSY", "ADMISSION_REJECT", _SRV, "client_busy", 429, retriable=True
    ),
    # an identity's own limits: OpenAI's code for them, in spec 004's types
    ErrorKind.RATE_LIMITED: ErrorMapping(
        "MODEL_BUSY", "ADMISSION_REJECT", _REQ, "rate_limit_exceeded", 429, retriable=True
    ),
    ErrorKind.BUDGET_SPENT: ErrorMapping(
        "MODEL_BUSY", "ADMISSION_REJECT", _REQ, "budget_exceeded", 429, retriable=True
    ),
    ErrorKind.POOL_UNREADY: ErrorMapping(
        "OLLAMA_MODEL_NOT_AVAILABLE",
        "POOL_UNREADY",
        _SRV,
        "engine_unavailable",
        503,
        retriable=True,
    ),
    ErrorKind.MODEL_NOT_FOUND: ErrorMapping(
        "OLLAMA_MODEL_NOT_AVAILABLE", "INVALID_PARAMS", _NF, "model_not_found", 404
    ),
    ErrorKind.NO_ENGINE: ErrorMapping(
        "OLLAMA_NOT_FOUND", "POOL_UNAVAILABLE", _SRV, "no_engine", 503
    ),
    ErrorKind.ENGINE_EXISTS: ErrorMapping(
        "BAD_MESSAGE", "INVALID_PARAMS", _REQ, "engine_exists", 409
    ),
    ErrorKind.MODEL_FILE_NOT_FOUND: ErrorMapping(
        "OLLAMA_MODEL_NOT_AVAILABLE", "INVALID_PARAMS", _NF, "model_file_not_found", 404
    ),
    ErrorKind.MODEL_INVALID: ErrorMapping(
        "OLLAMA_MODEL_NOT_AVAILABLE", "INVALID_PARAMS", _REQ, "model_invalid", 400
    ),
    ErrorKind.OUT_OF_MEMORY: ErrorMapping(
        "GENERATION_FAILED", "POOL_UNAVAILABLE", _SRV, "out_of_memory", 503
    ),
    ErrorKind.MODEL_LOAD_FAILED: ErrorMapping(
        "GENERATION_FAILED", "POOL_UNAVAILABLE", _SRV, "model_load_failed", 500
    ),
    # a source sent other bytes than it published (a proxy's page, a corrupted mirror)
    ErrorKind.DIGEST_MISMATCH: ErrorMapping(
        "GENERATION_FAILED", "INTERNAL", _SRV, "digest_mismatch", 502, retriable=True
    ),
    ErrorKind.NO_SPACE: ErrorMapping(
        "GENERATION_FAILED", "POOL_UNAVAILABLE", _SRV, "insufficient_storage", 507
    ),
    ErrorKind.GENERATION_FAILED: ErrorMapping(
        "GENERATION_FAILED", "INTERNAL", _SRV, "inference_error", 500, retriable=True
    ),
    # Only a reply the host cut short reaches a client as an error (a client's own cancel is
    # not read by anyone): the server's doing, and a later try may well succeed (503, as for
    # a draining engine; 499 is nginx's "client closed", and SDKs do not retry it).
    ErrorKind.ABORTED: ErrorMapping(
        "GENERATION_ABORTED", "INTERNAL", _SRV, "aborted", 503, retriable=True
    ),
    ErrorKind.DECODE_TIMEOUT: ErrorMapping(
        "TIMEOUT_NO_RESPONSE", "DECODE_TIMEOUT", _SRV, "decode_timeout", 504, retriable=True
    ),
    ErrorKind.BAD_MESSAGE: ErrorMapping("BAD_MESSAGE", "INVALID_PARAMS", _REQ, "bad_request", 400),
    ErrorKind.PAYLOAD_TOO_LARGE: ErrorMapping(
        "BAD_MESSAGE", "INVALID_PARAMS", _REQ, "payload_too_large", 413
    ),
    ErrorKind.REQUEST_TIMEOUT: ErrorMapping(
        "BAD_MESSAGE", "INVALID_PARAMS", _REQ, "request_timeout", 408
    ),
    ErrorKind.UNSUPPORTED_VERSION: ErrorMapping(
        "UNSUPPORTED_VERSION", "INVALID_PARAMS", _REQ, "unsupported_version", 400
    ),
    ErrorKind.UNAUTHORIZED: ErrorMapping(
        "UNAUTHORIZED", "INVALID_PARAMS", _REQ, "unauthorized", 401
    ),
    ErrorKind.FORBIDDEN: ErrorMapping("FORBIDDEN", "INVALID_PARAMS", _REQ, "forbidden", 403),
    ErrorKind.NOT_FOUND: ErrorMapping("BAD_MESSAGE", "INVALID_PARAMS", _NF, "not_found", 404),
    ErrorKind.CONFLICT: ErrorMapping("BAD_MESSAGE", "INVALID_PARAMS", _REQ, "conflict", 409),
    ErrorKind.METHOD_NOT_ALLOWED: ErrorMapping(
        "BAD_MESSAGE", "INVALID_PARAMS", _REQ, "method_not_allowed", 405
    ),
    ErrorKind.INVALID_SERVER_ID: ErrorMapping(
        "INVALID_SERVER_ID", "INVALID_PARAMS", _REQ, "invalid_server_id", 400
    ),
    ErrorKind.CONNECT_FAILED: ErrorMapping(
        "CONNECT_FAILED", "POOL_UNAVAILABLE", _SRV, "connect_failed", 502, retriable=True
    ),
    ErrorKind.HOST_OFFLINE: ErrorMapping(
        "HOST_OFFLINE", "POOL_UNAVAILABLE", _SRV, "host_offline", 502, retriable=True
    ),
    ErrorKind.HOST_DISCONNECTED: ErrorMapping(
        "HOST_DISCONNECTED", "WORKER_RESET", _SRV, "host_disconnected", 502, retriable=True
    ),
    ErrorKind.TIMEOUT_NO_RESPONSE: ErrorMapping(
        "TIMEOUT_NO_RESPONSE", "DECODE_TIMEOUT", _SRV, "timeout", 504, retriable=True
    ),
    ErrorKind.INTERNAL: ErrorMapping("GENERATION_FAILED", "INTERNAL", _SRV, "internal_error", 500),
}

# Spec 000 codes a peer may send; anything else is surfaced as a generic error.
P2P_CODES: frozenset[str] = frozenset(
    {
        "INVALID_SERVER_ID", "CONNECT_FAILED", "HOST_OFFLINE", "HOST_DISCONNECTED",
        "OLLAMA_NOT_FOUND", "OLLAMA_MODEL_NOT_AVAILABLE", "MODEL_BUSY", "GENERATION_FAILED",
        "GENERATION_ABORTED", "BAD_MESSAGE", "UNSUPPORTED_VERSION", "TIMEOUT_NO_RESPONSE",
    }
)  # fmt: skip

# Codes infertui adds for access control (additive: other peers treat them as generic errors).
ADDITIVE_P2P_CODES: frozenset[str] = frozenset({"FORBIDDEN", "UNAUTHORIZED"})

# Spec 002 ErrorKind values (OC-CTRL-2030).
ORCH_CODES: frozenset[str] = frozenset(
    {
        "ADMISSION_REJECT", "QUEUE_FULL_DROP_LRU", "INVALID_PARAMS", "POOL_UNREADY",
        "POOL_UNAVAILABLE", "REPLICA_EXHAUSTED", "DECODE_TIMEOUT", "WORKER_RESET", "INTERNAL",
    }
)  # fmt: skip


# What an HTTP status alone says, where no code of this taxonomy came with it: Starlette's own
# refusals on the server side, a proxy's page or an upstream server's refusal on the client
# side. The way back (each kind's status) is ErrorMapping.http_status.
HTTP_STATUS_KINDS: dict[int, ErrorKind] = {
    400: ErrorKind.BAD_MESSAGE,
    401: ErrorKind.UNAUTHORIZED,
    403: ErrorKind.FORBIDDEN,
    404: ErrorKind.NOT_FOUND,
    405: ErrorKind.METHOD_NOT_ALLOWED,
    408: ErrorKind.REQUEST_TIMEOUT,
    409: ErrorKind.CONFLICT,
    413: ErrorKind.PAYLOAD_TOO_LARGE,
    422: ErrorKind.INVALID_PARAMS,
    429: ErrorKind.QUEUE_FULL,
    503: ErrorKind.POOL_UNREADY,
    504: ErrorKind.TIMEOUT_NO_RESPONSE,
}


def kind_for_status(status: int) -> ErrorKind:
    """The kind an HTTP error status stands for; INTERNAL for one this table does not know."""
    return HTTP_STATUS_KINDS.get(status, ErrorKind.INTERNAL)


class InferError(Exception):
    """An error with a kind from the taxonomy, a sentence for people, and advisory hints."""

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        param: str | None = None,
        retry_after_ms: int | None = None,
        engine_id: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.param = param
        self.retry_after_ms = retry_after_ms
        self.engine_id = engine_id
        self.details = details or {}

    @property
    def mapping(self) -> ErrorMapping:
        return ERROR_TABLE[self.kind]

    @property
    def retriable(self) -> bool:
        return self.mapping.retriable

    def __repr__(self) -> str:
        return f"InferError({self.kind.value}, {self.message!r})"


_BY_OPENAI_CODE = {mapping.openai_code: kind for kind, mapping in ERROR_TABLE.items()}


def kind_for_openai_code(code: str | None) -> ErrorKind:
    """The kind a spec-004 `error.code` read off an HTTP reply stands for (ERROR_TABLE read
    backwards); INTERNAL for one it does not know."""
    return _BY_OPENAI_CODE.get(code or "", ErrorKind.INTERNAL)


def kind_for_p2p_code(code: str) -> ErrorKind | None:
    """The internal kind a spec-000 code received from a peer stands for (None: unknown code)."""
    direct = {
        "MODEL_BUSY": ErrorKind.QUEUE_FULL,
        "GENERATION_ABORTED": ErrorKind.ABORTED,
        "OLLAMA_NOT_FOUND": ErrorKind.NO_ENGINE,
        "OLLAMA_MODEL_NOT_AVAILABLE": ErrorKind.MODEL_NOT_FOUND,
    }
    if code in direct:
        return direct[code]
    if code in P2P_CODES or code in ADDITIVE_P2P_CODES:
        return ErrorKind(code)
    return None
