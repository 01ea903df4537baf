"""Sampling defaults from the model's generation_config.json, with vllm serve's precedence
(request > model defaults > vLLM defaults). tests/models/tiny-tools sets temperature 0,
so requests without a temperature are greedy; a request's own temperature still wins."""

from __future__ import annotations

from conftest import TOOLS_MODEL

MESSAGES = [{"role": "user", "content": "Write a function."}]


def _text(tools_client, **kw) -> str:
    r = tools_client.chat.completions.create(model=TOOLS_MODEL, messages=MESSAGES,
                                             max_tokens=24, **kw)
    return r.choices[0].message.content


def test_model_default_temperature_applies(tools_client):
    # vLLM's default temperature is 1.0: unseeded, two samples would differ.
    assert _text(tools_client) == _text(tools_client)


def test_request_temperature_wins(tools_client):
    hot = {_text(tools_client, temperature=1.0, seed=s) for s in range(3)}
    assert len(hot) > 1, hot
