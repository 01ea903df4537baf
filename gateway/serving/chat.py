"""``POST /v1/chat/completions`` on the in-process engine."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from gateway.engine_api import SpecEngine, ToolCallExtractor
from gateway.errors import invalid
from gateway.local_backend import Prepared
from gateway.openai_format import ChatFormatter
from gateway.protocol import ChatCompletionRequest
from gateway.sampling import reject_unsupported
from gateway.serving.base import OpenAIServing, check_token_ids
from gateway.structured_output import structured_outputs
from gateway.tool_calls import plan_tools, template_messages


def template_kwargs(req: ChatCompletionRequest, own: bool = True) -> dict:
    """The request's template variables; reasoning_effort "none" turns thinking off
    unless the request says otherwise, as vLLM renders it (enable_thinking false).
    ``own`` False leaves out the request's chat_template_kwargs."""
    kwargs = dict(req.chat_template_kwargs or {}) if own else {}
    if (req.model_extra or {}).get("reasoning_effort") == "none":
        kwargs.setdefault("enable_thinking", False)
    return kwargs


def template_fault(req: ChatCompletionRequest, render: Callable[[dict], str]) -> str:
    """The request field a failed render is down to. An error does not say whether a
    variable or a message tripped the template, so render once more without the
    request's chat_template_kwargs (on the error path only): if that renders, they are
    what the client must change."""
    if not req.chat_template_kwargs:
        return "messages"
    try:
        render(template_kwargs(req, own=False))
    except Exception:
        return "messages"
    return "chat_template_kwargs"


class ChatServing(OpenAIServing):
    endpoint = "chat"

    def __init__(self, engine: SpecEngine, tool_call_parser: str | None = None):
        super().__init__(engine)
        self.tool_call_parser = tool_call_parser  # for tool_choice "auto" (vLLM's parsers)
        self._extractor: ToolCallExtractor | None = None

    def _tool_extractor(self) -> ToolCallExtractor | None:
        if self.tool_call_parser and self._extractor is None:
            self._extractor = self.engine.tool_call_extractor(self.tool_call_parser)
        return self._extractor

    async def prepare(self, req: ChatCompletionRequest) -> Prepared:
        reject_unsupported(req, self.engine.speculative)
        tok = self.engine.tokenizer
        try:
            messages = template_messages(req.messages)
        except ValueError as exc:
            raise invalid(str(exc), param="messages") from exc
        plan = plan_tools(req, self._tool_extractor())
        structured = (plan.structured_outputs() if plan
                      else structured_outputs(req.response_format))

        def render(kwargs: dict) -> str:
            return tok.apply_chat_template(messages, tools=plan.tools if plan else None,
                                           tokenize=False, add_generation_prompt=True,
                                           **kwargs)

        try:
            text = render(template_kwargs(req))
        except Exception as exc:  # template errors are the caller's fault, not a 500
            raise invalid(f"could not apply the chat template: {exc}",
                          param=template_fault(req, render)) from exc
        ids = tok.encode(text, add_special_tokens=req.add_special_tokens)
        # Text can name an added token past the model's embedding (a tokenizer matches
        # added tokens inside any text); vLLM lets it through to the lookup.
        check_token_ids(ids, self.engine.vocab_size, "messages")
        params = self.sampling(req, len(ids), "messages", structured)
        return Prepared(f"chatcmpl-{uuid.uuid4().hex}", [ids], params, req.n, len(ids), [text],
                        plan)

    def formatter(self, req: ChatCompletionRequest, prep: Prepared) -> ChatFormatter:
        return ChatFormatter(prep.request_id, req.model, req.top_logprobs or 0, req.logprobs,
                             prep.tool_plan)
