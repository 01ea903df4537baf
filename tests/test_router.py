"""The gateway as a router over real backends: two specgw engines (bundled model, vLLM
CPU) on 127.0.0.1 behind a third specgw in router mode. One backend is killed mid-load."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator

import httpx
import pytest
from conftest import MODEL, Server, metric_sum, scrape

LONG, SHORT = 1500, 60  # long streams are still running when the backend dies


@pytest.fixture(scope="module")
def cluster(server: Server) -> Iterator[dict[str, Server]]:
    """Backend a is the session's gateway; b is a second engine pinned to the other core
    (two engines' OpenMP threads on one core of this 2-core machine starve each other)."""
    b = Server("backend-b", ["--log-format", "text", "--max-num-seqs", "8"],
               env={"VLLM_CPU_OMP_THREADS_BIND": "1"})
    own = {"b": b}
    try:
        b.wait_ready()
        r = Server("router", ["--log-format", "text", "--backend", f"a={server.url}",
                              "--backend", f"b={b.url}"])
        own["router"] = r
        r.wait_ready(60)
        yield {"a": server, **own}
    finally:
        for s in own.values():
            s.stop()


async def stream_one(client: httpx.AsyncClient, i: int, started: asyncio.Event | None,
                     n: int) -> dict:
    body = {"model": MODEL, "prompt": f"def handler_{i}(event):\n", "max_tokens": n,
            "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    out = {"i": i, "n": n, "chunks": 0, "done": False, "error": None, "tokens": None,
           "status": None, "backend": None}
    try:
        async with client.stream("POST", "/v1/completions", json=body,
                                 headers={"x-request-id": f"load-{i}"}) as r:
            out["status"] = r.status_code
            out["backend"] = r.headers.get("x-backend")
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    out["done"] = True
                    break
                obj = json.loads(data)
                if "error" in obj:
                    out["error"] = obj["error"]
                elif obj.get("usage"):
                    out["tokens"] = obj["usage"]["completion_tokens"]
                else:
                    out["chunks"] += 1
                    if started is not None and out["backend"] == "b" and out["chunks"] == 20:
                        started.set()  # a stream on b is well under way: time to kill b
    except httpx.HTTPError as exc:
        out["error"] = {"transport": type(exc).__name__}
    return out


def test_routes_and_propagates_request_id(cluster):
    from openai import OpenAI

    r = cluster["router"]
    c = OpenAI(base_url=f"{r.url}/v1", api_key="x", max_retries=0, timeout=120)
    assert [m.id for m in c.models.list().data] == [MODEL]
    raw = c.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "def f():"}], max_tokens=8,
        extra_headers={"x-request-id": "abc-123"})
    assert raw.headers["x-request-id"] == "abc-123"
    assert raw.headers["x-backend"] in ("a", "b")
    assert raw.parse().usage.completion_tokens == 8
    text = "".join(ch.choices[0].text for ch in c.completions.create(
        model=MODEL, prompt="import", max_tokens=8, stream=True, temperature=0) if ch.choices)
    assert text
    seen = {c.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2,
        extra_headers={"x-session-id": "user-42"}).headers["x-backend"] for _ in range(4)}
    assert len(seen) == 1  # session affinity


def test_kill_backend_mid_load_loses_nothing(cluster):
    router = cluster["router"]

    async def run() -> tuple[list[dict], list[dict]]:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(base_url=router.url, timeout=180, limits=limits) as c:
            started = asyncio.Event()
            first = [asyncio.create_task(stream_one(c, i, started, LONG)) for i in range(8)]
            await asyncio.wait_for(started.wait(), 120)
            os.killpg(cluster["b"].proc.pid, signal.SIGKILL)
            after = [asyncio.create_task(stream_one(c, 100 + i, None, SHORT))
                     for i in range(6)]
            done1 = await asyncio.wait_for(asyncio.gather(*first), 240)
            done2 = await asyncio.wait_for(asyncio.gather(*after), 240)
            return done1, done2

    t0 = time.monotonic()
    before, after = asyncio.run(run())
    # Every request is accounted for: a complete answer, or an explicit error event.
    for r in before + after:
        assert r["status"] == 200, r
        assert r["done"], f"stream ended without [DONE]: {r}"
        if r["error"] is None:
            assert r["tokens"] == r["n"], r
    # Streams that were on the killed backend end with an error, never silently short.
    on_b = [r for r in before if r["backend"] == "b"]
    assert on_b and all(r["error"] for r in on_b), before
    assert all(r["error"] is None for r in before if r["backend"] == "a"), before
    # Requests sent after the kill fail over before their first byte and succeed.
    assert all(r["error"] is None and r["backend"] == "a" for r in after), after
    assert time.monotonic() - t0 < 300
    s = scrape(router.url)
    assert metric_sum(s, "specgw_backend_up", backend="b") == 0
    assert metric_sum(s, "specgw_backend_requests_total", backend="a") >= 8


def test_router_metrics_carry_backend_engine_probes(cluster):
    s = scrape(cluster["router"].url)
    assert metric_sum(s, "specgw_backend_model_forwards_total", backend="a", role="draft") > 0
    assert metric_sum(s, "specgw_backend_probe_coverage", backend="a", role="draft") == 1
    assert metric_sum(s, "specgw_backend_spec_decode_accepted_tokens_per_draft_count",
                      backend="a") > 0


def test_sigterm_drains_streams_then_exits(cluster):
    """A second router on the surviving backend: SIGTERM while a stream is running stops
    new connections, lets the stream finish with [DONE], then the process exits."""
    r2 = Server("router-drain", ["--log-format", "text", "--drain-timeout", "60",
                                 "--backend", f"a={cluster['a'].url}"])
    try:
        r2.wait_ready(60)

        async def run() -> dict:
            async with httpx.AsyncClient(base_url=r2.url, timeout=120) as c:
                started = asyncio.Event()

                async def watch() -> dict:
                    body = {"model": MODEL, "prompt": "class Config:\n", "max_tokens": 300,
                            "temperature": 0, "ignore_eos": True, "stream": True,
                            "stream_options": {"include_usage": True}}
                    got = {"chunks": 0, "done": False, "tokens": None}
                    async with c.stream("POST", "/v1/completions", json=body) as resp:
                        async for line in resp.aiter_lines():
                            if line == "data: [DONE]":
                                got["done"] = True
                            elif line.startswith("data: "):
                                obj = json.loads(line[6:])
                                got["chunks"] += 1
                                if obj.get("usage"):
                                    got["tokens"] = obj["usage"]["completion_tokens"]
                                if got["chunks"] == 5:
                                    started.set()
                    return got

                task = asyncio.create_task(watch())
                await asyncio.wait_for(started.wait(), 60)
                os.kill(r2.proc.pid, signal.SIGTERM)
                await asyncio.sleep(0.5)
                refused = False
                try:
                    async with httpx.AsyncClient(timeout=5) as fresh:
                        await fresh.get(f"{r2.url}/health")
                except httpx.HTTPError:
                    refused = True
                return {**(await asyncio.wait_for(task, 120)), "refused": refused}

        got = asyncio.run(run())
        assert got["done"] and got["tokens"] == 300, got
        assert got["refused"], "new connections must be refused while draining"
        # uvicorn re-raises the signal once drained: "terminated by SIGTERM" is the clean
        # exit here, not a crash (a crash would be another code or a timeout).
        assert r2.proc.wait(60) in (0, -signal.SIGTERM)
    finally:
        r2.stop()
