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


def ready_until_teardown(srv: Server) -> Iterator[Server]:
    """A session fixture's body: ready before the first test, stopped after the last."""
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def openai_client(url: str):
    from openai import OpenAI

    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


# The session servers' probe poll interval. Every collective_rpc keeps vLLM's CPU worker
# busy-polling its shared-memory queue for 1 s afterwards (vLLM's SpinCondition), so at
# the default 5 s an idle server's worker holds 21% of a core (docs/idle_cpu/: specgw
# serve and vllm serve + plugin alike; the whole server 1.7% at 60 s), and two or three
# stay up for most of the suite on CI's 2 cores. No test needs the periodic poll: /metrics
# and /v1/engine/probes read the workers at request time.
IDLE_POLL_S = 60


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    srv = Server("gateway", ["--log-format", "text", "--poll-interval", str(IDLE_POLL_S)])
    yield from ready_until_teardown(srv)


@pytest.fixture(scope="session")
def base_url(server: Server) -> str:
    return server.url


@pytest.fixture(scope="session")
def client(base_url: str):
    return openai_client(base_url)


@pytest.fixture(scope="session")
def vllm_serve() -> Iterator[Server]:
    """A stock ``vllm serve`` (vLLM's own OpenAI server, not specgw's) with the plugin
    turned on exactly as the README says, serving the bundled pair."""
    from engine_ext.vllm_serve import plugin_serve_args, plugin_serve_env, serve_command

    # vllm serve wants the model first, so the port goes last.
    srv = Server("vllm-serve", [*plugin_serve_args(), "--port", "{port}"],
                 {**plugin_serve_env(), "SPECGW_POLL_INTERVAL": str(IDLE_POLL_S)},
                 cmd=serve_command(), ready_path="/health")
    yield from ready_until_teardown(srv)


def assert_cpu_self_check(sc: dict, k: int) -> None:
    """The start-up self-check of the bundled pair on the CPU engine, as served by
    ``specgw serve`` and by ``vllm serve`` + plugin alike: no graphs, every pass eager."""
    assert sc["device"] == "cpu"
    rank = sc["ranks"][0]
    assert rank["cudagraph_mode"] == "NONE"
    assert rank["drafter_model_class"] == "Eagle3LlamaForCausalLM"
    assert rank["num_speculative_tokens"] == k
    assert sc["reports"][0]["expected"]["1"]["first_pass"] == "none"
    assert sc["reports"][0]["expected"]["max"]["first_pass_mixed"] == "none"


# One gateway for the OpenAI-feature tests (tools, structured outputs, generation
# defaults, per-request counts), shared by their modules: the committed test model dir
# tests/models/tiny-tools (the bundled weights, a Hermes-style chat template that renders
# ``tools``, a generation_config.json with temperature 0) with the bundled EAGLE-3 head,
# vLLM's ``hermes`` tool-call parser and per-request spec-decode metrics on.
TOOLS_MODEL = "tiny-tools"


@pytest.fixture(scope="session")
def tools_server() -> Iterator[Server]:
    srv = Server("gateway-tools", [
        "--log-format", "json", "--model", str(ROOT / "tests" / "models" / "tiny-tools"),
        "--served-model-name", TOOLS_MODEL, "--tool-call-parser", "hermes",
        "--per-request-spec-metrics", "--poll-interval", str(IDLE_POLL_S)])
    yield from ready_until_teardown(srv)


@pytest.fixture(scope="session")
def tools_client(tools_server: Server):
    return openai_client(tools_server.url)
