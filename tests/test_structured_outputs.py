"""response_format through the official SDK against the real engine (EAGLE-3 on the vLLM
CPU engine): vLLM's structured-output backend constrains the tokens, so the output parses
and validates, streaming or not; a bad schema is a 400 naming the parameter."""

from __future__ import annotations

import json

import httpx
from conftest import TOOLS_MODEL
from pydantic import BaseModel, Field

MESSAGES = [{"role": "user", "content": "Describe a point."}]


class Point(BaseModel):
    # Bounded strings/ints: a 5M-parameter code model must still finish within max_tokens.
    label: str = Field(max_length=6)
    x: int = Field(ge=0, le=99)
    y: int = Field(ge=0, le=99)


def test_parse_with_pydantic_model(tools_client):
    r = tools_client.beta.chat.completions.parse(
        model=TOOLS_MODEL, messages=MESSAGES, response_format=Point, max_tokens=80,
        temperature=0.8, seed=1)
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice
    assert isinstance(choice.message.parsed, Point), choice.message.content


def test_json_schema_streaming(tools_client):
    stream = tools_client.chat.completions.create(
        model=TOOLS_MODEL, messages=MESSAGES, max_tokens=80, stream=True, temperature=0.8,
        seed=2, response_format={"type": "json_schema", "json_schema": {
            "name": "point", "strict": True, "schema": Point.model_json_schema()}})
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    Point.model_validate_json(text)


def test_json_object(tools_client):
    r = tools_client.chat.completions.create(
        model=TOOLS_MODEL, messages=MESSAGES, max_tokens=60, seed=3,
        response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:  # cut at max_tokens: still a JSON object prefix
        assert r.choices[0].message.content.lstrip().startswith("{")


def test_bad_schema_is_400_with_param(tools_server):
    r = httpx.post(f"{tools_server.url}/v1/chat/completions", timeout=60, json={
        "model": TOOLS_MODEL, "messages": MESSAGES, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "response_format.json_schema.schema" and err["code"] == "invalid_schema"
