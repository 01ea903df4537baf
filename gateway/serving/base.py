"""What every local serving class shares: sampling parameters from the engine, the
non-streaming answer (aborted if the client leaves) and the SSE stream."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar, Protocol

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from gateway import access_log
from gateway.context import RequestContext
from gateway.engine_api import SpecEngine
from gateway.errors import OpenAIError, invalid
from gateway.local_backend import Delta, Prepared
from gateway.openai_format import usage
from gateway.sampling import sampling_kwargs
from gateway.sse import SSEResponse, sse, sse_error
from monitoring import metrics as m

log = logging.getLogger("gateway.serving")

Generate = Callable[[Prepared], AsyncIterator[Delta]]


class Formatter(Protocol):
    def chunk(self, d: Delta) -> dict: ...

    def usage_chunk(self, u: dict) -> dict: ...

    def full(self, finals: dict[int, Delta], u: dict) -> dict: ...


def check_token_ids(ids: Any, vocab: int, param: str) -> None:
    """Token ids a client sent, against a vocabulary of ``vocab`` ids: a 400 naming
    ``param``."""
    if any(t < 0 or t >= vocab for t in ids):
        raise invalid(f"{param}: token ids must be in [0, {vocab})", param=param)


class OpenAIServing(ABC):
    endpoint: ClassVar[str]

    def __init__(self, engine: SpecEngine):
        self.engine = engine

    @abstractmethod
    async def prepare(self, req: Any) -> Prepared:
        """Validate what the schema cannot, render the prompt, build sampling params."""

    @abstractmethod
    def formatter(self, req: Any, prep: Prepared) -> Formatter: ...

    def sampling(self, req: Any, prompt_len: int, prompt_param: str,
                 structured: dict | None = None) -> Any:
        # vLLM 0.32 refuses these too, at the engine's input (SamplingParams.verify), with
        # the same bound: the model's vocabulary, the logits' width they index, which
        # need not be len(tokenizer). Here it is a 400 before any stream opens, on every
        # vLLM version the table covers.
        check_token_ids(req.stop_token_ids or (), self.engine.vocab_size, "stop_token_ids")
        kwargs = sampling_kwargs(req, prompt_len, self.engine.max_model_len, req.stream,
                                 prompt_param, self.engine.sampling_defaults(), structured)
        try:
            return self.engine.build_sampling_params(kwargs)
        except (ValueError, TypeError) as exc:
            raise invalid(str(exc), param=getattr(exc, "param", None)) from exc

    async def serve(self, ctx: RequestContext, generate: Generate) -> Response:
        prep = await self.prepare(ctx.body)
        fmt = self.formatter(ctx.body, prep)
        ctx.started()
        if ctx.stream:
            return SSEResponse(self._events(ctx, prep, fmt, generate),
                               on_close=lambda: ctx.finish(499))
        finals: dict[int, Delta] = {}
        async for d in watch_disconnect(ctx.http, generate(prep), ctx.model):
            finals[d.index] = d
        completion = sum(len(d.token_ids) for d in finals.values())
        u = usage(prep.prompt_tokens, completion, [d.spec for d in finals.values() if d.spec])
        access_log.note_usage(u)
        body = fmt.full(finals, u)
        ctx.finish(200)
        return JSONResponse(body)

    async def _events(self, ctx: RequestContext, prep: Prepared, fmt: Formatter,
                      generate: Generate) -> AsyncIterator[bytes]:
        status, finished = 200, False
        gen = generate(prep)
        try:
            completion, clock, spec = 0, _TokenClock(ctx), []
            async for d in gen:
                clock.tick(len(d.token_ids))
                completion += len(d.token_ids)
                if d.spec:
                    spec.append(d.spec)
                yield sse(fmt.chunk(d))
            u = usage(prep.prompt_tokens, completion, spec)
            access_log.note_usage(u)
            if ctx.body.include_usage:
                yield sse(fmt.usage_chunk(u))
            yield sse("[DONE]")
            finished = True
        except Exception as exc:  # the stream already started: end it with an error event
            err = exc if isinstance(exc, OpenAIError) else _internal(exc)
            status = err.status
            yield sse_error(err.body())
            finished = True
        finally:
            if not finished:
                status = 499
                m.ABORTS.labels(ctx.model).inc()
            await gen.aclose()
            ctx.finish(status)


def _internal(exc: Exception) -> OpenAIError:
    log.error("stream failed", exc_info=exc)
    return OpenAIError(f"stream failed: {type(exc).__name__}", 500, "internal_server_error")


class _TokenClock:
    """Time to first token and inter-token latency, as the deltas pass."""

    def __init__(self, ctx: RequestContext):
        self.ctx = ctx
        self.ttft = m.TTFT.labels(ctx.model, ctx.endpoint)
        self.itl = m.ITL.labels(ctx.model, ctx.endpoint)  # resolved once: runs per token
        self.last: float | None = None

    def tick(self, tokens: int) -> None:
        if not tokens:
            return
        now = time.perf_counter()
        if self.last is None:
            self.ttft.observe(now - self.ctx.t0)
            self.ctx.access.ttft_ms = round((now - self.ctx.t0) * 1000, 3)
        else:
            self.itl.observe((now - self.last) / tokens)
        self.last = now


async def watch_disconnect(request: Request, it: AsyncIterator[Delta], model: str
                           ) -> AsyncIterator[Delta]:
    """Non-streaming: abort the engine request if the client goes away."""
    async def disconnected() -> None:
        while not await request.is_disconnected():
            await asyncio.sleep(0.25)

    watcher = asyncio.create_task(disconnected())
    try:
        while True:
            nxt = asyncio.ensure_future(it.__anext__())
            done, _ = await asyncio.wait({nxt, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if nxt in done:
                try:
                    yield nxt.result()
                except StopAsyncIteration:
                    return
            else:
                nxt.cancel()
                with contextlib.suppress(BaseException):
                    await nxt  # let the generator stop before aclose() (else RuntimeError)
                m.ABORTS.labels(model).inc()
                raise OpenAIError("Client disconnected", 499, "client_disconnected")
    finally:
        watcher.cancel()
        await it.aclose()
