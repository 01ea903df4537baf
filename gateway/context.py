"""One object per generation request: it owns the request's bookkeeping.

The concurrency slot, the in-flight gauge, the outcome counter and the latency
histogram are all settled by :meth:`RequestContext.finish`, which runs exactly once
however the request ends (answered, failed, client gone, stream never started), on
the local and the remote path alike.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import Request

from gateway import access_log
from gateway.errors import OpenAIError
from gateway.limits import ConcurrencyLimiter
from gateway.request_id import REQUEST_ID
from monitoring import metrics as m

UNKNOWN_MODEL = "unknown"  # label for requests whose model name is not trusted


def count_rejected(endpoint: str, status: str) -> None:
    """A request refused before routing (invalid body): counted, not timed."""
    m.REQUESTS.labels(UNKNOWN_MODEL, endpoint, status).inc()


class RequestContext:
    def __init__(self, http: Request, endpoint: str, body: Any, limiter: ConcurrencyLimiter):
        self.access = access_log.record()  # this request's access-log line
        # From the request's arrival at the app, so TTFT includes reading and validating it.
        self.t0 = self.access.arrived
        self.http, self.endpoint, self.body = http, endpoint, body
        self.model: str = body.model
        self.stream: bool = body.stream
        self.request_id = REQUEST_ID.get()
        # Sticky routing key: an explicit session header, else the OpenAI `user` field.
        self.affinity: str | None = http.headers.get("x-session-id") or body.user
        self._limiter = limiter
        self._admitted = False
        self._started = False
        self.status: str | None = None  # set once, by finish()
        self.access.model, self.access.endpoint = self.model, endpoint

    @property
    def finished(self) -> bool:
        return self.status is not None

    async def admit(self) -> None:
        """Take a concurrency slot (may wait, or raise the limiter's 429)."""
        await self._limiter.acquire()
        self._admitted = True
        m.IN_FLIGHT.labels(self.model).inc()

    def started(self) -> None:
        """A backend took the request: from here on its latency is recorded."""
        self._started = True

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def finish(self, status: str | int) -> None:
        """Record the outcome and release the slot. Only the first call counts."""
        if self.status is not None:
            return
        self.status = str(status)
        m.REQUESTS.labels(self.model, self.endpoint, self.status).inc()
        if self._started:
            m.REQUEST_LATENCY.labels(self.model, self.endpoint).observe(self.elapsed())
        if self._admitted:
            m.IN_FLIGHT.labels(self.model).dec()
            self._limiter.release()

    def fail(self, exc: BaseException) -> None:
        """Finish with the status an exception maps to."""
        if isinstance(exc, OpenAIError):
            if exc.code == "model_not_found":
                self.model = UNKNOWN_MODEL
            self.finish(exc.status)
        elif isinstance(exc, asyncio.CancelledError):
            self.finish(499)  # the client went away while we waited
        else:
            self.finish(500)
