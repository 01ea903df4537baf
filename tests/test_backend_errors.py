"""A backend's 4xx body, whatever it holds, becomes one OpenAI error body (pure function;
the router path through a real vllm serve is in test_router_proxy and the soak)."""

from __future__ import annotations

import json

import pytest

from gateway.backend_errors import MAX_MESSAGE, openai_error_body


@pytest.mark.parametrize("raw", [
    b'{"error": {"type": ["x"], "message": "m"}}',  # unhashable type
    b'{"object": "error", "type": {}, "message": "m"}',
    b"[" * 100_000,  # nested past the JSON parser's depth
    b'{"error": {"message": "' + b"x" * 10_000_000 + b'"}}',  # huge
    b"\xff\xfe not utf-8",
    b"null",
    b"",
])
def test_any_backend_body_gives_an_openai_error(raw: bytes):
    body = json.loads(openai_error_body(400, raw, "b"))
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error"
    assert isinstance(err["message"], str) and len(err["message"]) <= MAX_MESSAGE


def test_vllm_shapes_are_mapped_and_the_message_kept():
    v032 = b'{"error": {"type": "BadRequestError", "code": 400, "message": "too long", ' \
           b'"param": "prompt"}}'
    v026 = b'{"object": "error", "type": "BadRequestError", "code": 400, "message": "too long"}'
    for raw in (v032, v026):
        err = json.loads(openai_error_body(400, raw, "b"))["error"]
        assert err["type"] == "invalid_request_error" and err["message"] == "too long"
        assert err["code"] is None
    assert json.loads(openai_error_body(404, b"{}", "b"))["error"]["type"] == "not_found_error"
