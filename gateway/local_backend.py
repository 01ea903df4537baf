"""The in-process vLLM engine as a backend: prompt rendering, generation, abort.

Yields :class:`Delta` events (one per choice per engine output); the HTTP layer turns
them into OpenAI JSON or SSE. Cancelling the iterator (client gone) aborts the request
in the engine.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from vllm import SamplingParams

from engine_ext import request_params
from engine_ext.engine import SpecEngine
from gateway.errors import OpenAIError, invalid
from gateway.protocol import ChatCompletionRequest, CompletionRequest
from gateway.sampling import reject_unsupported, sampling_params
from gateway.structured_output import structured_outputs
from gateway.tool_calls import ToolPlan, plan_tools, template_messages

log = logging.getLogger("gateway.local")


@dataclass
class Delta:
    index: int
    text: str
    token_ids: list[int]
    logprobs: list[dict[int, Any]] | None
    finish_reason: str | None
    spec: dict[str, int] | None = None  # per-request speculative counts, final delta only


@dataclass
class Prepared:
    request_id: str
    prompts: list[list[int]]
    params: SamplingParams
    n: int
    prompt_tokens: int = 0
    prompt_texts: list[str] = field(default_factory=list)
    tool_plan: ToolPlan | None = None


class LocalBackend:
    name = "local"

    def __init__(self, engine: SpecEngine, tool_call_parser: str | None = None):
        self.engine = engine
        self.outstanding = 0
        self.tool_call_parser = tool_call_parser
        self._extractor = None
        self._defaults: dict | None = None

    def _sampling_defaults(self) -> dict:
        """generation_config.json defaults (read once; ``{}`` with --generation-config vllm)."""
        if self._defaults is None:
            self._defaults = request_params.default_sampling_params(self.engine.engine)
            log.info("model sampling defaults: %s", self._defaults)
        return self._defaults

    def _tool_extractor(self):
        if self.tool_call_parser and self._extractor is None:
            self._extractor = request_params.tool_call_extractor(self.tool_call_parser,
                                                                 self._tokenizer())
        return self._extractor

    @property
    def models(self) -> list[str]:
        return [self.engine.model_name]

    @property
    def healthy(self) -> bool:
        return self.engine.ready

    @property
    def max_model_len(self) -> int:
        return self.engine.settings.max_model_len

    def _tokenizer(self):
        return self.engine.engine.get_tokenizer()

    # ------------------------------------------------------------------ prepare
    async def prepare_chat(self, req: ChatCompletionRequest, stream: bool) -> Prepared:
        reject_unsupported(req, self.engine.settings.speculative)
        tok = self._tokenizer()
        try:
            messages = template_messages(req.messages)
        except ValueError as exc:
            raise invalid(str(exc), param="messages") from exc
        plan = plan_tools(req, self._tool_extractor())
        structured = plan.structured_outputs() if plan else structured_outputs(
            req.response_format)
        tools = ([t.model_dump(exclude_none=True) for t in req.tools]
                 if req.tools and req.tool_choice != "none" else None)
        try:
            text = tok.apply_chat_template(messages, tools=tools, tokenize=False,
                                           add_generation_prompt=True)
        except Exception as exc:  # template errors are the caller's messages' fault
            raise invalid(f"could not apply the chat template: {exc}", param="messages") from exc
        ids = tok.encode(text, add_special_tokens=False)
        params = sampling_params(req, len(ids), self.max_model_len, stream, "messages",
                                 self._sampling_defaults(), structured)
        return Prepared(f"chatcmpl-{uuid.uuid4().hex}", [ids], params, req.n, len(ids), [text],
                        plan)

    async def prepare_completion(self, req: CompletionRequest, stream: bool) -> Prepared:
        reject_unsupported(req, self.engine.settings.speculative)
        tok = self._tokenizer()
        try:
            raw = req.prompts()
        except ValueError as exc:
            raise invalid(str(exc), param="prompt") from exc
        vocab = len(tok)
        prompts, texts = [], []
        for p in raw:
            if isinstance(p, str):
                ids = tok.encode(p, add_special_tokens=False)
                texts.append(p)
            else:
                if not p:
                    raise invalid("prompt: token list must not be empty", param="prompt")
                if any(t < 0 or t >= vocab for t in p):
                    raise invalid(f"prompt: token ids must be in [0, {vocab})", param="prompt")
                ids = list(p)
                texts.append(tok.decode(ids))
            if not ids:
                raise invalid("prompt: must not be empty", param="prompt")
            prompts.append(ids)
        longest = max(len(p) for p in prompts)
        params = sampling_params(req, longest, self.max_model_len, stream, "prompt",
                                 self._sampling_defaults())
        return Prepared(f"cmpl-{uuid.uuid4().hex}", prompts, params, req.n,
                        sum(len(p) for p in prompts), texts)

    # ---------------------------------------------------------------- generate
    async def _deltas(self, rid: str, ids: list[int], params: SamplingParams,
                      base: int) -> AsyncIterator[Delta]:
        engine = self.engine.engine
        try:
            async for out in engine.generate({"prompt_token_ids": ids}, params, request_id=rid):
                for o in out.outputs:
                    yield Delta(base + o.index, o.text, list(o.token_ids), o.logprobs,
                                o.finish_reason, request_params.spec_decode_counts(o))
        except OpenAIError:
            raise
        except Exception as exc:  # vLLM input validation (e.g. logprobs over max)
            err = request_params.client_error(exc)
            if err is not None:
                raise invalid(str(err), param=err.param) from exc
            if isinstance(exc, ValueError):
                raise invalid(str(exc)) from exc
            raise

    async def _into(self, deltas: AsyncIterator[Delta], queue: asyncio.Queue) -> None:
        async for d in deltas:
            await queue.put(d)

    async def _merged(self, streams: list[AsyncIterator[Delta]]) -> AsyncIterator[Delta]:
        """Interleave several prompts' deltas (a completions request with a prompt list)."""
        queue: asyncio.Queue = asyncio.Queue()
        tasks = [asyncio.create_task(self._into(st, queue)) for st in streams]
        try:
            pending = set(tasks)
            while pending:
                getter = asyncio.create_task(queue.get())
                done, _ = await asyncio.wait({getter, *pending},
                                             return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                else:
                    getter.cancel()
                for t in done - {getter}:
                    pending.discard(t)
                    t.result()  # re-raise engine errors
            while not queue.empty():
                yield queue.get_nowait()
        finally:
            for t in tasks:
                t.cancel()

    async def generate(self, prep: Prepared) -> AsyncIterator[Delta]:
        rids = [f"{prep.request_id}-{i}" for i in range(len(prep.prompts))]
        streams = [self._deltas(rid, ids, prep.params, i * prep.n)
                   for i, (rid, ids) in enumerate(zip(rids, prep.prompts, strict=True))]
        # One prompt (every chat request, most completions): iterate the engine's stream
        # directly; a queue and a task per token would be pure per-token overhead.
        source = streams[0] if len(streams) == 1 else self._merged(streams)
        self.outstanding += 1
        done_all = False
        try:
            async for d in source:
                yield d
            done_all = True
        finally:
            self.outstanding -= 1
            if not done_all:
                await source.aclose()
                # The client left (or an error): free the engine's slots now.
                await self.engine.engine.abort(rids)
                log.info("aborted %s in the engine", prep.request_id)
