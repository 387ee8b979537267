"""JSON Schema to llama.cpp grammar (GBNF), with llama.cpp's own converter as llama-cpp-python
ships it. The wire layer has checked the schema already (protocol/structured.py)."""

from __future__ import annotations

from functools import lru_cache

from llama_cpp.llama_grammar import json_schema_to_gbnf

_LOOSE_CHAR = r'char ::= [^"\\] |'
_JSON_CHAR = r'char ::= [^"\\\x7F\x00-\x1F] |'


@lru_cache(maxsize=64)  # clients send the same few schemas again and again
def schema_grammar(schema: str, wrap: tuple[str, str] | None = None) -> str:
    """The grammar of the JSON that validates against `schema` (JSON text), between the two
    literal texts of `wrap` if given. ValueError if the converter refuses the schema (a
    regular expression feature it lacks, say)."""
    try:
        grammar = str(json_schema_to_gbnf(schema))
    except Exception as err:
        raise ValueError(f"the schema cannot be turned into a grammar: {err}") from err
    # llama-cpp-python's converter lets a string hold raw control characters, which no JSON
    # parser takes (a model wrote a raw tab into a schema's string); llama.cpp's own excludes
    # them, as here
    grammar = grammar.replace(_LOOSE_CHAR, _JSON_CHAR)
    if wrap is None:
        return grammar
    before, after = (_literal(text) for text in wrap)
    sequence = " ".join(part for part in (before, "wrapped-json", after) if part)
    renamed = grammar.replace("\nroot ::=", "\nwrapped-json ::=")
    if renamed.startswith("root ::="):
        renamed = "wrapped-json ::=" + renamed.removeprefix("root ::=")
    return f"root ::= {sequence}\n{renamed}"


def _literal(text: str) -> str:
    """A GBNF literal; '' for no text (nothing goes in the sequence)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"' if text else ""
