"""Route one generation request: pick a backend, take a concurrency slot, serve it,
and fail over to another backend while nothing has reached the client yet."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Request, Response

from gateway.context import RequestContext
from gateway.errors import OpenAIError
from gateway.limits import ConcurrencyLimiter
from gateway.remote_backend import BackendUnavailable
from gateway.routing import Backend, Router
from monitoring import metrics as m

log = logging.getLogger("gateway.dispatch")
MAX_ATTEMPTS = 3


class Dispatcher:
    def __init__(self, router: Router, limiter: ConcurrencyLimiter):
        self.router, self.limiter = router, limiter

    async def serve(self, request: Request, endpoint: str, body: Any) -> Response:
        """One request, one :class:`RequestContext`. The response settles it (a stream
        when it ends); on the way out by an exception it is settled here."""
        ctx = RequestContext(request, endpoint, body, self.limiter)
        try:
            be = self.router.pick(ctx.model, affinity=ctx.affinity)
            await ctx.admit()
            return await self._with_failover(be, ctx)
        except BaseException as exc:
            ctx.fail(exc)
            raise

    async def _with_failover(self, be: Backend, ctx: RequestContext) -> Response:
        tried: set[str] = set()
        while True:
            try:
                return await be.handle(ctx)
            except BackendUnavailable as exc:
                tried.add(be.name)
                log.warning("failover: %s", exc)
                be = self._next(ctx, tried, exc)
                m.FAILOVERS.labels(ctx.model).inc()

    def _next(self, ctx: RequestContext, tried: set[str], exc: Exception) -> Backend:
        if len(tried) < MAX_ATTEMPTS:
            try:
                return self.router.pick(ctx.model, exclude=frozenset(tried),
                                        affinity=ctx.affinity)
            except OpenAIError:
                pass
        raise OpenAIError(f"All backends for `{ctx.model}` failed: {exc}", 503,
                          "service_unavailable", None, "backend_unavailable",
                          headers={"Retry-After": "1"}) from exc
