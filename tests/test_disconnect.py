"""A client that leaves mid-stream gets its request aborted inside the engine."""

from __future__ import annotations

import json
import time

import httpx
from conftest import MODEL, metric_sum, scrape


def running(base_url: str) -> float:
    return metric_sum(scrape(base_url), "vllm:num_requests_running")


def test_disconnect_mid_stream_aborts_engine_request(base_url):
    before = scrape(base_url)
    gen_before = metric_sum(before, "vllm:generation_tokens_total")
    body = {"model": MODEL, "prompt": "import", "max_tokens": 1800, "ignore_eos": True,
            "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{base_url}/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        got = 0
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                json.loads(line[6:])
                got += 1
                if got >= 3:
                    break  # leave while the engine still has ~1800 tokens to go
    # closing the response above dropped the TCP connection
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and running(base_url) > 0:
        time.sleep(0.5)
    after = scrape(base_url)
    assert metric_sum(after, "vllm:num_requests_running") == 0
    assert metric_sum(after, "specgw_client_disconnects_total") >= 1 + metric_sum(
        before, "specgw_client_disconnects_total")
    # The engine stopped early: far fewer than 1800 tokens were generated for it.
    generated = metric_sum(after, "vllm:generation_tokens_total") - gen_before
    assert generated < 1500, generated
