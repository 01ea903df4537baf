"""The router's HTTP client for proxied requests: one streamed POST to a backend.

Two implementations behind one small interface, selected by ``--router-client`` /
``SPECGW_ROUTER_CLIENT``. aiohttp is the default: its C HTTP parser and
``StreamReader.iter_any()`` hand over whatever bytes arrived in one piece (events that
arrived together are relayed as one chunk under load), where httpx runs each chunk
through h11 in pure Python and several async-iterator layers. On the H200 the httpx
router set the rate at c >= 64 (docs/benchmarks.md section 3, run3), so the per-chunk
cost is what limits it; benchmarks/router_cost.py measures both.
httpx is kept selectable for that comparison and as a fallback.

Health checks and the /metrics scrape stay on httpx (RemoteBackend.client): a few
requests a second, off the relay path.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # imported where used: a router runs one of the two clients
    import aiohttp
    import httpx

RELAY_CLIENTS = ("aiohttp", "httpx")
DEFAULT_RELAY_CLIENT = "aiohttp"
# Idle connections are dropped well before a backend's keep-alive timeout (uvicorn's,
# so vLLM's and ours, is 5 s): reusing one the server is closing is a read error on a
# request that never arrived. aiohttp's own default (15 s) would hit exactly that.
KEEPALIVE_S = 2.0


def relay_client_default() -> str:
    return os.environ.get("SPECGW_ROUTER_CLIENT", DEFAULT_RELAY_CLIENT)


class UpstreamResponse:
    """A backend's answer once its status line and headers arrived. ``body`` is the
    client library's own byte iterator (no wrapper layer per chunk)."""

    __slots__ = ("aclose", "body", "content_type", "read", "status")

    def __init__(self, status: int, content_type: str, body: AsyncIterator[bytes],
                 read: Callable[[], Awaitable[bytes]], aclose: Callable[[], Awaitable[None]]):
        self.status, self.content_type, self.body = status, content_type, body
        self.read, self.aclose = read, aclose


class Upstream(Protocol):
    # Transport failures (connect, read, a broken body): the caller fails over before
    # the first byte and ends the client's stream with an error event after it.
    errors: tuple[type[BaseException], ...]

    async def send(self, path: str, body: dict, headers: dict[str, str]
                   ) -> UpstreamResponse: ...

    async def aclose(self) -> None: ...


class HttpxUpstream:
    """The relay on an httpx client (h11): the router's original implementation."""

    def __init__(self, client: httpx.AsyncClient) -> None:  # shared with health checks
        import httpx

        self.client = client
        self.errors = (httpx.HTTPError,)

    async def send(self, path: str, body: dict, headers: dict[str, str]) -> UpstreamResponse:
        req = self.client.build_request("POST", path, json=body, headers=headers)
        resp = await self.client.send(req, stream=True)
        return UpstreamResponse(resp.status_code, resp.headers.get("content-type", ""),
                                resp.aiter_raw(), resp.aread, resp.aclose)

    async def aclose(self) -> None:
        pass  # the client is RemoteBackend's; it closes it


class AiohttpUpstream:
    """The relay on aiohttp (C parser, bytes handed over as they arrive)."""

    def __init__(self, base_url: str, timeout_s: float, connect_timeout_s: float) -> None:
        import aiohttp

        self.base_url = base_url.rstrip("/")
        self.errors = (aiohttp.ClientError, TimeoutError)
        # As the httpx client's Timeout(timeout_s, connect=...): timeout_s between bytes
        # and for a pool slot, connect_timeout_s to open a connection, no total limit.
        self._timeout = aiohttp.ClientTimeout(total=None, connect=timeout_s,
                                              sock_connect=connect_timeout_s,
                                              sock_read=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        import aiohttp

        # Made on first use: a session belongs to the running event loop, and backends
        # are built before uvicorn starts its loop.
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=1024, keepalive_timeout=KEEPALIVE_S),
            timeout=self._timeout,
            # Bytes are relayed raw (as httpx's aiter_raw), so ask for an uncompressed body.
            headers={"Accept-Encoding": "identity"}, auto_decompress=False,
            trust_env=True)  # HTTP(S)_PROXY / NO_PROXY as the httpx health checks
        return self._session

    async def send(self, path: str, body: dict, headers: dict[str, str]) -> UpstreamResponse:
        session = self._session or self._open()
        resp = await session.post(self.base_url + path, data=json.dumps(body).encode(),
                                  headers={**headers, "Content-Type": "application/json"})

        async def aclose() -> None:
            # close(), not release(): a body read to its end was already handed back to
            # the pool (kept alive); one left unread (client gone) must not be reused.
            resp.close()

        return UpstreamResponse(resp.status, resp.headers.get("Content-Type", ""),
                                resp.content.iter_any(), resp.read, aclose)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def make_upstream(kind: str, base_url: str, timeout_s: float, connect_timeout_s: float,
                  httpx_client: httpx.AsyncClient) -> Upstream:
    if kind == "aiohttp":
        return AiohttpUpstream(base_url, timeout_s, connect_timeout_s)
    if kind == "httpx":
        return HttpxUpstream(httpx_client)
    raise ValueError(f"router client must be one of {RELAY_CLIENTS}, got {kind!r}")
