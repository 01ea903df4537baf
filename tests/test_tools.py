"""tools / tool_choice through the official SDK against the real engine. Named and
required choices are grammar-constrained, so the arguments always parse and validate
against the function's schema (streamed deltas reassembled by the SDK); ``auto`` goes
through vLLM's ``hermes`` parser, or is a 400 naming --tool-call-parser without one."""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import MODEL, TOOLS_MODEL
from jsonschema import validate

WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 8},
    "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"], "additionalProperties": False}
CLOCK = {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
         "required": ["zone"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "parameters": CLOCK}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": CLOCK}
MESSAGES = [{"role": "user", "content": "Weather in Paris for 3 days?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def assert_valid_calls(calls) -> None:
    assert calls, "no tool calls"
    for c in calls:
        assert c.type == "function" and c.id
        validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])


def test_named_tool_choice(tools_client):
    r = tools_client.chat.completions.create(model=TOOLS_MODEL, messages=MESSAGES, tools=TOOLS,
                                    tool_choice=NAMED, max_tokens=60)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "stop", r.choices[0]
    assert [c.function.name for c in msg.tool_calls] == ["get_weather"]
    assert_valid_calls(msg.tool_calls)


@pytest.mark.parametrize("choice", [NAMED, "required"])
def test_streamed_tool_calls_reassembled_by_sdk(tools_client, choice):
    # parallel_tool_calls=False: one call at most (the tiny model would repeat calls
    # until max_tokens otherwise)
    with tools_client.beta.chat.completions.stream(
            model=TOOLS_MODEL, messages=MESSAGES, tools=TOOLS, tool_choice=choice,
            max_tokens=80, parallel_tool_calls=False) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].finish_reason in ("stop", "tool_calls"), final.choices[0]
    assert_valid_calls(final.choices[0].message.tool_calls)


def test_required_tool_choice(tools_client):
    r = tools_client.chat.completions.create(model=TOOLS_MODEL, messages=MESSAGES, tools=TOOLS,
                                    tool_choice="required", max_tokens=80,
                                    parallel_tool_calls=False)
    assert r.choices[0].finish_reason == "tool_calls", r.choices[0]
    assert len(r.choices[0].message.tool_calls) == 1
    assert_valid_calls(r.choices[0].message.tool_calls)


def test_tool_history_and_auto_with_parser(tools_client):
    history = [*MESSAGES,
               {"role": "assistant", "content": None, "tool_calls": [{
                   "id": "call_1", "type": "function",
                   "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    for stream in (False, True):
        r = tools_client.chat.completions.create(model=TOOLS_MODEL, messages=history, tools=TOOLS,
                                        tool_choice="auto", max_tokens=24, stream=stream)
        if stream:
            parts = [c.choices[0].delta for c in r if c.choices]
            text = "".join(p.content or "" for p in parts)
            calls = [tc for p in parts for tc in (p.tool_calls or [])]
        else:
            text, calls = r.choices[0].message.content or "", r.choices[0].message.tool_calls
        # The tiny model rarely calls a tool on its own: whichever it did, the parser's
        # verdict is exclusive (no raw call markup left in content).
        assert calls or "<tool_call>" not in text


def test_auto_without_parser_names_the_flag(server):
    r = httpx.post(f"{server.url}/v1/chat/completions", timeout=60, json={
        "model": MODEL, "messages": MESSAGES, "tools": TOOLS})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "tool_choice" and "--tool-call-parser" in err["message"]
