"""Forward a validated request to a remote backend, failing over before the first byte."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

from fastapi.responses import Response

from gateway.errors import OpenAIError
from gateway.remote_backend import BackendUnavailable, RemoteBackend
from gateway.routing import Router
from gateway.sse import SSEResponse, sse
from monitoring import metrics as m

log = logging.getLogger("gateway.proxy")
MAX_ATTEMPTS = 3


def _sse_error(message: str) -> bytes:
    err = OpenAIError(message, 502, "backend_error", None, "backend_stream_interrupted")
    return sse(err.body()) + sse("[DONE]")


async def proxy(first: RemoteBackend, router: Router, path: str, endpoint: str, model: str,
                body: dict, stream: bool, headers: dict[str, str], affinity: str | None,
                stack: AsyncExitStack, t0: float) -> Response:
    """``stack`` holds the concurrency slot; it is closed when the response ends (on the
    way out by an exception the caller closes it)."""
    tried: set[str] = set()
    be = first
    while True:
        try:
            resp, chunks = await be.open(path, body, headers)
            break
        except BackendUnavailable as exc:
            tried.add(be.name)
            log.warning("failover: %s", exc)
            nxt = None
            if len(tried) < MAX_ATTEMPTS:
                try:
                    nxt = router.pick(model, exclude=frozenset(tried), affinity=affinity)
                except OpenAIError:
                    nxt = None
            if not isinstance(nxt, RemoteBackend):
                # The caller counts the 503 and releases the concurrency slot.
                raise OpenAIError(f"All backends for `{model}` failed: {exc}", 503,
                                  "service_unavailable", None, "backend_unavailable",
                                  headers={"Retry-After": "1"}) from exc
            m.FAILOVERS.labels(model).inc()
            be = nxt
    status = str(resp.status_code)
    out_headers = {"x-backend": be.name}
    if stream and resp.status_code == 200:
        return SSEResponse(_relay(chunks, model, endpoint, status, stack, t0),
                           headers=out_headers)
    try:
        content = b"".join([c async for c in chunks])
    except Exception as exc:
        status = "502"
        raise OpenAIError(f"backend {be.name} failed mid-response: {type(exc).__name__}",
                          502, "backend_error") from exc
    finally:
        m.record_request(model, endpoint, status, time.perf_counter() - t0)
        await stack.aclose()
    return Response(content, status_code=resp.status_code, headers=out_headers,
                    media_type=resp.headers.get("content-type", "application/json"))


async def _relay(chunks: AsyncIterator[bytes], model: str, endpoint: str, status: str,
                 stack: AsyncExitStack, t0: float) -> AsyncIterator[bytes]:
    """Pass SSE bytes through as they come. If the backend dies mid-stream, end the
    client's stream with an error event: a truncated answer must never look complete."""
    tail = b""
    try:
        async for chunk in chunks:
            tail = (tail + chunk)[-64:]
            yield chunk
        if b"[DONE]" not in tail:
            status = "502"
            yield _sse_error("backend closed the stream before [DONE]")
    except Exception as exc:
        status = "502"
        log.warning("backend stream interrupted: %s", exc)
        yield _sse_error(f"backend stream interrupted: {type(exc).__name__}")
    finally:
        m.record_request(model, endpoint, status, time.perf_counter() - t0)
        await stack.aclose()
