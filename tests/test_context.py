"""RequestContext settles a request exactly once: outcome counted once, latency timed
only when a backend took the request, in-flight gauge and limiter slot released once."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import REGISTRY
from starlette.requests import Request

from gateway.context import RequestContext
from gateway.errors import OpenAIError, model_not_found
from gateway.limits import ConcurrencyLimiter
from gateway.protocol import CompletionRequest


def http(headers: dict[str, str] | None = None) -> Request:
    raw = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    return Request({"type": "http", "method": "POST", "path": "/v1/completions",
                    "headers": raw, "query_string": b""})


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def body(model: str, **kw) -> CompletionRequest:
    return CompletionRequest(model=model, prompt="x", **kw)


def test_finish_is_idempotent_and_releases_once():
    async def run() -> None:
        limiter = ConcurrencyLimiter(1, 0)
        ctx = RequestContext(http(), "completions", body("ctx-a"), limiter)
        await ctx.admit()
        assert sample("specgw_requests_in_flight", model="ctx-a") == 1
        with pytest.raises(OpenAIError) as e:  # the only slot is taken, no queue
            await limiter.acquire()
        assert e.value.status == 429
        ctx.started()
        ctx.finish(200)
        ctx.finish(502)
        ctx.fail(RuntimeError("late"))
        assert ctx.status == "200"
        assert sample("specgw_requests_in_flight", model="ctx-a") == 0
        labels = {"model": "ctx-a", "endpoint": "completions"}
        assert sample("specgw_requests_total", **labels, status="200") == 1
        assert sample("specgw_requests_total", **labels, status="502") == 0
        assert sample("specgw_request_duration_seconds_count", **labels) == 1
        await limiter.acquire()  # released exactly once: one slot again, not two
        with pytest.raises(OpenAIError):
            await limiter.acquire()

    asyncio.run(run())


def test_rejections_are_counted_but_not_timed():
    limiter = ConcurrencyLimiter(1, 0)
    ctx = RequestContext(http(), "completions", body("ctx-b"), limiter)
    ctx.fail(OpenAIError("bad", 400))  # refused before any backend took it
    labels = {"model": "ctx-b", "endpoint": "completions"}
    assert sample("specgw_requests_total", **labels, status="400") == 1
    assert sample("specgw_request_duration_seconds_count", **labels) == 0
    lost = RequestContext(http(), "completions", body("ctx-no-such-model"), limiter)
    before = sample("specgw_requests_total", model="unknown", endpoint="completions",
                    status="404")
    lost.fail(model_not_found("ctx-no-such-model"))  # untrusted name: not a label value
    assert sample("specgw_requests_total", model="unknown", endpoint="completions",
                  status="404") == before + 1
    assert sample("specgw_requests_total", model="ctx-no-such-model", endpoint="completions",
                  status="404") == 0


def test_affinity_key_from_session_header_else_user():
    limiter = ConcurrencyLimiter(1, 0)
    assert RequestContext(http({"x-session-id": "s1"}), "completions",
                          body("m", user="u1"), limiter).affinity == "s1"
    assert RequestContext(http(), "completions", body("m", user="u1"), limiter).affinity == "u1"
    assert RequestContext(http(), "completions", body("m"), limiter).affinity is None
