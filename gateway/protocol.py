"""Request models for the OpenAI endpoints we serve.

Field names, types and ranges follow the OpenAI API reference; the vLLM extras that
OpenAI-SDK users pass through ``extra_body`` (top_k, min_p, repetition_penalty,
ignore_eos, min_tokens, stop_token_ids, ...) are accepted too. Unknown fields are
ignored, as vLLM does, except the rest of vLLM's own request fields: a vLLM client sends
those meaning them, so each one we cannot honour is listed in ``UNHONOURED`` with the
values that ask for nothing (vLLM's default), and any other value is a 400
(``gateway.sampling.reject_unsupported``), never silently dropped. The guard test holds
the lists to vLLM's request models.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)


def null_is(default: Any) -> BeforeValidator:
    """The OpenAI reference types these fields nullable (the SDK sends null for a
    parameter passed as None); null reads as the default, as in vLLM's server where it
    accepts null at all (its completions model refuses ``n: null``)."""
    return BeforeValidator(lambda v: default if v is None else v)


Temperature = Annotated[float, Field(ge=0.0, le=2.0)]
TopP = Annotated[float, Field(gt=0.0, le=1.0)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]


class StreamOptions(BaseModel):
    include_usage: StrictBool = False
    continuous_usage_stats: StrictBool = False


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class FunctionCall(BaseModel):
    name: str
    arguments: str


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class FunctionDef(BaseModel):
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None


class Tool(BaseModel):
    type: Literal["function"]
    function: FunctionDef


class NamedToolChoice(BaseModel):
    class _Name(BaseModel):
        name: str

    type: Literal["function"]
    function: _Name


class JSONSchemaFormat(BaseModel):
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")]
    description: str | None = None
    # "schema" shadows a BaseModel attribute, hence the alias.
    schema_: Annotated[dict[str, Any] | None, Field(alias="schema")] = None
    strict: StrictBool | None = None


class ResponseFormat(BaseModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None

    @model_validator(mode="after")
    def _check(self):
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("json_schema: required when type is 'json_schema'")
        return self


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _check_tool_fields(self):
        if self.tool_calls and self.role != "assistant":
            raise ValueError("tool_calls: only assistant messages carry tool_calls")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("tool_call_id: required for tool messages")
        return self

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        out = []
        for part in self.content:
            if part.type != "text" or part.text is None:
                raise ValueError(f"content part type {part.type!r} is not supported "
                                 "(this model is text-only)")
            out.append(part.text)
        return "".join(out)


# vLLM request fields this server does not honour -> the values that ask for nothing
# (vLLM's defaults; None always does). Shared by both endpoints; the per-endpoint ones are
# added on each request class.
_UNHONOURED_COMMON: dict[str, tuple[Any, ...]] = {
    "allowed_token_ids": (None,),
    "bad_words": (None, []),
    "cache_salt": (None,),
    "ec_transfer_params": (None,),
    "kv_transfer_params": (None,),
    "length_penalty": (None, 1.0),
    "logprob_token_ids": (None,),
    "mm_payload": (None, "tensors", "none"),  # text-only: no media either way
    "priority": (None, 0),
    "prompt_logprobs": (None,),
    "repetition_detection": (None,),
    "request_id": (None,),  # ours come from X-Request-Id
    "return_mm_kwargs": (None, False),
    "return_token_ids": (None, False),
    "return_token_offsets": (None, False),
    "return_tokens_as_token_ids": (None, False),
    "routed_experts_prompt_start": (None, 0),
    "session_id": (None,),
    "stream_interval": (None, 1),
    "structured_outputs": (None,),  # response_format is the supported form
    "thinking_token_budget": (None,),
    "truncate_prompt_tokens": (None,),
    # Only read with truncate_prompt_tokens, which asks for nothing here.
    "truncation_side": (None, "left", "right"),
    "use_beam_search": (None, False),
    "vllm_xargs": (None,),
    "watermarking": (None, False),
}


# transformers' apply_chat_template parameters (4.5x-5.x) and the names it fills itself:
# "conversations" is render_jinja_template's (5.x passes it by keyword beside the
# kwargs), "self" the bound method's own; either as a kwarg is a TypeError in the call.
CHAT_TEMPLATE_PARAMETERS = frozenset({
    "add_generation_prompt", "chat_template", "continue_final_message", "conversation",
    "conversations", "documents", "max_length", "messages", "padding",
    "return_assistant_tokens_mask", "return_dict", "return_tensors", "self", "tokenize",
    "tokenizer_kwargs", "tools", "truncation",
})


class _SamplingFields(BaseModel):
    # "allow": reject_unsupported reads the extras against UNHONOURED.
    model_config = ConfigDict(extra="allow")
    UNHONOURED: ClassVar[dict[str, tuple[Any, ...]]] = _UNHONOURED_COMMON

    model: str
    temperature: Temperature | None = None
    top_p: TopP | None = None
    n: Annotated[StrictInt, Field(ge=1, le=16), null_is(1)] = 1
    stop: str | list[str] | None = None
    # int64, as vLLM's own server bounds it: larger seeds overflow torch's generator.
    seed: Annotated[StrictInt, Field(ge=-(2**63), le=2**63 - 1)] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    stream: Annotated[StrictBool, null_is(False)] = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    logit_bias: dict[str, float] | None = None
    # vLLM extras
    top_k: Annotated[StrictInt, Field(ge=-1, le=2**31 - 1)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0.0, le=2.0)] | None = None
    ignore_eos: StrictBool = False
    min_tokens: Annotated[StrictInt, Field(ge=0)] = 0
    stop_token_ids: list[Annotated[StrictInt, Field(ge=0)]] | None = None
    include_stop_str_in_output: StrictBool = False
    skip_special_tokens: StrictBool = True
    spaces_between_special_tokens: StrictBool = True

    @model_validator(mode="after")
    def _check_common(self):
        if isinstance(self.stop, list) and len(self.stop) > 16:
            raise ValueError("stop: at most 16 stop sequences")
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options: only allowed when stream is true")
        return self

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatCompletionRequest(_SamplingFields):
    UNHONOURED: ClassVar[dict[str, tuple[Any, ...]]] = {
        **_UNHONOURED_COMMON,
        "add_generation_prompt": (None, True),
        "chat_template": (None,),
        "continue_final_message": (None, False),
        "documents": (None,),
        "echo": (None, False),
        "include_reasoning": (None, True, False),  # no reasoning parser: nothing to include
        "media_io_kwargs": (None,),
        "mm_processor_kwargs": (None,),
        # As OpenAI answers it for a model that does not reason; "none" asks for no
        # reasoning, passed to the template as enable_thinking false (serving/chat.py).
        "reasoning_effort": (None, "none"),
        "return_prompt_text": (None, False),
    }
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_tokens: Annotated[StrictInt, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[StrictInt, Field(ge=1)] | None = None
    logprobs: Annotated[StrictBool, null_is(False)] = False
    top_logprobs: Annotated[StrictInt, Field(ge=0, le=20)] | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: StrictBool | None = None
    response_format: ResponseFormat | None = None
    # vLLM's defaults per endpoint: the chat template writes its own BOS.
    add_special_tokens: StrictBool = False
    # Variables for the chat template (Qwen3's enable_thinking, say), as vLLM passes them.
    chat_template_kwargs: dict[str, Any] | None = None

    @field_validator("chat_template_kwargs")
    @classmethod
    def _template_variables_only(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        # apply_chat_template's own parameters would change what it returns (tokens, a
        # dict) or override what the request says (messages, tools): refused, not a 500.
        taken = sorted(set(v or ()) & CHAT_TEMPLATE_PARAMETERS)
        if taken:
            raise ValueError(f"chat_template_kwargs: {', '.join(taken)} cannot be set "
                             "here (a parameter of the template call, not a variable of "
                             "the template)")
        return v

    @model_validator(mode="after")
    def _check_chat(self):
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs: requires logprobs to be true")
        if self.tool_choice not in (None, "none") and not self.tools:
            raise ValueError("tool_choice: requires tools")
        if isinstance(self.tool_choice, NamedToolChoice):
            names = {t.function.name for t in self.tools or []}
            if self.tool_choice.function.name not in names:
                raise ValueError(f"tool_choice: function {self.tool_choice.function.name!r} "
                                 "is not among tools")
        if self.tools and self.response_format and self.response_format.type != "text" \
                and self.tool_choice not in (None, "none"):
            raise ValueError("response_format: cannot be combined with tool calls")
        return self

    @property
    def output_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_SamplingFields):
    UNHONOURED: ClassVar[dict[str, tuple[Any, ...]]] = {
        **_UNHONOURED_COMMON,
        "prompt_embeds": (None,),
    }
    prompt: str | list[str] | list[StrictInt] | list[list[StrictInt]]
    # null is the default 16 here (the reference's "defaults to 16"; vLLM 0.32 reads it
    # so too), not "up to the context" as a chat request's null.
    max_tokens: Annotated[StrictInt, Field(ge=1), null_is(16)] = 16
    logprobs: Annotated[StrictInt, Field(ge=0, le=20)] | None = None
    echo: Annotated[StrictBool, null_is(False)] = False
    suffix: str | None = None
    best_of: StrictInt | None = None
    response_format: ResponseFormat | None = None  # a vLLM extension on completions
    add_special_tokens: StrictBool = True

    @property
    def output_limit(self) -> int | None:
        return self.max_tokens

    def prompts(self) -> list[str | list[int]]:
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if not p:
            raise ValueError("prompt: must not be empty")
        if all(isinstance(x, int) for x in p):
            return [list(p)]  # one prompt of token ids
        return list(p)


MIN_POLL_INTERVAL_S = 1.0  # each poll takes a slot in the engine's step loop


class ProbeSwitchRequest(BaseModel):
    """``POST /v1/engine/probes``: the workers' probes in or out, and the poll interval
    (an operator's switch, and the probe-cost benchmark's A/B inside one server)."""

    model_config = ConfigDict(extra="forbid")

    enabled: StrictBool
    # Strict: true or "5" are refused, as for ``enabled``.
    poll_interval_s: Annotated[float, Field(strict=True, ge=MIN_POLL_INTERVAL_S,
                                            le=3600.0)] | None = None


# As engine_ext.internals.install.GROUPS (a test holds them equal; the gateway does not
# import the engine's side).
ProbeGroup = Literal["replay", "pieces", "forward_context", "propose", "fused", "suppress"]
ALTERNATE_MAX_STEPS = 200_000  # as engine_ext.probes.alternate.MAX_STEPS: 200k steps of
# records is a few MB in one RPC answer


class ProbeAlternateRequest(BaseModel):
    """``POST /v1/engine/probes/alternate``: measure the probes' cost inside the running
    engine, step by step (engine_ext.probes.alternate): ``ab`` switches them in and out
    in pairs of steps, ``aa`` is the control with them in on both sides."""

    model_config = ConfigDict(extra="forbid")

    steps: Annotated[int, Field(strict=True, ge=2, le=ALTERNATE_MAX_STEPS,
                                multiple_of=2)]
    mode: Literal["ab", "aa"] = "ab"
    seed: Annotated[int, Field(strict=True, ge=0, le=2**32 - 1)] = 0
    # Price some kinds of wrapper alone (engine_ext.internals.install.GROUPS); None: all.
    groups: Annotated[list[ProbeGroup], Field(min_length=1)] | None = None
