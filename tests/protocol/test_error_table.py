"""The one error taxonomy maps every kind onto each spec's codes (000, 002, 004)."""

from __future__ import annotations

import pytest

from infertui.core.protocol.errors import (
    ADDITIVE_P2P_CODES,
    ERROR_TABLE,
    HTTP_STATUS_KINDS,
    ORCH_CODES,
    P2P_CODES,
    ErrorKind,
    InferError,
    kind_for_status,
)
from infertui.core.protocol.finish import heard_finish, openai_finish, said_finish

OPENAI_TYPES = {"invalid_request_error", "server_error", "not_found_error"}


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_every_kind_maps_to_each_specs_vocabulary(kind: ErrorKind) -> None:
    mapping = ERROR_TABLE[kind]
    assert mapping.p2p_code in P2P_CODES | ADDITIVE_P2P_CODES
    assert mapping.orch_code in ORCH_CODES
    assert mapping.openai_type in OPENAI_TYPES
    assert 400 <= mapping.http_status < 600


def test_every_spec_000_code_is_reachable() -> None:
    reachable = {m.p2p_code for m in ERROR_TABLE.values()}
    assert reachable >= P2P_CODES


def test_backpressure_is_retriable_429_and_model_busy() -> None:
    for kind in (ErrorKind.QUEUE_FULL, ErrorKind.CLIENT_BUSY):
        err = InferError(kind, "busy", retry_after_ms=120)
        assert err.retriable
        assert err.mapping.http_status == 429
        assert err.mapping.p2p_code == "MODEL_BUSY"
        assert err.mapping.orch_code == "ADMISSION_REJECT"


def test_pool_unready_and_not_found_statuses() -> None:
    assert ERROR_TABLE[ErrorKind.POOL_UNREADY].orch_code == "POOL_UNREADY"
    assert ERROR_TABLE[ErrorKind.POOL_UNREADY].http_status == 503
    assert ERROR_TABLE[ErrorKind.MODEL_NOT_FOUND].openai_type == "not_found_error"
    assert ERROR_TABLE[ErrorKind.MODEL_NOT_FOUND].http_status == 404
    assert ERROR_TABLE[ErrorKind.CONTEXT_OVERFLOW].http_status == 400


def test_a_status_alone_means_the_kind_that_goes_out_with_it() -> None:
    """Issue 35 §3: one table reads a bare HTTP status, on the server (Starlette's refusals)
    and on the client and upstream sides; each kind in it is sent with that same status, but
    for 422 (FastAPI's refusal of a body, from an upstream server: a 400 here)."""
    for status, kind in HTTP_STATUS_KINDS.items():
        assert kind_for_status(status) is kind
        assert ERROR_TABLE[kind].http_status == (400 if status == 422 else status)
    assert kind_for_status(500) is kind_for_status(418) is ErrorKind.INTERNAL


def test_finish_reasons_go_out_and_come_back_as_one_table_says() -> None:
    """Issue 35 §3: OpenAI and Ollama name two reasons; calls end as "tool_calls" only where
    the reply ended by itself, and a reason read back from a server is the host's own."""
    assert [said_finish(r) for r in ("stop", "length", "abort", "error")] == [
        "stop", "length", "stop", "stop"
    ]  # fmt: skip
    assert openai_finish("stop", called=True) == "tool_calls"
    assert openai_finish("length", called=True) == "length"
    assert [heard_finish(said) for said in ("stop", "length", "tool_calls", None)] == [
        "stop", "length", "stop", "stop"
    ]  # fmt: skip
