"""Every request field the OpenAI SDK's own parameter types declare nullable, and that
specgw's request models declare, accepts null (the SDK sends null for a parameter passed
as None; vLLM's server accepts it too). Read from the SDK's TypedDicts, so a field the
SDK adds or a model tightens is covered without listing it here."""

from __future__ import annotations

import types
import typing

import pydantic
import pytest
from openai.types import completion_create_params as completion_params
from openai.types.chat import completion_create_params as chat_params

from gateway.protocol import ChatCompletionRequest, CompletionRequest

CASES = {
    "chat": (chat_params.CompletionCreateParamsNonStreaming, ChatCompletionRequest,
             {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    "completions": (completion_params.CompletionCreateParamsNonStreaming, CompletionRequest,
                    {"model": "m", "prompt": "hi"}),
}


def admits_none(tp: object) -> bool:
    """Whether a (possibly Annotated / Required) annotation admits None."""
    while typing.get_origin(tp) in (typing.Annotated, typing.Required, typing.NotRequired):
        tp = typing.get_args(tp)[0]
    if tp is type(None):
        return True
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return any(admits_none(a) for a in typing.get_args(tp))
    return False


def nullable_fields(params: type, model: type[pydantic.BaseModel]) -> list[str]:
    hints = typing.get_type_hints(params, include_extras=True)
    return sorted(f for f, tp in hints.items() if f in model.model_fields and admits_none(tp))


@pytest.mark.parametrize("case", sorted(CASES))
def test_fields_the_sdk_types_nullable_accept_null(case: str):
    params, model, base = CASES[case]
    # The request's own content (model, prompt, messages) is given, not nulled.
    fields = [f for f in nullable_fields(params, model) if f not in base]
    rejected = {}
    for f in fields:
        try:
            model(**base, **{f: None})
        except pydantic.ValidationError as exc:
            rejected[f] = exc.errors()[0]["msg"]
    assert rejected == {}
    # Those that once rejected null read it as their default (elsewhere null can have a
    # meaning of its own: a chat request's max_tokens=null is "up to the context").
    once = ["n", "stream", "logprobs" if case == "chat" else "echo"]
    assert set(once) <= set(fields)
    req = model(**base, **dict.fromkeys(once))
    assert all(getattr(req, f) == model.model_fields[f].default for f in once)


def test_a_completions_null_max_tokens_is_its_default_16_and_a_chats_is_open():
    """OpenAI's completions reference: max_tokens "defaults to 16", null included (vLLM
    0.32's normalize_null_max_tokens reads it so); a chat request has no such default."""
    assert CompletionRequest(model="m", prompt="hi", max_tokens=None).max_tokens == 16
    chat = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                 max_tokens=None)
    assert chat.max_tokens is None and chat.output_limit is None
