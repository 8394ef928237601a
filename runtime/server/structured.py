"""Structured output fields of each protocol, to one Grammar (engine/constraint.py), or a 400 naming the field:

OpenAI:    response_format {"type": "json_schema", "json_schema": {"name", "schema", "strict"}},
           {"type": "json_object"} or {"type": "text"}
llama.cpp: json_schema (a schema object), grammar (GBNF text)
Ollama:    format "json" or a schema object
Anthropic: output_config {"format": {"type": "json_schema", "schema": {...}}} (and llama.cpp's two fields)
Responses: text {"format": {"type": "json_schema", "schema": {...}, ...}}

grammar = openai_grammar(body)        # None: unconstrained
grammar = ollama_grammar(body.format)
"""

from __future__ import annotations

from typing import Any

from ..engine.constraint import Grammar
from .errors import APIError


def _compiled(make, param: str) -> Grammar:
    try:
        return make()
    except ValueError as e:
        raise APIError(400, f"{param}: {str(e).split(': ', 1)[-1]}", param=param) from None


def openai_grammar(body: Any) -> Grammar | None:
    """The grammar of an OpenAI (or llama.cpp) request body; at most one of its fields may ask for one."""
    asked = [
        name
        for name in ("response_format", "json_schema", "grammar")
        if getattr(body, name, None) not in (None, "")
        and not (name == "response_format" and getattr(body, name).get("type") == "text")
    ]
    if len(asked) > 1:
        raise APIError(400, f"{' and '.join(asked)} both constrain the reply: send one", param=asked[1])
    if not asked:
        return None
    name = asked[0]
    value = getattr(body, name)
    if name == "json_schema":
        return _compiled(lambda: Grammar.json_schema(value, name), name)
    if name == "grammar":
        if not isinstance(value, str):
            raise APIError(400, "grammar must be GBNF text", param=name)
        return _compiled(lambda: Grammar.gbnf(value, name), name)
    kind = value.get("type")
    if kind == "json_object":
        return Grammar.json("response_format")
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            raise APIError(
                400, "response_format.json_schema must be an object with a schema", param="response_format.json_schema"
            )
        param = "response_format.json_schema.schema"
        # OpenAI's default schema (none given) is any JSON object
        return _compiled(lambda: Grammar.json_schema(spec.get("schema", {"type": "object"}), param), param)
    raise APIError(
        400,
        f"response_format type {kind!r} is not supported (text, json_object, json_schema)",
        param="response_format.type",
    )


def anthropic_grammar(body: Any) -> Grammar | None:
    """An Anthropic Messages body's grammar: output_config.format, or llama.cpp's json_schema / grammar (one only)."""
    config = body.output_config if isinstance(body.output_config, dict) else {}
    fmt = config.get("format")
    if fmt is None:
        return openai_grammar(body)
    if openai_grammar(body) is not None:
        raise APIError(400, "output_config.format and a grammar both constrain the reply: send one", param="grammar")
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise APIError(
            400,
            'output_config.format must be {"type": "json_schema", "schema": {...}}',
            param="output_config.format",
        )
    param = "output_config.format.schema"
    return _compiled(lambda: Grammar.json_schema(fmt["schema"], param), param)


def ollama_grammar(fmt: Any) -> Grammar | None:
    """Ollama's `format`: "json" (any JSON object), a JSON Schema object, or empty."""
    if fmt in (None, ""):
        return None
    if fmt == "json":
        return Grammar.json("format")
    if isinstance(fmt, dict):
        return _compiled(lambda: Grammar.json_schema(fmt, "format"), "format")
    raise APIError(400, f'format must be "json" or a JSON Schema object, got {fmt!r}', param="format")


def responses_grammar(text: Any) -> Grammar | None:
    """The Responses API's text.format: {"type": "text" | "json_object"} or {"type": "json_schema", "name",
    "schema", "strict"} (flat, unlike chat's response_format)."""
    fmt = (text or {}).get("format") if isinstance(text, dict) else None
    if not fmt or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return Grammar.json("text.format")
    if fmt.get("type") == "json_schema":
        schema = fmt.get("schema", {"type": "object"})
        return _compiled(lambda: Grammar.json_schema(schema, "text.format.schema"), "text.format.schema")
    raise APIError(
        400,
        f"text.format type {fmt.get('type')!r} is not supported (text, json_object, json_schema)",
        param="text.format.type",
    )
