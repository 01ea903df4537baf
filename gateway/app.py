"""Assemble the FastAPI app: backends, router, limiter, middleware, routes, lifespan.

The data path of one request (see docs/architecture.md): routes -> Dispatcher (pick,
slot, failover) -> a Backend (local: a serving class per API over the engine; remote:
the proxy) -> JSON or SSE, with a RequestContext settling the bookkeeping once.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI

from gateway import access_log
from gateway.auth import KeyStore
from gateway.dispatch import Dispatcher
from gateway.engine_api import SpecEngine
from gateway.errors import install_error_handlers
from gateway.limits import ConcurrencyLimiter
from gateway.local_backend import LocalBackend
from gateway.middleware import RequestIdAuthMiddleware
from gateway.remote_backend import RemoteBackend
from gateway.routes import Services, api_routes, ops_routes
from gateway.routing import DEFAULT_POLICIES, Router, build_policies
from gateway.serving import ChatServing, CompletionServing

log = logging.getLogger("gateway")


@dataclass
class GatewayConfig:
    max_concurrency: int = 64
    max_queue: int = 256
    api_key: str | None = None  # when set, "Authorization: Bearer <key>" is required
    keys: KeyStore | None = None  # API keys with per-key rate limits (overrides api_key)
    routing: str = DEFAULT_POLICIES  # routing policy chain (gateway.routing.build_policies)
    tool_call_parser: str | None = None  # vLLM tool-call parser for tool_choice "auto"


def make_local_backend(engine: SpecEngine, tool_call_parser: str | None = None
                       ) -> LocalBackend:
    servings = (ChatServing(engine, tool_call_parser), CompletionServing(engine))
    return LocalBackend(engine, {s.endpoint: s for s in servings})


def create_app(engine: SpecEngine | None, config: GatewayConfig | None = None,
               remotes: list[RemoteBackend] | None = None) -> FastAPI:
    """``engine``: the in-process engine, or None for a pure router over ``remotes``."""
    config = config or GatewayConfig()
    remotes = list(remotes or [])
    local = [make_local_backend(engine, config.tool_call_parser)] if engine else []
    router = Router([*local, *remotes], build_policies(config.routing))
    limiter = ConcurrencyLimiter(config.max_concurrency, config.max_queue)
    app = FastAPI(title="specgw", version="0.1.0", lifespan=lifespan)
    app.state.services = Services(engine, remotes, router, Dispatcher(router, limiter))
    app.state.engine = engine
    install_error_handlers(app)
    app.add_middleware(access_log.AccessLogMiddleware)  # inner: sees the request id
    app.add_middleware(RequestIdAuthMiddleware,
                       keys=config.keys or KeyStore.load(None, config.api_key))
    app.include_router(ops_routes)
    app.include_router(api_routes)
    return app


@asynccontextmanager
async def lifespan(app: FastAPI):
    services: Services = app.state.services
    for r in services.remotes:
        r.start()
    try:
        engine = services.engine
        if engine is None:
            freeze_startup_heap()
            yield
            return
        # Start the engine in the background: /health answers at once, /ready only
        # once the engine is up and its self-check has run.
        task = asyncio.create_task(start_engine(app, engine))
        app.state.engine_task = task
        yield
        task.cancel()
        await engine.shutdown()
    finally:
        for r in services.remotes:
            await r.close()


def freeze_startup_heap() -> None:
    """Move everything alive after start-up (torch, vLLM, tokenizer: hundreds of
    thousands of objects) out of the collector's reach, as ``vllm serve`` does
    (``freeze_gc_heap``). Otherwise every full collection while serving walks that heap,
    a stall in the event loop; a suspect (not established) for the TTFT tails only
    specgw serve showed on the H200 (docs/serve_compare.md)."""
    gc.collect()
    gc.freeze()
    log.info("froze %d start-up objects out of the garbage collector", gc.get_freeze_count())


async def start_engine(app: FastAPI, engine: SpecEngine) -> None:
    try:
        await engine.start()
        freeze_startup_heap()
    except Exception as exc:
        # Fail fast: a gateway without its engine only hides the problem.
        log.error("engine failed to start: %s", exc)
        stop = getattr(app.state, "stop_server", None)
        if stop is not None:
            stop()
        else:
            os.kill(os.getpid(), signal.SIGTERM)
