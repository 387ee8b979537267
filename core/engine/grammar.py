"""JSON Schema to llama.cpp grammar (GBNF), with llama.cpp's own converter as llama-cpp-python
ships it. The wire layer has checked the schema already (protocol/structured.py)."""

from __future__ import annotations

from functools import lru_cache

from llama_cpp.llama_grammar import json_schema_to_gbnf


@lru_cache(maxsize=64)  # clients send the same few schemas again and again
def schema_grammar(schema: str) -> str:
    """The grammar of the JSON that validates against `schema` (JSON text). ValueError if the
    converter refuses it (a regular expression feature it lacks, say)."""
    try:
        return str(json_schema_to_gbnf(schema))
    except Exception as err:
        raise ValueError(f"the schema cannot be turned into a grammar: {err}") from err
