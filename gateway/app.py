"""The FastAPI app: request -> validation -> routing -> engine -> stream -> metrics."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from engine_ext.engine import SpecEngine
from gateway import access_log
from gateway.auth import KeyStore
from gateway.errors import OpenAIError, install_error_handlers
from gateway.limits import ConcurrencyLimiter
from gateway.local_backend import Delta, LocalBackend, Prepared
from gateway.middleware import RequestIdAuthMiddleware
from gateway.openai_format import ChatFormatter, CompletionFormatter, usage
from gateway.protocol import ChatCompletionRequest, CompletionRequest
from gateway.proxy import proxy
from gateway.remote_backend import RemoteBackend
from gateway.request_id import REQUEST_ID
from gateway.routing import Router
from gateway.sse import SSEResponse, sse
from gateway.strict_json import StrictJSONRoute
from monitoring import metrics as m

log = logging.getLogger("gateway")


@dataclass
class GatewayConfig:
    max_concurrency: int = 64
    max_queue: int = 256
    api_key: str | None = None  # when set, "Authorization: Bearer <key>" is required
    keys: KeyStore | None = None  # API keys with per-key rate limits (overrides api_key)
    tool_call_parser: str | None = None  # vLLM tool-call parser for tool_choice "auto"


def create_app(engine: SpecEngine | None, config: GatewayConfig | None = None,
               remotes: list[RemoteBackend] | None = None) -> FastAPI:
    """``engine``: the in-process engine, or None for a pure router over ``remotes``."""
    config = config or GatewayConfig()
    remotes = list(remotes or [])
    local = [LocalBackend(engine, config.tool_call_parser)] if engine else []
    router = Router([*local, *remotes])
    limiter = ConcurrencyLimiter(config.max_concurrency, config.max_queue)
    keys = config.keys or KeyStore.load(None, config.api_key)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        for r in remotes:
            r.start()
        try:
            if engine is None:
                yield
                return
            # Start the engine in the background: /health answers at once, /ready only
            # once the engine is up and its self-check has run.
            task = asyncio.create_task(start_engine(engine))
            app.state.engine_task = task
            yield
            task.cancel()
            await engine.shutdown()
        finally:
            for r in remotes:
                await r.close()

    async def start_engine(engine: SpecEngine) -> None:
        try:
            await engine.start()
        except Exception as exc:
            # Fail fast: a gateway without its engine only hides the problem.
            log.error("engine failed to start: %s", exc)
            stop = getattr(app.state, "stop_server", None)
            if stop is not None:
                stop()
            else:
                os.kill(os.getpid(), signal.SIGTERM)

    app = FastAPI(title="specgw", version="0.1.0", lifespan=lifespan)
    app.state.engine = engine
    app.router.route_class = StrictJSONRoute  # bodies must be valid Unicode JSON
    install_error_handlers(app)

    app.add_middleware(access_log.AccessLogMiddleware)  # inner: sees the request id
    app.add_middleware(RequestIdAuthMiddleware, keys=keys)

    def require_engine() -> SpecEngine:
        if engine is None:
            raise OpenAIError("this gateway has no in-process engine", 404, "not_found_error")
        return engine

    # ----------------------------------------------------------------- probes
    @app.get("/health")
    async def health() -> Response:
        if engine is not None and (engine.start_error or engine.errored):
            return JSONResponse({"status": "error", "error": engine.start_error}, 503)
        return JSONResponse({"status": "ok"})

    @app.get("/ready")
    async def ready() -> Response:
        if engine is None:
            up = [r.name for r in remotes if r.healthy]
            return JSONResponse({"status": "ready" if up else "no healthy backend",
                                 "backends": up}, 200 if up else 503)
        if engine.ready:
            return JSONResponse({"status": "ready", "model": engine.model_name})
        return JSONResponse({"status": "starting" if not engine.start_error else "error",
                             "error": engine.start_error}, 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        if remotes:
            from gateway.remote_metrics import REMOTE_ENGINES

            await REMOTE_ENGINES.refresh(remotes)
        if engine is not None and engine.ready:
            try:  # fresh worker counters at scrape time, bounded so a scrape never hangs
                await asyncio.wait_for(engine.refresh_probes(), 5)
            except Exception as exc:
                log.warning("probe refresh at scrape failed: %s", exc)
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/engine/probes")
    async def probes() -> Response:
        """Raw per-rank probe ledgers (what /metrics mirrors), for debugging and tests."""
        engine = require_engine()
        if not engine.ready:
            raise OpenAIError("engine is not ready", 503, "service_unavailable")
        return JSONResponse(await engine.refresh_probes())

    @app.get("/v1/engine/self_check")
    async def self_check() -> Response:
        return JSONResponse(require_engine().self_check or {"status": "starting"})

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "specgw"}
            for name in router.models()
        ]}

    # ------------------------------------------------------------- generation
    async def serve(request: Request, endpoint: str, req, prep_fn, formatter_fn) -> Response:
        t0 = time.perf_counter()
        model = req.model
        status = "200"
        stack = AsyncExitStack()
        affinity = request.headers.get("x-session-id") or req.user
        rec = access_log.record()
        rec.model, rec.endpoint = model, endpoint
        try:
            be = router.pick(model, affinity=affinity)
            await stack.enter_async_context(limiter.slot())
            if isinstance(be, RemoteBackend):
                headers = {"x-request-id": REQUEST_ID.get()}
                return await proxy(be, router, request.url.path, endpoint, model,
                                   await request.json(), req.stream, headers, affinity,
                                   stack, t0)
            prep: Prepared = await prep_fn(be, req)
        except OpenAIError as exc:
            await stack.aclose()
            m.REQUESTS.labels(model if exc.code != "model_not_found" else "unknown", endpoint,
                              str(exc.status)).inc()
            raise
        fmt = formatter_fn(prep)
        m.IN_FLIGHT.labels(model).inc()
        stack.callback(m.IN_FLIGHT.labels(model).dec)
        if req.stream:
            return SSEResponse(stream_events(request, endpoint, model, be, prep, fmt,
                                             req.include_usage, t0, stack))
        try:
            finals: dict[int, Delta] = {}
            async for d in watch_disconnect(request, be.generate(prep), model):
                finals[d.index] = d
            completion = sum(len(d.token_ids) for d in finals.values())
            u = usage(prep.prompt_tokens, completion, [d.spec for d in finals.values() if d.spec])
            access_log.note_usage(u)
            body = fmt.full(finals, u)
            return JSONResponse(body)
        except OpenAIError as exc:
            status = str(exc.status)
            raise
        except Exception:
            status = "500"
            raise
        finally:
            m.record_request(model, endpoint, status, time.perf_counter() - t0)
            await stack.aclose()

    async def watch_disconnect(request: Request, it: AsyncIterator[Delta], model: str):
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
                    m.ABORTS.labels(model).inc()
                    raise OpenAIError("Client disconnected", 499, "client_disconnected")
        finally:
            watcher.cancel()
            await it.aclose()

    async def stream_events(request, endpoint, model, be, prep, fmt, include_usage, t0,
                            stack: AsyncExitStack) -> AsyncIterator[bytes]:
        status, completion = "200", 0
        spec: list[dict] = []
        last = None
        finished = False
        gen = be.generate(prep)
        itl = m.ITL.labels(model, endpoint)  # resolved once: this loop runs per token
        try:
            async for d in gen:
                if d.token_ids:
                    now = time.perf_counter()
                    if last is None:
                        m.TTFT.labels(model, endpoint).observe(now - t0)
                        access_log.record().ttft_ms = round((now - t0) * 1000, 3)
                    else:
                        itl.observe((now - last) / len(d.token_ids))
                    last = now
                    completion += len(d.token_ids)
                if d.spec:
                    spec.append(d.spec)
                yield sse(fmt.chunk(d))
            u = usage(prep.prompt_tokens, completion, spec)
            access_log.note_usage(u)
            if include_usage:
                yield sse(fmt.usage_chunk(u))
            yield sse("[DONE]")
            finished = True
        except OpenAIError as exc:
            status = str(exc.status)
            yield sse(exc.body())
            yield sse("[DONE]")
            finished = True
        except Exception as exc:  # the stream already started: end it with an error event
            status = "500"
            log.exception("stream failed")
            yield sse(OpenAIError(f"stream failed: {type(exc).__name__}", 500,
                                  "internal_server_error").body())
            yield sse("[DONE]")
            finished = True
        finally:
            if not finished:
                status = "499"
                m.ABORTS.labels(model).inc()
            await gen.aclose()
            m.record_request(model, endpoint, status, time.perf_counter() - t0)
            await stack.aclose()

    @app.post("/v1/chat/completions")
    async def chat(request: Request, body: ChatCompletionRequest) -> Response:
        return await serve(
            request, "chat", body,
            lambda be, r: be.prepare_chat(r, r.stream),
            lambda p: ChatFormatter(p.request_id, body.model, body.top_logprobs or 0,
                                    body.logprobs, p.tool_plan),
        )

    @app.post("/v1/completions")
    async def completions(request: Request, body: CompletionRequest) -> Response:
        return await serve(
            request, "completions", body,
            lambda be, r: be.prepare_completion(r, r.stream),
            lambda p: CompletionFormatter(p.request_id, body.model, body.logprobs,
                                          p.prompt_texts if body.echo else None, body.n),
        )

    return app
