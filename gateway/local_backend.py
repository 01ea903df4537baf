"""The in-process engine as a backend: generation, interleaving, abort.

Yields :class:`Delta` events (one per choice per engine output); the serving classes
(:mod:`gateway.serving`) turn them into OpenAI JSON or SSE. Closing the iterator early
(client gone, error) aborts the request in the engine.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.engine_api import SpecEngine
from gateway.errors import OpenAIError, invalid

if TYPE_CHECKING:
    from fastapi import Response

    from gateway.context import RequestContext
    from gateway.serving.base import OpenAIServing
    from gateway.tool_calls import ToolPlan

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
    params: Any  # the engine's sampling parameters (built by SpecEngine.build_sampling_params)
    n: int
    prompt_tokens: int = 0
    prompt_texts: list[str] = field(default_factory=list)
    tool_plan: ToolPlan | None = None


class LocalBackend:
    name = "local"

    def __init__(self, engine: SpecEngine, servings: Mapping[str, OpenAIServing]):
        self.engine = engine
        self.servings = servings  # endpoint ("chat", "completions") -> its serving class
        self.outstanding = 0

    @property
    def models(self) -> list[str]:
        return [self.engine.model_name]

    @property
    def healthy(self) -> bool:
        return self.engine.ready

    @property
    def up(self) -> bool:
        return self.engine.ready

    async def handle(self, ctx: RequestContext) -> Response:
        return await self.servings[ctx.endpoint].serve(ctx, self.generate)

    async def _deltas(self, rid: str, ids: list[int], params: Any,
                      base: int) -> AsyncIterator[Delta]:
        try:
            async for out in self.engine.generate(ids, params, rid):
                for o in out.outputs:
                    yield Delta(base + o.index, o.text, list(o.token_ids), o.logprobs,
                                o.finish_reason, self.engine.spec_decode_counts(o))
        except OpenAIError:
            raise
        except ValueError as exc:  # vLLM input validation (e.g. logprobs over max)
            raise invalid(str(exc), param=getattr(exc, "param", None)) from exc

    async def generate(self, prep: Prepared) -> AsyncIterator[Delta]:
        rids = [f"{prep.request_id}-{i}" for i in range(len(prep.prompts))]
        streams = [self._deltas(rid, ids, prep.params, i * prep.n)
                   for i, (rid, ids) in enumerate(zip(rids, prep.prompts, strict=True))]
        # One prompt (every chat request, most completions): iterate the engine's stream
        # directly; a queue and a task per token would be pure per-token overhead.
        source = streams[0] if len(streams) == 1 else _merged(streams)
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
                await self.engine.abort(rids)
                log.info("aborted %s in the engine", prep.request_id)


async def _into(deltas: AsyncIterator[Delta], queue: asyncio.Queue) -> None:
    async for d in deltas:
        await queue.put(d)


async def _merged(streams: list[AsyncIterator[Delta]]) -> AsyncIterator[Delta]:
    """Interleave several prompts' deltas (a completions request with a prompt list)."""
    queue: asyncio.Queue = asyncio.Queue()
    tasks = [asyncio.create_task(_into(st, queue)) for st in streams]
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
