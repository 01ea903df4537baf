"""The HTTP routes, thin: each one hands over to the service that does the work.

``ops_routes``: health, readiness, metrics, engine probes, model list.
``api_routes``: the OpenAI generation endpoints, through the :class:`Dispatcher`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from gateway.dispatch import Dispatcher
from gateway.engine_api import SpecEngine
from gateway.errors import OpenAIError, worker_call_error
from gateway.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    ProbeAlternateRequest,
    ProbeSwitchRequest,
)
from gateway.remote_backend import RemoteBackend
from gateway.routing import Router
from gateway.strict_json import StrictJSONRoute

log = logging.getLogger("gateway")
ops_routes = APIRouter()
api_routes = APIRouter(route_class=StrictJSONRoute)  # bodies must be valid Unicode JSON
SCRAPE_REFRESH_TIMEOUT_S = 5.0


@dataclass
class Services:
    engine: SpecEngine | None  # None: a pure router over remote backends
    remotes: list[RemoteBackend]
    router: Router
    dispatcher: Dispatcher


def services(request: Request) -> Services:
    return request.app.state.services


def require_engine(request: Request) -> SpecEngine:
    engine = services(request).engine
    if engine is None:
        raise OpenAIError("this gateway has no in-process engine", 404, "not_found_error")
    return engine


def ready_engine(request: Request) -> SpecEngine:
    engine = require_engine(request)
    if not engine.ready:
        raise OpenAIError("engine is not ready", 503, "service_unavailable")
    return engine


async def engine_answer(request: Request,
                        call: Callable[[SpecEngine], Awaitable[Any]]) -> Response:
    """A call into the ready engine's workers as JSON; its failure as worker_call_error."""
    engine = ready_engine(request)
    try:
        return JSONResponse(await call(engine))
    except RuntimeError as exc:
        raise worker_call_error(exc) from exc


# ------------------------------------------------------------------------- ops
@ops_routes.get("/health")
async def health(request: Request) -> Response:
    engine = services(request).engine
    if engine is not None and (engine.start_error or engine.errored):
        return JSONResponse({"status": "error", "error": engine.start_error}, 503)
    return JSONResponse({"status": "ok"})


@ops_routes.get("/ready")
async def ready(request: Request) -> Response:
    s = services(request)
    if s.engine is None:
        up = [r.name for r in s.remotes if r.healthy]
        return JSONResponse({"status": "ready" if up else "no healthy backend",
                             "backends": up}, 200 if up else 503)
    if s.engine.ready:
        return JSONResponse({"status": "ready", "model": s.engine.model_name})
    return JSONResponse({"status": "starting" if not s.engine.start_error else "error",
                         "error": s.engine.start_error}, 503)


@ops_routes.get("/metrics")
async def metrics(request: Request) -> Response:
    s = services(request)
    if s.remotes:
        from gateway.remote_metrics import REMOTE_ENGINES

        await REMOTE_ENGINES.refresh(s.remotes)
    if s.engine is not None and s.engine.ready:
        try:  # fresh worker counters at scrape time, bounded so a scrape never hangs
            await asyncio.wait_for(s.engine.refresh_probes(), SCRAPE_REFRESH_TIMEOUT_S)
        except Exception as exc:
            log.warning("probe refresh at scrape failed: %s", exc)
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


@ops_routes.get("/v1/engine/probes")
async def probes(request: Request) -> Response:
    """Raw per-rank probe ledgers (what /metrics mirrors), for debugging and tests."""
    return await engine_answer(request, lambda e: e.refresh_probes())


@api_routes.post("/v1/engine/probes")
async def switch_probes(request: Request, body: ProbeSwitchRequest) -> Response:
    """Probes in or out on every worker (and the poll interval), without a restart."""
    return await engine_answer(request, lambda e: e.switch_probes(body.enabled,
                                                                  body.poll_interval_s))


@api_routes.post("/v1/engine/probes/alternate")
async def alternate_probes(request: Request, body: ProbeAlternateRequest) -> Response:
    """The probes' cost in this engine, step by step (engine_ext.probes.alternate)."""
    return await engine_answer(request, lambda e: e.alternate_probes(body.steps, body.mode,
                                                                     body.seed, body.groups))


@ops_routes.get("/v1/engine/probes/alternate")
async def probe_alternation(request: Request) -> Response:
    return await engine_answer(request, lambda e: e.probe_alternation())


@api_routes.delete("/v1/engine/probes/alternate")
async def stop_probe_alternation(request: Request) -> Response:
    """End a running alternation now; answers its record so far."""
    return await engine_answer(request, lambda e: e.probe_alternation(stop=True))


@ops_routes.get("/v1/engine/self_check")
async def self_check(request: Request) -> Response:
    return JSONResponse(require_engine(request).self_check or {"status": "starting"})


@ops_routes.get("/v1/models")
async def models(request: Request) -> dict:
    return {"object": "list", "data": [
        {"id": name, "object": "model", "created": 0, "owned_by": "specgw"}
        for name in services(request).router.models()
    ]}


# ------------------------------------------------------------------ generation
@api_routes.post("/v1/chat/completions")
async def chat(request: Request, body: ChatCompletionRequest) -> Response:
    return await services(request).dispatcher.serve(request, "chat", body)


@api_routes.post("/v1/completions")
async def completions(request: Request, body: CompletionRequest) -> Response:
    return await services(request).dispatcher.serve(request, "completions", body)
