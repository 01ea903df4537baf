"""``POST /v1/completions`` on the in-process engine."""

from __future__ import annotations

import uuid

from gateway.engine_api import Tokenizer
from gateway.errors import invalid
from gateway.local_backend import Prepared
from gateway.openai_format import CompletionFormatter
from gateway.protocol import CompletionRequest
from gateway.sampling import reject_unsupported
from gateway.serving.base import OpenAIServing, check_token_ids
from gateway.structured_output import structured_outputs


def encode_prompt(tok: Tokenizer, prompt: str | list[int], vocab: int,
                  add_special_tokens: bool) -> tuple[list[int], str]:
    """One prompt (text or token ids) -> (token ids, its text). Token ids are taken as
    given, as vLLM does."""
    if isinstance(prompt, str):
        ids, text = tok.encode(prompt, add_special_tokens=add_special_tokens), prompt
        # An added token named in the text may lie past the model's embedding.
        check_token_ids(ids, vocab, "prompt")
    else:
        if not prompt:
            raise invalid("prompt: token list must not be empty", param="prompt")
        check_token_ids(prompt, vocab, "prompt")
        ids = list(prompt)
        text = tok.decode(ids)
    if not ids:
        raise invalid("prompt: must not be empty", param="prompt")
    return ids, text


class CompletionServing(OpenAIServing):
    endpoint = "completions"

    async def prepare(self, req: CompletionRequest) -> Prepared:
        reject_unsupported(req, self.engine.speculative)
        tok = self.engine.tokenizer
        try:
            raw = req.prompts()
        except ValueError as exc:
            raise invalid(str(exc), param="prompt") from exc
        # Both bounds: an id past the model's vocabulary indexes past its embedding (vLLM
        # lets through any id that either one holds), one past the tokenizer's has no
        # text to echo or detokenize.
        vocab = min(len(tok), self.engine.vocab_size)
        encoded = [encode_prompt(tok, p, vocab, req.add_special_tokens) for p in raw]
        prompts = [ids for ids, _ in encoded]
        params = self.sampling(req, max(len(p) for p in prompts), "prompt",
                               structured_outputs(req.response_format))
        return Prepared(f"cmpl-{uuid.uuid4().hex}", prompts, params, req.n,
                        sum(len(p) for p in prompts), [text for _, text in encoded])

    def formatter(self, req: CompletionRequest, prep: Prepared) -> CompletionFormatter:
        return CompletionFormatter(prep.request_id, req.model, req.logprobs,
                                   prep.prompt_texts if req.echo else None, req.n)
