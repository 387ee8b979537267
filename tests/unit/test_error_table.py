"""The one error taxonomy maps every kind onto each spec's codes (000, 002, 004)."""

from __future__ import annotations

import pytest

from infertui.core.protocol.errors import (
    ADDITIVE_P2P_CODES,
    ERROR_TABLE,
    ORCH_CODES,
    P2P_CODES,
    ErrorKind,
    InferError,
)

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
