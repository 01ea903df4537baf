"""One structured access-log line per request, and no unhandled error escapes to uvicorn.

``AccessLogMiddleware`` sits inside the request-id middleware, so every line it writes
(the access line, and the traceback of an unexpected error) carries the request id. The
serving code fills the per-request :class:`AccessRecord` (model, endpoint, tokens, TTFT,
speculative counts) through :func:`record`; the middleware adds status and duration.

An exception that reaches this layer before the response started is answered here with
an OpenAI-shaped 500 instead of letting Starlette's ServerErrorMiddleware re-raise it to
uvicorn, which logs without the request id and closes the keep-alive connection.
"""

from __future__ import annotations

import logging
import time
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import OpenAIError

log = logging.getLogger("gateway.access")
err_log = logging.getLogger("gateway.errors")


@dataclass
class AccessRecord:
    method: str = ""
    path: str = ""
    model: str | None = None
    endpoint: str | None = None
    status: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_ms: float | None = None
    duration_ms: float = 0.0
    drafted_tokens: int | None = None
    accepted_tokens: int | None = None
    # When the request reached the app (perf_counter): the start of its TTFT. Not logged.
    arrived: float = field(default_factory=time.perf_counter)

    def fields(self) -> dict:
        """The logged fields."""
        return {k: v for k, v in asdict(self).items() if k != "arrived"}


_RECORD: ContextVar[AccessRecord | None] = ContextVar("access_record", default=None)


def record() -> AccessRecord:
    """This request's record (a throwaway one outside a request, e.g. in unit code)."""
    return _RECORD.get() or AccessRecord()


class AccessLogMiddleware:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rec = AccessRecord(method=scope["method"], path=scope["path"])
        token = _RECORD.set(rec)
        t0 = rec.arrived
        started = False

        async def send_status(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                rec.status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        except Exception as exc:
            err_log.exception("unhandled error")
            if started:
                raise  # mid-body: nothing valid can follow; let the server close it
            await OpenAIError(f"Internal server error: {type(exc).__name__}", 500,
                              "internal_server_error").response()(scope, receive, send_status)
        finally:
            _RECORD.reset(token)
            rec.duration_ms = round((time.perf_counter() - t0) * 1000, 3)
            if rec.path.startswith("/v1/"):
                # The fields as JSON keys (json log format); the text format reads the message.
                log.info("%s %s %d %.1fms model=%s tokens=%s/%s drafted=%s accepted=%s",
                         rec.method, rec.path, rec.status, rec.duration_ms, rec.model,
                         rec.prompt_tokens, rec.completion_tokens, rec.drafted_tokens,
                         rec.accepted_tokens, extra=rec.fields())


def note_usage(u: dict) -> None:
    """Token counts (and speculative counts, when reported) from an OpenAI usage dict."""
    rec = record()
    rec.prompt_tokens, rec.completion_tokens = u["prompt_tokens"], u["completion_tokens"]
    spec = u.get("speculative_decoding")
    if spec:
        rec.drafted_tokens, rec.accepted_tokens = (spec["num_draft_tokens"],
                                                   spec["num_accepted_tokens"])
