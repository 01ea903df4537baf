"""``POST /v1/chat/completions`` on the in-process engine."""

from __future__ import annotations

import uuid

from gateway.errors import invalid
from gateway.local_backend import Prepared
from gateway.openai_format import ChatFormatter
from gateway.protocol import ChatCompletionRequest
from gateway.sampling import reject_unsupported
from gateway.serving.base import OpenAIServing


class ChatServing(OpenAIServing):
    endpoint = "chat"

    async def prepare(self, req: ChatCompletionRequest) -> Prepared:
        reject_unsupported(req, self.engine.speculative)
        tok = self.engine.tokenizer
        try:
            messages = [{"role": m.role, "content": m.text()} for m in req.messages]
        except ValueError as exc:
            raise invalid(str(exc), param="messages") from exc
        try:
            text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # template errors are the caller's messages' fault
            raise invalid(f"could not apply the chat template: {exc}", param="messages") from exc
        ids = tok.encode(text, add_special_tokens=False)
        params = self.sampling(req, len(ids), "messages")
        return Prepared(f"chatcmpl-{uuid.uuid4().hex}", [ids], params, req.n, len(ids), [text])

    def formatter(self, req: ChatCompletionRequest, prep: Prepared) -> ChatFormatter:
        return ChatFormatter(prep.request_id, req.model, req.top_logprobs or 0, req.logprobs)
