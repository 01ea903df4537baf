"""A remote vLLM (or specgw) OpenAI server as a backend: streaming proxy with health.

Bodies are forwarded as received (after our validation) and streamed responses are
passed through chunk by chunk. Failures before the first byte raise
:class:`BackendUnavailable` so the caller can fail over; after the first byte the
stream ends with an OpenAI error event, never a silent truncation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
from fastapi.responses import Response

from gateway.backend_errors import openai_error_body
from gateway.context import RequestContext
from gateway.errors import OpenAIError
from gateway.sse import SSEResponse, sse_error
from gateway.upstream import UpstreamResponse, make_upstream, relay_client_default
from monitoring import metrics as m

log = logging.getLogger("gateway.remote")


class BackendUnavailable(Exception):
    """Nothing was sent to the client yet: safe to retry on another backend."""


@dataclass
class BackendSpec:
    name: str
    url: str
    models: list[str] = field(default_factory=list)  # empty: discovered from /v1/models
    timeout_s: float = 600.0
    connect_timeout_s: float = 3.0


class RemoteBackend:
    def __init__(self, spec: BackendSpec, eject_after: int = 3, eject_for_s: float = 10.0,
                 health_interval_s: float = 2.0, relay_client: str | None = None):
        self.spec = spec
        self.name = spec.name
        self.outstanding = 0
        self._models = list(spec.models)
        self._probe_path = "/ready"  # "/health" once the backend turns out to have no /ready
        self._up = False  # active health check verdict
        self._check_fails = 0  # consecutive failed health checks
        self._fails = 0
        self._ejected_until = 0.0
        self.eject_after, self.eject_for_s = eject_after, eject_for_s
        self.health_interval_s = health_interval_s
        self.client = httpx.AsyncClient(
            base_url=spec.url.rstrip("/"),
            timeout=httpx.Timeout(spec.timeout_s, connect=spec.connect_timeout_s),
            # Idle connections are dropped well before a backend's keep-alive timeout
            # (uvicorn's, so vLLM's and ours, is 5 s, httpx's default expiry too): reusing
            # one the server is closing is a ReadError on a request that never arrived.
            limits=httpx.Limits(max_connections=1024, max_keepalive_connections=256,
                                keepalive_expiry=2.0),
        )
        # Proxied requests go through this (aiohttp by default, see gateway/upstream.py);
        # the httpx client above serves health checks and the /metrics scrape.
        self.relay_client = relay_client or relay_client_default()
        self.upstream = make_upstream(self.relay_client, spec.url, spec.timeout_s,
                                      spec.connect_timeout_s, self.client)
        self._task: asyncio.Task | None = None

    @property
    def models(self) -> list[str]:
        return self._models

    @property
    def healthy(self) -> bool:
        return self._up and time.monotonic() >= self._ejected_until

    @property
    def up(self) -> bool:
        """Its last health check passed (a stalled backend stays ``_up`` for a few
        missed checks; panic routing must not send requests into that)."""
        return self._up and self._check_fails == 0

    # ----------------------------------------------------------- health
    async def check(self, down_after: int = 3) -> bool:
        try:
            ok = await self._probe()
            if ok and not self._models:
                data = (await self.client.get("/v1/models", timeout=5.0)).json()
                self._models = [d["id"] for d in data.get("data", [])]
        except (httpx.HTTPError, ValueError):
            ok = False
        # A saturated backend answers /health late: only consecutive misses mark it down
        # (refused connections are caught sooner by the passive ejection in open()).
        self._check_fails = 0 if ok else self._check_fails + 1
        up = ok or (self._up and self._check_fails < down_after)
        if up != self._up:
            log.info("backend %s is %s", self.name, "up" if up else "DOWN")
        self._up = up
        m.BACKEND_UP.labels(self.name).set(1.0 if self.healthy else 0.0)
        return up

    async def _probe(self) -> bool:
        """Ready to serve? A specgw backend answers /health at once but /ready only once
        its engine is up (the soak saw a restarting backend take requests for its whole
        start-up, each a 503, a failover and, three in a row, an ejection); vLLM's own
        server has no /ready but listens only once its engine is up, so /health."""
        r = await self.client.get(self._probe_path, timeout=5.0)
        if r.status_code == 404 and self._probe_path == "/ready":
            self._probe_path = "/health"
            r = await self.client.get(self._probe_path, timeout=5.0)
        return r.status_code == 200

    async def _health_loop(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(self.health_interval_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self._health_loop(), name=f"health-{self.name}")

    async def close(self) -> None:
        if self._task:
            self._task.cancel()
        await self.upstream.aclose()
        await self.client.aclose()

    def _failed(self, why: str) -> None:
        self._fails += 1
        if self._fails >= self.eject_after:
            self._ejected_until = time.monotonic() + self.eject_for_s
            m.EJECTIONS.labels(self.name).inc()
            log.warning("backend %s ejected for %.0fs after %d failures (%s)", self.name,
                        self.eject_for_s, self._fails, why)
            self._fails = 0
        m.BACKEND_UP.labels(self.name).set(1.0 if self.healthy else 0.0)

    def _ok(self) -> None:
        self._fails = 0

    # ------------------------------------------------------------ proxy
    async def handle(self, ctx: RequestContext) -> Response:
        resp, hold = await self.open(ctx.http.url.path, await ctx.http.json(),
                                     {"x-request-id": ctx.request_id})
        ctx.started()
        status = resp.status
        headers = {"x-backend": self.name}
        if ctx.stream and status == 200:
            async def closed() -> None:
                # A client gone before the first byte: the relay never started, so its
                # own cleanup cannot run; settle both sides here (no-ops otherwise).
                ctx.finish(499)
                await hold.release("client_closed")

            return SSEResponse(self._relay_stream(resp, hold, ctx), headers=headers,
                               on_close=closed)
        try:
            content = await self._read_all(resp, hold)
        except Exception as exc:
            raise OpenAIError(f"backend {self.name} failed mid-response: "
                              f"{type(exc).__name__}", 502, "backend_error") from exc
        ctx.finish(status)
        if status >= 400:  # one error vocabulary whichever kind of backend answered
            return Response(openai_error_body(status, content, self.name), status_code=status,
                            headers=headers, media_type="application/json")
        return Response(content, status_code=status, headers=headers,
                        media_type=resp.content_type or "application/json")

    async def open(self, path: str, body: dict, headers: dict[str, str]
                   ) -> tuple[UpstreamResponse, _Hold]:
        """Send the request; return once the backend answered with its status line.
        Raises BackendUnavailable for connection errors and 5xx before any byte."""
        t0 = time.perf_counter()
        self.outstanding += 1
        m.BACKEND_IN_FLIGHT.labels(self.name).inc()
        try:
            resp = await self.upstream.send(path, body, headers)
        except self.upstream.errors as exc:
            self._done(t0, "connect_error")
            self._failed(type(exc).__name__)
            raise BackendUnavailable(f"{self.name}: {type(exc).__name__}") from exc
        if resp.status >= 500:
            await resp.aclose()
            self._done(t0, str(resp.status))
            self._failed(f"HTTP {resp.status}")
            raise BackendUnavailable(f"{self.name}: HTTP {resp.status}")
        return resp, _Hold(self, resp, t0)

    @contextlib.asynccontextmanager
    async def _reading(self, resp: UpstreamResponse, hold: _Hold) -> AsyncIterator[None]:
        """The backend's side of reading a body: a transport error counts against it, and
        the hold is released at once however the read ends (a client gone mid-stream
        included: GeneratorExit at the relay's yield)."""
        status = str(resp.status)
        try:
            yield
            self._ok()
        except self.upstream.errors as exc:
            status = "stream_error"
            self._failed(type(exc).__name__)
            raise
        except BaseException:  # the client went away (GeneratorExit, cancellation)
            status = "client_closed"
            raise
        finally:
            await hold.release(status)

    async def _read_all(self, resp: UpstreamResponse, hold: _Hold) -> bytes:
        async with self._reading(resp, hold):
            return await resp.read()

    async def _relay_stream(self, resp: UpstreamResponse, hold: _Hold, ctx: RequestContext
                            ) -> AsyncIterator[bytes]:
        """Pass SSE bytes through as they come. If the backend dies mid-stream, end the
        client's stream with an error event: a truncated answer must never look complete.

        One generator straight over the client library's byte iterator: this loop runs
        once per relayed chunk, so the backend's and the client's bookkeeping share it
        rather than stacking a generator each."""
        code, tail = 499, b""  # until the backend's stream ended: a client gone mid-way
        first = True
        try:
            async with self._reading(resp, hold):
                async for chunk in resp.body:
                    if first:
                        first = False
                        self._first_byte(ctx, hold)
                    tail = (tail + chunk)[-64:]
                    yield chunk
            code = 200
            if b"[DONE]" not in tail:
                code = 502
                yield _interrupted("backend closed the stream before [DONE]")
        except Exception as exc:
            code = 502
            log.warning("backend stream interrupted: %s", exc)
            yield _interrupted(f"backend stream interrupted: {type(exc).__name__}")
        finally:
            ctx.finish(code)

    def _first_byte(self, ctx: RequestContext, hold: _Hold) -> None:
        """The stream's first byte: the gateway's TTFT (from the request's arrival), the
        backend's (from our send), and the difference, what the gateway added."""
        now = time.perf_counter()
        ttft, ttfb = now - ctx.t0, now - hold.t0
        m.TTFT.labels(ctx.model, ctx.endpoint).observe(ttft)
        m.BACKEND_TTFB.labels(self.name).observe(ttfb)
        m.GATEWAY_ADDED.labels(self.name).observe(max(0.0, ttft - ttfb))
        ctx.access.ttft_ms = round(1000 * ttft, 3)

    def _done(self, t0: float, status: str) -> None:
        self.outstanding -= 1
        m.BACKEND_IN_FLIGHT.labels(self.name).dec()
        m.BACKEND_REQUESTS.labels(self.name, status).inc()
        m.BACKEND_LATENCY.labels(self.name).observe(time.perf_counter() - t0)


class _Hold:
    """One request's hold on a backend (its response and in-flight count), released
    exactly once, by the relay when it ran or by the stream's close when it never did."""

    def __init__(self, backend: RemoteBackend, resp: UpstreamResponse, t0: float):
        self.backend, self.resp, self.t0 = backend, resp, t0
        self.released = False

    async def release(self, status: str) -> None:
        if self.released:
            return
        self.released = True
        try:
            with contextlib.suppress(Exception):
                await self.resp.aclose()
        finally:  # counted even when the close is cancelled (a client gone mid-stream)
            self.backend._done(self.t0, status)


def _interrupted(message: str) -> bytes:
    return sse_error(OpenAIError(message, 502, "backend_error", None,
                                 "backend_stream_interrupted").body())
