"""Tensor parallel (TP=2) on the vLLM CPU engine: one worker process per rank, and the
probes must be collected from every rank through ``collective_rpc`` and exported per
rank, never read from rank 0 only. (CUDA-graph replays need a GPU; on the CPU every
forward is eager, which the counts must say too.)"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from conftest import MODEL, Server, metric_sum, scrape

from engine_ext.engine import cpu_thread_binding

K = 3


def test_cpu_binding_splits_cores_only_where_numa_auto_binding_cannot():
    assert cpu_thread_binding(1, 1, [0, 1]) is None
    assert cpu_thread_binding(2, 1, [0, 1]) == "0|1"
    assert cpu_thread_binding(2, 1, [0, 1, 2, 3, 4]) == "0,1|2,3"
    assert cpu_thread_binding(2, 2, [0, 1]) is None  # vLLM's NUMA-aware auto-binding
    with pytest.raises(ValueError, match="at least 2"):
        cpu_thread_binding(2, 1, [0])


@pytest.fixture(scope="module")
def tp2() -> Iterator[Server]:
    # No VLLM_CPU_OMP_THREADS_BIND here: the engine must pick a binding that works on a
    # one-NUMA-node machine itself (vLLM's auto-binding refuses TP=2 there). Eager: two
    # ranks compiling on a 2-core machine that also runs the session's engine took over
    # 7 minutes in CI, and compilation is not what this test is about.
    srv = Server("tp2", ["--log-format", "text", "-tp", "2", "--max-num-seqs", "4",
                         "--enforce-eager"])
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def snapshots(url: str) -> list[dict]:
    return httpx.get(f"{url}/v1/engine/probes", timeout=30).json()


def counts(snap: dict) -> dict[tuple, int]:
    return {(r, p, d, e): n for r, p, d, e, n in snap["forwards"]}


def test_every_rank_reports_and_ranks_agree(tp2):
    from openai import OpenAI

    before = {s["rank"]: counts(s) for s in snapshots(tp2.url)}
    client = OpenAI(base_url=f"{tp2.url}/v1", api_key="unused", max_retries=0, timeout=300)
    r = client.completions.create(model=MODEL, prompt="def main():\n", max_tokens=24,
                                  temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 24
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "class Stack:"}], max_tokens=16,
        stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].usage.completion_tokens == 16

    snaps = snapshots(tp2.url)
    assert sorted(s["rank"] for s in snaps) == [0, 1]
    assert len({s["pid"] for s in snaps}) == 2  # two worker processes, not one twice
    moved = {}
    for s in snaps:
        c = counts(s)
        d = {k: c.get(k, 0) - before[s["rank"]].get(k, 0) for k in c}
        moved[s["rank"]] = {k: n for k, n in d.items() if n}
        assert s["draft_propose_probed"] and s["drafter_class"] == "EagleProposer"
    # TP ranks run every forward together: their ledgers must move identically.
    assert moved[0] == moved[1]
    d = moved[0]
    assert set(d) == {("target", "forward", "none", "eager"),
                      ("draft", "first_pass", "none", "eager"),
                      ("draft", "draft_step", "none", "eager")}, d
    assert d[("draft", "draft_step", "none", "eager")] == \
        (K - 1) * d[("draft", "first_pass", "none", "eager")] > 0


def test_metrics_are_labelled_by_rank(tp2):
    samples = scrape(tp2.url)
    per_rank = {rank: metric_sum(samples, "specgw_model_forwards_total", rank=rank,
                                 role="draft") for rank in ("0", "1")}
    assert per_rank["0"] > 0 and per_rank["0"] == per_rank["1"], per_rank
    assert metric_sum(samples, "specgw_probe_ranks") == 2
    # Coverage and hit ratio are over all ranks; on the CPU every forward is eager.
    assert metric_sum(samples, "specgw_probe_coverage", role="draft") == 1
    assert metric_sum(samples, "specgw_cudagraph_hit_ratio", role="draft",
                      phase="draft_step") == 0
