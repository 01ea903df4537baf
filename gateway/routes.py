"""The HTTP routes, thin: each one hands over to the service that does the work.

``ops_routes``: health, readiness, metrics, engine probes, model list.
``api_routes``: the OpenAI generation endpoints, through the :class:`Dispatcher`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from gateway.dispatch import Dispatcher
from gateway.engine_api import SpecEngine
from gateway.errors import OpenAIError
from gateway.protocol import ChatCompletionRequest, CompletionRequest, ProbeSwitchRequest
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
    engine = require_engine(request)
    if not engine.ready:
        raise OpenAIError("engine is not ready", 503, "service_unavailable")
    try:
        return JSONResponse(await engine.refresh_probes())
    except RuntimeError as exc:  # the workers did not answer in time
        raise OpenAIError(str(exc), 503, "service_unavailable") from exc


@api_routes.post("/v1/engine/probes")
async def switch_probes(request: Request, body: ProbeSwitchRequest) -> Response:
    """Probes in or out on every worker (and the poll interval), without a restart."""
    engine = require_engine(request)
    if not engine.ready:
        raise OpenAIError("engine is not ready", 503, "service_unavailable")
    try:
        return JSONResponse(await engine.switch_probes(body.enabled, body.poll_interval_s))
    except RuntimeError as exc:  # a rank did not answer: its state is unknown, try again
        raise OpenAIError(str(exc), 503, "service_unavailable") from exc


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
