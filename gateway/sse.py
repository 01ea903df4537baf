"""Server-sent events: the ``data:`` framing and a response that always closes its stream.

Starlette's StreamingResponse stops iterating when the client disconnects but leaves
the body generator suspended until it is garbage-collected, so the generator's cleanup
(abort the engine request, count the disconnect, release the concurrency slot) would run
late or never. ``SSEResponse`` closes it as soon as the response ends, however it ends,
then calls ``on_close`` (a backstop for a body that never started: its own cleanup
would not run).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(obj: dict | str) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def sse_error(error_body: dict) -> bytes:
    """End a stream that already started: the OpenAI error object as an event, then
    [DONE], so a client never takes a cut-short answer for a complete one."""
    return sse(error_body) + sse("[DONE]")


class SSEResponse(StreamingResponse):
    media_type = "text/event-stream"

    def __init__(self, content, headers: dict[str, str] | None = None,
                 on_close: Callable[[], Awaitable[None] | None] | None = None):
        super().__init__(content, headers={**SSE_HEADERS, **(headers or {})})
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()
            if self.on_close is not None:
                done = self.on_close()
                if inspect.isawaitable(done):
                    await done
