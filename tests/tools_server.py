"""One gateway for the OpenAI-feature tests, shared by their modules: the committed test
model dir tests/models/tiny-tools (the bundled weights, a Hermes-style chat template that
renders ``tools``, a generation_config.json with temperature 0) with the bundled EAGLE-3
head, vLLM's ``hermes`` tool-call parser and per-request spec-decode metrics on."""

from __future__ import annotations

import pytest
from conftest import ROOT, Server

TOOLS_MODEL = "tiny-tools"
_STARTED: list[Server] = []


def shared(config: pytest.Config) -> Server:
    """Started on first use, stopped when the pytest session ends: the modules that use
    it share one engine (CPU time is scarce)."""
    if not _STARTED:
        srv = Server("gateway-tools", [
            "--log-format", "json", "--model", str(ROOT / "tests" / "models" / "tiny-tools"),
            "--served-model-name", TOOLS_MODEL, "--tool-call-parser", "hermes",
            "--per-request-spec-metrics"])
        config.add_cleanup(srv.stop)
        _STARTED.append(srv)
        srv.wait_ready()
    return _STARTED[0]


def openai_client(srv: Server):
    from openai import OpenAI

    return OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0, timeout=120)
