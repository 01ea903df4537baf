"""The same OpenAI request gives the engine the same ``SamplingParams`` through specgw as
through vLLM's own server: specgw's mapping (``gateway.sampling`` ->
``engine_ext.request_params``) against vLLM's request models' ``to_sampling_params``,
field by field, for completions and chat, greedy and sampled. ``vllm bench serve``'s own
request is the first case: docs/benchmarks.md compares the two servers' engine cores on
it, so a difference here would be a difference there."""

from __future__ import annotations

import pytest
from vllm.entrypoints.openai.chat_completion.protocol import (
    ChatCompletionRequest as VllmChat,
)
from vllm.entrypoints.openai.completion.protocol import CompletionRequest as VllmCompletion

from engine_ext.request_params import build_sampling_params
from gateway.protocol import ChatCompletionRequest, CompletionRequest
from gateway.sampling import sampling_kwargs

MAX_MODEL_LEN, PROMPT_LEN = 2048, 3
# vLLM's server marks the params it builds per prompt as safe to use uncopied; specgw
# builds one for all prompts of a batch completion, so it leaves vLLM's copy on.
EXPECTED_DIFFERENCES = {"skip_clone"}

CASES = {
    # vllm bench serve's completions request (benchmarks/lib/endpoint_request_func.py)
    # with the serve_compare harness's greedy, --ignore-eos settings.
    "bench serve": {"max_tokens": 128, "repetition_penalty": 1.0, "logprobs": None,
                    "stream": True, "stream_options": {"include_usage": True},
                    "temperature": 0.0, "ignore_eos": True},
    "sampled": {"max_tokens": 64, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "seed": 7,
                "stop": ["\n\n", "END"]},
    "n, logprobs, penalties": {"max_tokens": 16, "n": 2, "logprobs": 3,
                               "presence_penalty": 0.5, "frequency_penalty": 0.3,
                               "min_tokens": 4},
    "no max_tokens": {"stop": "x"},
    # (n=null too in OpenAI's types, which vLLM's completions model refuses:
    # tests/test_openai_nulls.py)
    "nulls": {"logprobs": None, "stream": None, "max_tokens": None, "temperature": None},
    # vLLM's own extras that specgw honours (gateway.protocol), non-default values.
    "vllm extras": {"max_tokens": 8, "stop": ["x"], "stop_token_ids": [5, 7],
                    "include_stop_str_in_output": True, "skip_special_tokens": False,
                    "spaces_between_special_tokens": False},
}


def specgw_params(req, stream: bool):
    return build_sampling_params(sampling_kwargs(req, PROMPT_LEN, MAX_MODEL_LEN, stream,
                                                 "prompt"))


def vllm_params(req):
    # vLLM's serving layer passes the request's max_tokens (a completion's defaults to
    # 16), or the room left in the context when it is null.
    room = MAX_MODEL_LEN - PROMPT_LEN
    return req.to_sampling_params(room if req.max_tokens is None else req.max_tokens, {})


@pytest.mark.parametrize("kind", ["completions", "chat"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_specgw_builds_the_sampling_params_vllm_serve_builds(case: str, kind: str):
    body = {"model": "bench", **CASES[case]}
    if kind == "completions":
        body["prompt"] = "def fib(n):"
        ours, theirs = CompletionRequest(**body), VllmCompletion(**body)
    else:
        body["messages"] = [{"role": "user", "content": "def fib(n):"}]
        if body.get("logprobs"):
            body |= {"logprobs": True, "top_logprobs": body["logprobs"]}
        ours, theirs = ChatCompletionRequest(**body), VllmChat(**body)
    a, b = specgw_params(ours, bool(body.get("stream"))), vllm_params(theirs)
    differ = {f: (getattr(a, f), getattr(b, f)) for f in b.__struct_fields__
              if getattr(a, f) != getattr(b, f)}
    assert set(differ) == EXPECTED_DIFFERENCES, differ
