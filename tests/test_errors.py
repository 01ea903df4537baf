"""Bad input gets an OpenAI-shaped 4xx and the server keeps serving."""

from __future__ import annotations

import httpx
import openai
import pytest
from conftest import MODEL

MSG = [{"role": "user", "content": "hi"}]


def post(base_url: str, path: str, content: bytes | str, **headers: str) -> httpx.Response:
    return httpx.post(f"{base_url}{path}", content=content, timeout=60,
                      headers={"Content-Type": "application/json", **headers})


def assert_openai_error(r: httpx.Response, status: int, param: str | None = None,
                        code: str | None = None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"] and err["type"]
    if param is not None:
        assert err["param"] == param
    if code is not None:
        assert err["code"] == code
    return err


@pytest.mark.parametrize("body", [b"{not json", b"", b'{"model": "x", "messages": [}'])
def test_malformed_json(base_url, body):
    err = assert_openai_error(post(base_url, "/v1/chat/completions", body), 400)
    assert err["code"] == "invalid_json"


def test_unknown_model(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="nope", messages=MSG)
    assert e.value.body["code"] == "model_not_found"


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        ({"max_tokens": -1}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 3.5}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"n": 0}, "n"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
        ({"messages": "hello"}, "messages"),
        ({"stream": "yes"}, "stream"),
        ({"top_logprobs": 5}, None),
    ],
)
def test_bad_fields(base_url, payload, param):
    body = {"model": MODEL, "messages": MSG, **payload}
    import json

    err = assert_openai_error(post(base_url, "/v1/chat/completions", json.dumps(body)), 400)
    if param:
        assert err["param"] == param


def test_oversize_prompt(client):
    huge = "x = 1\n" * 3000
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=huge, max_tokens=4)
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=10**6)
    assert e.value.body["param"] == "max_tokens"


def test_unsupported_parameters_are_refused(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=MSG, tools=[{
            "type": "function", "function": {"name": "f", "parameters": {}}}])
    assert e.value.body["code"] == "unsupported_parameter"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=MSG, logit_bias={"5": 10})
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt=[10**7], max_tokens=2)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:,"}}]}])


TOOL = [{"type": "function", "function": {"name": "f", "parameters": {}}}]


@pytest.mark.parametrize(
    ("path", "payload", "param"),
    [
        ("/v1/chat/completions", {"logit_bias": {"5": 10}}, "logit_bias"),
        ("/v1/completions", {"logit_bias": {"5": 10}}, "logit_bias"),
        ("/v1/chat/completions", {"min_p": 0.1}, "min_p"),  # refused with speculation
        # tools default to tool_choice "auto", which needs --tool-call-parser
        ("/v1/chat/completions", {"tools": TOOL}, "tool_choice"),
        ("/v1/completions", {"suffix": "\n"}, "suffix"),
        ("/v1/completions", {"best_of": 3, "n": 2}, "best_of"),
    ],
)
def test_each_refused_parameter_names_itself(base_url, path, payload, param):
    import json

    body = {"model": MODEL, "max_tokens": 2, **payload}
    body.update({"messages": MSG} if "chat" in path else {"prompt": "def"})
    err = assert_openai_error(post(base_url, path, json.dumps(body)), 400, param,
                              "unsupported_parameter")
    assert param in err["message"]


def test_values_the_engine_refuses_are_400_not_500(client):
    """Checked by vLLM's SamplingParams, not by our schema: still the caller's fault."""
    with pytest.raises(openai.BadRequestError) as e:  # our schema has no cross-field check
        client.completions.create(model=MODEL, prompt="def", max_tokens=3,
                                  extra_body={"min_tokens": 9})
    assert "min_tokens" in e.value.body["message"]


def test_unknown_route_and_method(base_url):
    assert_openai_error(httpx.get(f"{base_url}/v1/nothing"), 404)
    assert_openai_error(httpx.get(f"{base_url}/v1/chat/completions"), 405)


def test_top_k_with_nothing_to_verify_does_not_kill_the_engine(client):
    """The fuzz's engine killer (engine_ext/sampler_fixes.py): without the guard vLLM's
    rejection sampler raises on an empty top-k batch and the engine core dies."""
    for _ in range(2):
        r = client.completions.create(model=MODEL, prompt="\u00a9\U000904f7|", max_tokens=16,
                                      seed=0, extra_body={"top_k": 24})
        assert r.choices[0].finish_reason in ("length", "stop")
    ok = client.completions.create(model=MODEL, prompt="def f(x):", max_tokens=4,
                                   extra_body={"ignore_eos": True})
    assert ok.usage.completion_tokens == 4


def test_server_still_serves_after_errors(client):
    r = client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=4)
    assert r.choices[0].message.content is not None
