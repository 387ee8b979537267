"""`keep_alive` as Ollama reads it: seconds or a Go duration, negative for forever; anything
else is a 400 that says what it takes, never a crash of the validator (a 500)."""

from __future__ import annotations

import pydantic
import pytest

from infertui.core.protocol.keep_alive import FOREVER, seconds_of
from infertui.core.protocol.ollama_api import ApiGenerateRequest


def test_durations_numbers_and_forever() -> None:
    assert seconds_of("5m") == 300 and seconds_of("1h30m") == 5400 and seconds_of(90) == 90
    assert seconds_of("-1") == FOREVER and seconds_of(None) is None


@pytest.mark.parametrize("value", [[1], {"m": 5}, "soon", True])
def test_what_is_no_duration_is_a_validation_error_that_says_what_it_takes(value: object) -> None:
    with pytest.raises(pydantic.ValidationError, match="keep_alive"):
        ApiGenerateRequest.model_validate({"model": "m", "prompt": "hi", "keep_alive": value})
