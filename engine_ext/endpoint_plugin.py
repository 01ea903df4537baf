"""vLLM endpoint plugin (entry point ``vllm.endpoint_plugins``: ``specgw_endpoints``):
specgw's probes, self-check and metrics inside a stock ``vllm serve``.

vLLM loads it in the API server process only, and only when it is named in
``VLLM_PLUGINS``. It needs its two partners, which vLLM loads independently:

* the general plugin ``specgw_probes`` (installs the probes in every worker), which a set
  ``VLLM_PLUGINS`` must name too;
* ``--worker-extension-cls engine_ext.worker_extension.ProbeWorkerExtension`` (the
  ``collective_rpc`` methods that read the probes).

What it adds to vLLM's server, nothing else: ``/v1/engine/self_check``,
``/v1/engine/probes`` (GET: the ledgers; POST: switch the probes in or out),
``/v1/engine/probes/alternate`` (the probes' cost measured step by step in this
engine: POST starts it, GET reads it, DELETE ends it), our
``specgw_*`` families on vLLM's own ``/metrics`` (probes are refreshed from every rank
right before each scrape and every poll interval), and
request counters for ``/v1/chat/completions`` and ``/v1/completions`` (the same
``specgw_requests_*`` series ``specgw serve`` exports, so one dashboard fits both).
A missing partner is one clear log line, never a failed start.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from argparse import Namespace
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine_ext.engine import WORKER_EXTENSION

# Module level: FastAPI resolves the route's (postponed) annotation in these globals.
from gateway.protocol import MIN_POLL_INTERVAL_S, ProbeAlternateRequest, ProbeSwitchRequest

log = logging.getLogger("engine_ext.endpoint_plugin")

PLUGIN_NAME = "specgw_endpoints"
GENERAL_PLUGIN_NAME = "specgw_probes"
VLLM_PLUGINS_LINE = f"VLLM_PLUGINS={GENERAL_PLUGIN_NAME},{PLUGIN_NAME}"
ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}
SCRAPE_REFRESH_TIMEOUT_S = 5.0


class SpecgwEndpoints:
    """The ``EndpointPlugin`` (vllm.plugins.endpoint_plugins.interface) vLLM instantiates."""

    name = PLUGIN_NAME
    required_tasks = ("generate",)

    def __init__(self) -> None:
        self.model: str | None = None
        self.probes = None  # engine_ext.collector.ProbePoller when the partners are there
        self.problem: str | None = None  # why probes are unavailable, for routes and logs

    # ------------------------------------------------------------------ phase A
    def attach_router(self, app) -> None:
        from fastapi import APIRouter
        from fastapi.responses import JSONResponse

        _log_through_vllm()
        router = APIRouter()

        @router.get("/v1/engine/self_check")
        async def self_check() -> JSONResponse:
            if self.probes is None or self.probes.self_check is None:
                return JSONResponse({"status": "unavailable", "error": self.problem}, 503)
            return JSONResponse(self.probes.self_check)

        @router.get("/v1/engine/probes")
        async def probes() -> JSONResponse:
            """Raw per-rank probe ledgers (what /metrics mirrors)."""
            return await self._probe_call(lambda p: p.refresh())

        @router.post("/v1/engine/probes")
        async def switch_probes(body: ProbeSwitchRequest) -> JSONResponse:
            """Probes in or out on every worker (and the poll interval), no restart."""
            return await self._probe_call(lambda p: p.switch(body.enabled,
                                                             body.poll_interval_s))

        @router.post("/v1/engine/probes/alternate")
        async def alternate_probes(body: ProbeAlternateRequest) -> JSONResponse:
            """The probes' cost in this engine, step by step (probes.alternate)."""
            return await self._probe_call(lambda p: p.alternate(body.steps, body.mode,
                                                                body.seed, body.groups))

        @router.get("/v1/engine/probes/alternate")
        async def probe_alternation() -> JSONResponse:
            return await self._probe_call(lambda p: p.alternation())

        @router.delete("/v1/engine/probes/alternate")
        async def stop_probe_alternation() -> JSONResponse:
            return await self._probe_call(lambda p: p.alternation(stop=True))

        app.include_router(router)
        app.add_middleware(SpecgwMetricsMiddleware, plugin=self)

    async def _probe_call(self, call: Callable[[Any], Awaitable[Any]]):
        """One worker call's answer as JSON; its failure as the gateway's
        worker_call_error (the same 409 / 503 as ``specgw serve``)."""
        from fastapi.responses import JSONResponse

        from gateway.errors import worker_call_error

        if self.probes is None:
            return _error(self.problem or "probes are not ready", 503)
        try:
            return JSONResponse(await call(self.probes))
        except RuntimeError as exc:
            return worker_call_error(exc).response()

    # ------------------------------------------------------------------ phase B
    async def init_state(self, engine_client, state, args: Namespace) -> None:
        from engine_ext.collector import ProbePoller, all_engines_rpc
        from engine_ext.engine import detect_device
        from engine_ext.internals import table_for
        from monitoring import metrics as m

        if engine_client is None:  # vLLM's render-only server has no engine
            self.problem = "this vLLM server has no engine"
            return
        served = getattr(args, "served_model_name", None)
        self.model = served[0] if served else args.model
        m.ENGINE_READY.labels(self.model).set(1)  # vLLM calls us once its engine is up
        m.IN_FLIGHT.labels(self.model).set(0)  # the dashboard's model/instance variables
        table = table_for()
        _warn_if_multiprocess_registry(table)
        self.problem = missing_worker_extension(engine_client.vllm_config, table)
        if self.problem:
            log.warning("specgw: %s", self.problem)
            m.STARTUP_WARNINGS.labels(self.model).set(1)
            return
        interval = poll_interval_from_env()
        poller = ProbePoller(all_engines_rpc(engine_client, table), self.model,
                             detect_device(), interval)
        await poller.start()
        self.probes = poller
        snaps = poller.snapshots
        if not snaps:
            log.warning("specgw: the first probe read got no answer; the poller reads "
                        "again every %.0f s", interval)
        elif not any(s.get("installed") for s in snaps):
            log.warning(
                "specgw: the probes are not installed in the workers, so every forward "
                "count reads 0 and coverage 0: vLLM did not load the general plugin %r. "
                "Set %s (a set VLLM_PLUGINS also filters general plugins).",
                GENERAL_PLUGIN_NAME, VLLM_PLUGINS_LINE)
        log.info("specgw: probes of %d worker rank(s) on vLLM's /metrics, "
                 "self-check at /v1/engine/self_check", len(snaps))

    async def refresh_for_scrape(self) -> None:
        if self.probes is None:
            return
        try:  # fresh worker counters at scrape time, bounded so a scrape never hangs
            await asyncio.wait_for(self.probes.refresh(), SCRAPE_REFRESH_TIMEOUT_S)
        except Exception as exc:
            log.warning("specgw: probe refresh at scrape failed: %s", exc)


def poll_interval_from_env() -> float:
    """``SPECGW_POLL_INTERVAL`` within the bounds ``specgw serve`` accepts; a bad value is
    one log line and the default, never a failed start."""
    text = os.environ.get("SPECGW_POLL_INTERVAL", "5")
    try:
        value = float(text)
        if MIN_POLL_INTERVAL_S <= value <= 3600:
            return value
    except ValueError:
        pass
    log.warning("specgw: SPECGW_POLL_INTERVAL=%r is not between %g and 3600 seconds; "
                "polling every 5 s", text, MIN_POLL_INTERVAL_S)
    return 5.0


def missing_worker_extension(vllm_config: Any, table) -> str | None:
    """None when the engine runs our worker extension (or a subclass), else what to add."""
    section, attr = table.worker_extension_config
    configured = getattr(getattr(vllm_config, section, None), attr, None) or ""
    if configured == WORKER_EXTENSION:
        return None
    if configured:
        try:
            import importlib

            from engine_ext.worker_extension import ProbeWorkerExtension

            mod, _, cls = configured.rpartition(".")
            if issubclass(getattr(importlib.import_module(mod), cls), ProbeWorkerExtension):
                return None
        except Exception:  # an unimportable class is not ours either
            pass
    return (f"vLLM runs without specgw's worker extension (worker_extension_cls="
            f"{configured or 'unset'}), so drafter probes and the self-check are off; add "
            f"`--worker-extension-cls {WORKER_EXTENSION}` to vllm serve. Serving continues.")


class SpecgwMetricsMiddleware:
    """Plain ASGI (body chunks pass straight through): refreshes the probes before vLLM's
    /metrics renders, and counts completions requests like ``specgw serve`` does."""

    def __init__(self, app: ASGIApp, plugin: SpecgwEndpoints) -> None:
        self.app, self.plugin = app, plugin

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"].rstrip("/") or "/"
        if path == "/metrics":
            await self.plugin.refresh_for_scrape()
        endpoint, model = ENDPOINTS.get(path), self.plugin.model
        if endpoint is None or model is None:
            await self.app(scope, receive, send)
            return
        from monitoring import metrics as m

        status, t0 = "500", time.perf_counter()

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = str(message["status"])
            await send(message)

        in_flight = m.IN_FLIGHT.labels(model)
        in_flight.inc()
        try:
            await self.app(scope, receive, send_status)
        finally:
            in_flight.dec()
            m.record_request(model, endpoint, status, time.perf_counter() - t0)


def _error(message: str, status: int):
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": {"message": message, "type": "service_unavailable",
                                   "param": None, "code": None}}, status)


def _warn_if_multiprocess_registry(table) -> None:
    import importlib

    from prometheus_client import REGISTRY

    mod, fn = table.prometheus_registry_fn
    if getattr(importlib.import_module(mod), fn)() is not REGISTRY:
        log.warning(
            "specgw: vLLM serves /metrics from a multiprocess registry (several API "
            "server processes), which holds no custom collectors, so specgw_* series "
            "will be missing there; run with --api-server-count 1.")


def _log_through_vllm() -> None:
    """Our loggers (self-check, collector, this plugin) print through vLLM's handlers, so
    the self-check lands in vLLM's log with vLLM's format."""
    vllm_logger = logging.getLogger("vllm")
    ours = logging.getLogger("engine_ext")
    if vllm_logger.handlers and not ours.handlers:
        for h in vllm_logger.handlers:
            ours.addHandler(h)
        ours.setLevel(logging.INFO)
        ours.propagate = False
