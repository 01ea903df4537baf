"""Sampling defaults from the model's generation_config.json, with vllm serve's precedence
(request > model defaults > vLLM defaults). tests/models/tiny-tools sets temperature 0,
so requests without a temperature are greedy; a request's own temperature still wins."""

from __future__ import annotations

import pytest
import tools_server
from tools_server import TOOLS_MODEL


@pytest.fixture(scope="module")
def srv(request):
    return tools_server.shared(request.config)


@pytest.fixture(scope="module")
def oai(srv):
    return tools_server.openai_client(srv)


MESSAGES = [{"role": "user", "content": "Write a function."}]


def _text(oai, **kw) -> str:
    r = oai.chat.completions.create(model=TOOLS_MODEL, messages=MESSAGES, max_tokens=24, **kw)
    return r.choices[0].message.content


def test_model_default_temperature_applies(oai):
    # vLLM's default temperature is 1.0: unseeded, two samples would differ.
    assert _text(oai) == _text(oai)


def test_request_temperature_wins(oai):
    hot = {_text(oai, temperature=1.0, seed=s) for s in range(3)}
    assert len(hot) > 1, hot
