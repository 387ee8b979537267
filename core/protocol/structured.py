"""Structured output on the wire: JSON mode and JSON Schema, checked before they are queued.

The engine turns a schema into a llama.cpp grammar with llama.cpp's own converter
(engine/grammar.py). That converter passes over what it cannot express (`minimum`,
`uniqueItems`, ...), which would let output through that fails the schema; so a schema is
checked here first against the keywords it does enforce, and one that uses any other gets a
clear 400 naming the keyword and where it is. Annotations (`title`, `description`, `format`
and the like) constrain nothing and pass. JSON mode is the schema of any object.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .sampling import MAX_SCHEMA_CHARS

# what the converter turns into grammar rules
ENFORCED = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "prefixItems",
        "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs",
        "definitions", "pattern", "minLength", "maxLength", "format",
    }
)  # fmt: skip
ANNOTATIONS = frozenset(
    {
        "title", "description", "$schema", "$id", "$comment", "default", "examples",
        "deprecated", "readOnly", "writeOnly", "contentMediaType", "strict",
    }
)  # fmt: skip
TYPES = frozenset({"string", "number", "integer", "boolean", "null", "object", "array"})


class SchemaError(ValueError):
    """A schema the grammar cannot enforce; the message names what and where."""


JSON_OBJECT = '{"type": "object"}'  # JSON mode


def checked_schema(schema: object) -> str:
    """The schema as compact JSON text, once it is known that a grammar can enforce it."""
    if not isinstance(schema, dict):
        raise SchemaError("a JSON Schema is an object")
    text = json.dumps(schema, separators=(",", ":"))
    if len(text) > MAX_SCHEMA_CHARS:
        raise SchemaError(f"the schema is over {MAX_SCHEMA_CHARS:,} characters")
    for problem in _problems(schema, "$"):
        raise SchemaError(problem)
    return text


def _problems(schema: object, where: str) -> Iterator[str]:
    """What keeps the grammar from enforcing this schema, in a sentence each, depth first."""
    if isinstance(schema, bool):
        return  # true / false: allowed wherever a schema may be
    if not isinstance(schema, dict):
        yield f"{where} is not a schema (a JSON Schema is an object)"
        return
    for keyword, value in schema.items():
        if keyword == "$ref" and not (isinstance(value, str) and value.startswith("#")):
            yield f"only local references ('#/...') can be followed, not {value!r} at {where}"
        elif keyword not in ENFORCED and keyword not in ANNOTATIONS:
            yield (
                f"the JSON Schema keyword '{keyword}' at {where} cannot be enforced while "
                f"generating (supported: {', '.join(sorted(ENFORCED))})"
            )
        elif keyword == "type" and not _known_types(value):
            yield f"unknown type {value!r} at {where}"
    for path, sub in _subschemas(schema, where):
        yield from _problems(sub, path)


def _subschemas(schema: dict[str, Any], where: str) -> Iterator[tuple[str, object]]:
    """Every schema nested in this one, with its path (a malformed container is yielded as
    is, so that the walk reports it instead of failing on it)."""
    for keyword in ("properties", "$defs", "definitions"):
        named = schema.get(keyword)
        if isinstance(named, dict):
            for name, sub in named.items():
                yield f"{where}.{keyword}.{name}", sub
        elif named is not None:
            yield f"{where}.{keyword}", named
    for keyword in ("anyOf", "oneOf", "allOf", "prefixItems", "items"):
        listed = schema.get(keyword)
        if isinstance(listed, list):
            for i, sub in enumerate(listed):
                yield f"{where}.{keyword}[{i}]", sub
        elif listed is not None and (keyword == "items" or not isinstance(listed, list)):
            yield f"{where}.{keyword}", listed
    extra = schema.get("additionalProperties")
    if extra is not None:
        yield f"{where}.additionalProperties", extra


def _known_types(value: object) -> bool:
    names = value if isinstance(value, list) else [value]
    return all(isinstance(name, str) and name in TYPES for name in names)
