"""The router path without any engine: ``specgw serve --backend`` in front of a tiny real
upstream HTTP server on 127.0.0.1 whose streams misbehave on request. Covers the
limiter's 429, a backend stream that breaks or ends before [DONE], a non-streamed
answer that breaks mid-body (counted once), and that router mode never imports vLLM."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from conftest import Server, free_port, metric_sum, scrape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

UP_MODEL = "upstream-model"
RELEASE = threading.Event()  # lets a "hold" stream finish
STARTING = threading.Event()  # /ready answers 503 (an engine still starting), /health 200


def _chunk(i: int) -> bytes:
    obj = {"id": "cmpl-up", "object": "text_completion", "created": 0, "model": UP_MODEL,
           "choices": [{"index": 0, "text": f"tok{i}", "logprobs": None,
                        "finish_reason": None}]}
    return f"data: {json.dumps(obj)}\n\n".encode()


SLOW_FIRST_S = 0.3  # mode "slow": the backend's own time to its first byte


async def _stream(mode: str):
    if mode == "slow":
        await asyncio.sleep(SLOW_FIRST_S)
    yield _chunk(0)
    yield _chunk(1)
    if mode == "drop":  # the server dies mid-stream: the connection breaks
        raise ConnectionAbortedError("upstream died")
    if mode == "hold":
        await asyncio.to_thread(RELEASE.wait, 60)
        yield b"data: [DONE]\n\n"
    if mode == "slow":
        yield b"data: [DONE]\n\n"
    # mode "end": a clean close, but without [DONE]


# 4xx answers as other servers write them (the first as vLLM 0.32's server answered a
# too-long prompt in the soak, the second vLLM 0.26's top-level shape, the third no JSON).
BACKEND_4XX = {
    "vllm400": (400, {"error": {"message": "This model's maximum context length is 2048 "
                                "tokens.", "type": "BadRequestError", "param": None,
                                "code": 400}}),
    "vllm026": (400, {"object": "error", "message": "too long", "type": "BadRequestError",
                      "param": "prompt", "code": 400}),
    "text413": (413, b"<html>Request Entity Too Large</html>"),
}


async def completions(request: Request):
    body = await request.json()
    mode = body["prompt"]
    if mode in BACKEND_4XX:  # refused before any generation, streamed or not
        status, answer = BACKEND_4XX[mode]
        if isinstance(answer, bytes):
            return PlainTextResponse(answer, status, media_type="text/html")
        return JSONResponse(answer, status)
    if body.get("stream"):
        return StreamingResponse(_stream(mode), media_type="text/event-stream")
    if mode == "fail500":  # the backend's own server error, before any byte
        return JSONResponse({"error": {"message": "boom", "type": "internal_error"}}, 500)
    if mode == "drop":
        async def partial():
            yield b'{"id": "cmpl-up", "choices": ['
            raise ConnectionAbortedError("upstream died")
        return StreamingResponse(partial(), media_type="application/json")
    return JSONResponse({"id": "cmpl-up", "object": "text_completion", "model": UP_MODEL,
                         "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}]})


UPSTREAM = Starlette(routes=[
    Route("/health", lambda _: JSONResponse({"status": "ok"})),
    Route("/ready", lambda _: JSONResponse({"status": "starting" if STARTING.is_set()
                                            else "ready"}, 503 if STARTING.is_set() else 200)),
    Route("/v1/models", lambda _: JSONResponse({"data": [{"id": UP_MODEL}]})),
    Route("/v1/completions", completions, methods=["POST"]),
    # Not Prometheus text: the router's scrape must survive it (the soak's sampler met
    # a backend like this and got a 500 for the router's whole /metrics).
    Route("/metrics", lambda _: PlainTextResponse("{not prometheus")),
])


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(UPSTREAM, host="127.0.0.1", port=port,
                                           log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "upstream did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        RELEASE.set()
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def router(upstream: str) -> Iterator[Server]:
    # PYTHONPROFILEIMPORTTIME: the process logs every module it imports (to stderr,
    # which Server writes to its log), so the test can see that vLLM never loaded.
    srv = Server("router-proxy", ["--log-format", "text", "--backend", f"up={upstream}",
                                  "--max-concurrency", "1", "--max-queue", "0"],
                 env={"PYTHONPROFILEIMPORTTIME": "1"})
    try:
        srv.wait_ready(60)
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def httpx_router(upstream: str) -> Iterator[Server]:
    """The original relay client, still selectable: the same upstream, the same checks."""
    srv = Server("router-proxy-httpx", ["--log-format", "text", "--backend", f"up={upstream}",
                                        "--router-client", "httpx"])
    try:
        srv.wait_ready(60)
        yield srv
    finally:
        srv.stop()


def sse_events(r: httpx.Response) -> list[str]:
    return [ln[len("data: "):] for ln in r.iter_lines() if ln.startswith("data: ")]


def completion(mode: str, stream: bool) -> dict:
    return {"model": UP_MODEL, "prompt": mode, "max_tokens": 4, "stream": stream}


def requests_total(url: str, status: str) -> float:
    return metric_sum(scrape(url), "specgw_requests_total", model=UP_MODEL,
                      endpoint="completions", status=status)


def test_default_relay_client_is_aiohttp(router):
    assert "(relay client: aiohttp)" in router.log_path.read_text(errors="replace")


@pytest.mark.parametrize("client", ["aiohttp", "httpx"])
@pytest.mark.parametrize("mode", ["drop", "end"])
def test_stream_cut_before_done_ends_with_error_event(request, client, mode):
    router = request.getfixturevalue("router" if client == "aiohttp" else "httpx_router")
    assert f"(relay client: {client})" in router.log_path.read_text(errors="replace")
    before = requests_total(router.url, "502")
    with httpx.stream("POST", f"{router.url}/v1/completions", json=completion(mode, True),
                      timeout=30) as r:
        assert r.status_code == 200 and r.headers["x-backend"] == "up"
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    relayed = [json.loads(e) for e in events[:-2]]
    assert [c["choices"][0]["text"] for c in relayed] == ["tok0", "tok1"]
    err = json.loads(events[-2])["error"]
    assert err["type"] == "backend_error" and err["code"] == "backend_stream_interrupted"
    assert set(err) == {"message", "type", "param", "code"}
    assert requests_total(router.url, "502") == before + 1


@pytest.mark.parametrize("upload_s", [0.0, 0.25])
def test_first_byte_split_between_backend_and_gateway(router, upload_s):
    """A backend that takes 0.3 s to its first byte: the gateway's TTFT holds those 0.3 s,
    the backend's time to first byte too, and what the gateway added does not. A body
    uploaded over ``upload_s`` is the gateway's time: TTFT starts at the request's
    arrival, before its body is read."""
    names = ("specgw_backend_time_to_first_byte_seconds", "specgw_gateway_added_latency_seconds")

    def read() -> dict[str, float]:
        s = scrape(router.url)
        out = {f"{n}_{x}": metric_sum(s, f"{n}_{x}", backend="up")
               for n in names for x in ("sum", "count")}
        for x in ("sum", "count"):
            out[f"ttft_{x}"] = metric_sum(s, f"specgw_time_to_first_token_seconds_{x}",
                                          model=UP_MODEL, endpoint="completions")
        return out

    body = json.dumps(completion("slow", True)).encode()

    def upload() -> Iterator[bytes]:  # the body in two halves, upload_s apart
        yield body[:len(body) // 2]
        time.sleep(upload_s)
        yield body[len(body) // 2:]

    before = read()
    with httpx.stream("POST", f"{router.url}/v1/completions", content=upload(), timeout=30,
                      headers={"content-type": "application/json"}) as r:
        assert r.status_code == 200 and sse_events(r)[-1] == "[DONE]"
    d = {k: v - before[k] for k, v in read().items()}
    assert d["ttft_count"] == 1 and d["ttft_sum"] >= SLOW_FIRST_S + upload_s
    ttfb, added = (f"{n}_sum" for n in names)
    assert all(d[f"{n}_count"] == 1 for n in names)
    assert d[ttfb] >= SLOW_FIRST_S
    # The arrival stamp is taken once the server has read the headers, which may be a few
    # ms after the client began its upload_s pause (seen: 0.248 s for 0.25).
    assert upload_s - 0.02 <= d[added] < upload_s + SLOW_FIRST_S / 2
    assert d["ttft_sum"] == pytest.approx(d[ttfb] + d[added], abs=1e-3)


def test_non_stream_broken_mid_body_is_502_counted_once(router):
    before = requests_total(router.url, "502")
    r = httpx.post(f"{router.url}/v1/completions", json=completion("drop", False), timeout=30)
    assert r.status_code == 502, r.text
    assert r.json()["error"]["type"] == "backend_error"
    assert requests_total(router.url, "502") == before + 1
    ok = httpx.post(f"{router.url}/v1/completions", json=completion("fine", False), timeout=30)
    assert ok.status_code == 200 and ok.json()["choices"][0]["text"] == "ok"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("mode,status,message,param", [
    ("vllm400", 400, "This model's maximum context length is 2048 tokens.", None),
    ("vllm026", 400, "too long", "prompt"),
    ("text413", 413, "backend up answered HTTP 413: <html>Request Entity Too Large</html>",
     None),
], ids=["vllm-0.32", "vllm-0.26", "not-json"])
def test_backend_4xx_reaches_the_client_in_openai_shape(router, mode, status, message, param,
                                                        stream):
    """Whichever kind of backend refused a request, the client gets the backend's status
    and message in the one error shape specgw answers with (type snake_case, code a
    string or null, never vLLM's exception class name and HTTP status)."""
    r = httpx.post(f"{router.url}/v1/completions", json=completion(mode, stream), timeout=30)
    assert r.status_code == status and r.headers["x-backend"] == "up"
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"error": {"message": message, "type": "invalid_request_error",
                                  "param": param, "code": None}}


def test_limiter_refuses_with_429_when_full_then_recovers(router):
    """--max-concurrency 1 --max-queue 0: while one stream holds the only slot, the next
    request is refused at once with an OpenAI 429; after it ends, requests pass again."""
    RELEASE.clear()
    before = requests_total(router.url, "429")
    with httpx.stream("POST", f"{router.url}/v1/completions", json=completion("hold", True),
                      timeout=60) as held:
        lines = held.iter_lines()
        assert next(ln for ln in lines if ln.startswith("data: ")).startswith("data: {")
        s = scrape(router.url)
        assert metric_sum(s, "specgw_requests_in_flight", model=UP_MODEL) == 1
        r = httpx.post(f"{router.url}/v1/completions", json=completion("fine", False),
                       timeout=30)
        assert r.status_code == 429, r.text
        assert r.json()["error"]["code"] == "server_overloaded"
        assert r.headers["Retry-After"] == "1" and r.headers["x-request-id"]
        RELEASE.set()
        assert [ln for ln in lines if ln.startswith("data: ")][-1] == "data: [DONE]"
    assert requests_total(router.url, "429") == before + 1
    deadline = time.monotonic() + 10  # the slot is freed when the relay ends
    while metric_sum(scrape(router.url), "specgw_requests_in_flight", model=UP_MODEL):
        assert time.monotonic() < deadline, "the held request never released its slot"
        time.sleep(0.05)
    ok = httpx.post(f"{router.url}/v1/completions", json=completion("fine", False), timeout=30)
    assert ok.status_code == 200


def backend_requests(url: str) -> float:
    return metric_sum(scrape(url), "specgw_backend_requests_total", backend="up")


@pytest.mark.parametrize("client", ["aiohttp", "httpx"])
def test_client_gone_mid_stream_releases_the_backend_once(client, request):
    """The client hangs up while the backend still streams: the router drops the backend
    connection, its in-flight count returns to 0 and the request is counted once, as a
    client that closed (499), not as a 200."""
    router = request.getfixturevalue("router" if client == "aiohttp" else "httpx_router")
    RELEASE.clear()
    before = backend_requests(router.url)
    closed_before = metric_sum(scrape(router.url), "specgw_backend_requests_total",
                               backend="up", status="client_closed")
    gone_before = metric_sum(scrape(router.url), "specgw_requests_total", status="499")
    try:
        with httpx.stream("POST", f"{router.url}/v1/completions",
                          json=completion("hold", True), timeout=60) as held:
            lines = held.iter_lines()
            assert next(ln for ln in lines if ln.startswith("data: ")).startswith("data: {")
            assert metric_sum(scrape(router.url), "specgw_backend_requests_in_flight",
                              backend="up") == 1
        deadline = time.monotonic() + 10
        while metric_sum(scrape(router.url), "specgw_backend_requests_in_flight",
                         backend="up"):
            assert time.monotonic() < deadline, "the backend hold was never released"
            time.sleep(0.05)
        time.sleep(0.5)  # a second release would count the request again by now
        assert backend_requests(router.url) == before + 1
        after = scrape(router.url)
        assert metric_sum(after, "specgw_backend_requests_total", backend="up",
                          status="client_closed") == closed_before + 1
        assert metric_sum(after, "specgw_requests_total", status="499") == gone_before + 1
    finally:
        RELEASE.set()
    ok = httpx.post(f"{router.url}/v1/completions", json=completion("fine", False), timeout=30)
    assert ok.status_code == 200


def test_unparsable_backend_metrics_do_not_break_the_router_scrape(router):
    r = httpx.get(f"{router.url}/metrics", timeout=30)
    assert r.status_code == 200, r.text[:300]
    assert "specgw_backend_up" in r.text


def test_only_backend_ejected_still_serves_panic_mode(router):
    """Three failed requests eject the only backend (passive ejection); it still passes
    its health check, so requests keep going to it instead of 503s for eject_for_s."""
    for _ in range(3):
        r = httpx.post(f"{router.url}/v1/completions", json=completion("fail500", False),
                       timeout=30)
        assert r.status_code == 503, r.text
    assert metric_sum(scrape(router.url), "specgw_backend_up", backend="up") == 0
    for _ in range(3):
        ok = httpx.post(f"{router.url}/v1/completions", json=completion("fine", False),
                        timeout=30)
        assert ok.status_code == 200, ok.text


def _wait_backend_up(url: str, want: float, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while metric_sum(scrape(url), "specgw_backend_up", backend="up") != want:
        assert time.monotonic() < deadline, f"specgw_backend_up never became {want}"
        time.sleep(0.2)


def test_backend_still_starting_gets_no_requests(router):
    """/health answers 200 while the engine starts, /ready does not: the router's health
    check asks /ready, so a starting backend is down, not fed requests that fail."""
    _wait_backend_up(router.url, 1)  # after the panic-mode test's ejection
    STARTING.set()
    try:
        _wait_backend_up(router.url, 0)
        r = httpx.post(f"{router.url}/v1/completions", json=completion("fine", False),
                       timeout=30)
        assert r.status_code == 503 and r.json()["error"]["code"] == "backend_unavailable"
    finally:
        STARTING.clear()
    _wait_backend_up(router.url, 1)


def test_router_mode_never_imports_vllm(router):
    """Runs after the other tests of this module, so every lazy import on the routed
    path (dispatch, proxy, metrics scrape) has happened by now."""
    assert httpx.post(f"{router.url}/v1/completions", json=completion("fine", False),
                      timeout=30).status_code == 200
    log = router.log_path.read_text(errors="replace")
    imported = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)\s*$", log, re.M))
    assert {"gateway.remote_backend", "gateway.dispatch", "fastapi"} <= imported, \
        "import-time log missing: the check below would prove nothing"
    assert not {m for m in imported if m == "vllm" or m.startswith("vllm.")}
    assert not {m for m in imported if m in ("torch", "engine_ext.engine")}
