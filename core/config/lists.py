"""Lists in settings, as people write them."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic_settings import NoDecode


def comma_separated(value: Any) -> Any:
    """A list given in the environment: JSON, or its items between commas; and a list whose
    items hold commas (a flag given `--origins a,b --origins c`), as one list."""
    if isinstance(value, str):
        if value.lstrip().startswith("["):
            return json.loads(value)
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list):
        return [part.strip() for item in value for part in str(item).split(",") if part.strip()]
    return value


# A list of strings that the environment or a flag may give comma-separated.
CommaList = Annotated[list[str], NoDecode, BeforeValidator(comma_separated)]
