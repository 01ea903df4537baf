"""Request id and API-key check as plain ASGI middleware.

Not ``@app.middleware("http")``: Starlette's BaseHTTPMiddleware relays every response
body chunk through an extra memory stream and task hop, which for SSE is a per-token
cost. This wrapper only touches the request headers and the ``http.response.start``
message, and passes body chunks straight through.
"""

from __future__ import annotations

import uuid

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.auth import KeyStore
from gateway.errors import OpenAIError
from gateway.request_id import REQUEST_ID


class RequestIdAuthMiddleware:
    """``x-request-id`` accepted or generated, set for logs and echoed in the response;
    ``Authorization: Bearer`` checked on ``/v1/*`` when ``keys`` is set."""

    def __init__(self, app: ASGIApp, keys: KeyStore | None):
        self.app, self.keys = app, keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        rid = headers.get("x-request-id") or uuid.uuid4().hex
        token = REQUEST_ID.set(rid)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)["x-request-id"] = rid
            await send(message)

        try:
            if self.keys is not None and scope["path"].startswith("/v1/"):
                try:
                    self.keys.check(headers.get("authorization", ""))
                except OpenAIError as exc:
                    await exc.response()(scope, receive, send_with_id)
                    return
            await self.app(scope, receive, send_with_id)
        finally:
            REQUEST_ID.reset(token)
