"""``response_format`` -> the ``structured_outputs`` entry of the sampling kwargs.

The value is the plain keyword arguments of vLLM's ``StructuredOutputsParams``
(``{"json": schema}`` or ``{"json_object": True}``); the engine side builds the vLLM
object (:mod:`engine_ext.request_params`), and vLLM's structured-output backend
(xgrammar, guidance fallback) constrains the tokens, draft tokens included.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from gateway.errors import invalid
from gateway.protocol import ResponseFormat


def check_schema(schema: Any, param: str) -> dict:
    """A JSON schema the grammar compiler can take, or a 400 naming ``param``."""
    if not isinstance(schema, dict):
        raise invalid("schema must be a JSON object", param=param, code="invalid_schema")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise invalid(f"invalid JSON schema{' at ' + where if where else ''}: {exc.message}",
                      param=param, code="invalid_schema") from None
    return schema


def strict_schema(schema: dict) -> dict:
    """OpenAI's ``strict: true``: no properties beyond those declared, at every level."""
    if schema.get("type") == "object" or "properties" in schema:
        schema = {"additionalProperties": False, **schema}
    out: dict = {}
    for key, value in schema.items():
        if isinstance(value, dict) and key in ("properties", "$defs", "definitions"):
            out[key] = {k: strict_schema(v) if isinstance(v, dict) else v
                        for k, v in value.items()}
        elif isinstance(value, dict) and key in ("items", "additionalItems"):
            out[key] = strict_schema(value)
        elif isinstance(value, list) and key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            out[key] = [strict_schema(v) if isinstance(v, dict) else v for v in value]
        else:
            out[key] = value
    return out


def json_constraint(schema: dict) -> dict:
    # Whitespace: compact, engine-wide (engine_ext.request_params.ENGINE_ARGS), because
    # vLLM's xgrammar backend ignores the per-request disable_any_whitespace.
    return {"json": schema}


def structured_outputs(fmt: ResponseFormat | None) -> dict | None:
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"json_object": True}
    js = fmt.json_schema
    assert js is not None  # the protocol model requires it for json_schema
    schema = check_schema(js.schema_ if js.schema_ is not None else {"type": "object"},
                          "response_format.json_schema.schema")
    return json_constraint(strict_schema(schema) if js.strict else schema)
