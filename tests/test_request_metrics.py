"""Per-request speculative-decoding counts (``--per-request-spec-metrics``) in usage,
from the engine's own per-request counts, against the engine-wide vllm:spec_decode_*
counters for a lone request; and the one structured access-log line per request."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from conftest import TOOLS_MODEL, metric_sum, scrape


def _spec_counters(url: str) -> tuple[float, float]:
    s = scrape(url)
    return (metric_sum(s, "vllm:spec_decode_num_draft_tokens_total"),
            metric_sum(s, "vllm:spec_decode_num_accepted_tokens_total"))


@pytest.mark.parametrize("stream", [False, True])
def test_usage_spec_counts_match_engine_counters(tools_server, stream):
    before = _spec_counters(tools_server.url)
    body = {"model": TOOLS_MODEL, "prompt": "def add(a, b):", "max_tokens": 48,
            "ignore_eos": True, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    r = httpx.post(f"{tools_server.url}/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    if stream:
        events = [json.loads(line[6:]) for line in r.text.splitlines()
                  if line.startswith("data: {")]
        usage = events[-1]["usage"]
    else:
        usage = r.json()["usage"]
    spec = usage["speculative_decoding"]
    assert spec["num_draft_tokens"] > 0
    want = (spec["num_draft_tokens"], spec["num_accepted_tokens"])
    deadline = time.monotonic() + 15  # engine stats reach the counters a step later
    while True:
        after = _spec_counters(tools_server.url)
        got = (after[0] - before[0], after[1] - before[1])
        if got == want or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert got == want
    assert spec["mean_acceptance_length"] == pytest.approx(
        1 + spec["num_accepted_tokens"] / spec["num_spec_steps"])


def test_access_log_line_per_request(tools_server):
    rid = f"a2-{time.time_ns()}"
    r = httpx.post(f"{tools_server.url}/v1/completions", headers={"x-request-id": rid}, timeout=120,
                   json={"model": TOOLS_MODEL, "prompt": "x", "max_tokens": 3})
    assert r.status_code == 200
    bad = httpx.post(f"{tools_server.url}/v1/completions", headers={"x-request-id": rid + "-bad"},
                     json={"model": TOOLS_MODEL, "prompt": "x", "min_tokens": 9,
                           "max_tokens": 3}, timeout=60)
    assert bad.status_code == 400, bad.text  # vLLM's own check, no longer a 500
    time.sleep(0.5)
    lines = [json.loads(x) for x in tools_server.log_path.read_text().splitlines()
             if x.startswith("{") and "gateway.access" in x]
    mine = {x["request_id"]: x for x in lines if x["request_id"].startswith(rid)}
    ok, err = mine[rid], mine[rid + "-bad"]
    assert ok["status"] == 200 and ok["model"] == TOOLS_MODEL and ok["endpoint"] == "completions"
    assert ok["completion_tokens"] == 3 and ok["prompt_tokens"] >= 1 and ok["duration_ms"] > 0
    assert ok["drafted_tokens"] is not None and ok["accepted_tokens"] is not None
    assert err["status"] == 400
