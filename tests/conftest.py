"""Shared fixtures: one real gateway (``specgw serve`` with the bundled model on the vLLM
CPU engine) on 127.0.0.1 for the whole session, and the OpenAI client on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# Server helpers live in the benchmark harness (one copy for tests and benchmarks); the
# test files import them from here.
from benchmarks.harness import (  # noqa: F401
    LOG_DIR,
    MODEL,
    ROOT,
    START_TIMEOUT_S,
    Server,
    free_port,
    metric_sum,
    scrape,
    wait_until_ok,
)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    # The default poll interval: /metrics refreshes the probes at scrape time anyway, and
    # every collective_rpc keeps vLLM's CPU worker busy-polling its shared-memory queue for
    # 1 s afterwards (a whole core at a 1 s interval, starving the TP=2 test's rank 0).
    srv = Server("gateway", ["--log-format", "text", "--poll-interval", "5"])
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def base_url(server: Server) -> str:
    return server.url


@pytest.fixture(scope="session")
def client(base_url: str):
    from openai import OpenAI

    return OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def vllm_serve() -> Iterator[Server]:
    """A stock ``vllm serve`` (vLLM's own OpenAI server, not specgw's) with the plugin
    turned on exactly as the README says, serving the bundled pair."""
    from engine_ext.vllm_serve import plugin_serve_args, plugin_serve_env, serve_command

    # vllm serve wants the model first, so the port goes last.
    srv = Server("vllm-serve", [*plugin_serve_args(), "--port", "{port}"], plugin_serve_env(),
                 cmd=serve_command(), ready_path="/health")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()
