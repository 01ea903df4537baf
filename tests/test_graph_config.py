"""Compilation config and the drafter-mode predictor (vLLM 0.26-0.32 rules)."""

from __future__ import annotations

import pytest

from engine_ext.graph_config import (
    capture_sizes,
    compilation_config,
    first_pass_tokens,
    predict_drafter_modes,
)
from engine_ext.settings import EngineSettings


def settings(**kw) -> EngineSettings:
    return EngineSettings(**{"max_num_seqs": 32, "num_speculative_tokens": 3, **kw})


@pytest.mark.parametrize(("seqs", "k"), [(1, 1), (8, 3), (32, 3), (64, 4), (7, 2)])
def test_capture_sizes_cover_the_largest_first_pass(seqs, k):
    cc = compilation_config(settings(max_num_seqs=seqs, num_speculative_tokens=k), "cuda")
    sizes = cc["cudagraph_capture_sizes"]
    assert max(sizes) >= first_pass_tokens(seqs, k)
    assert sizes == sorted(set(sizes)) and sizes[0] == 1
    for b in range(1, seqs + 1):  # every steady-state shape has a graph to pad to
        assert any(s >= first_pass_tokens(b, k) for s in sizes)
    assert cc["cudagraph_mode"] == "FULL_AND_PIECEWISE" and cc["mode"] == 3


def test_no_compilation_config_on_cpu_or_eager():
    assert compilation_config(settings(), "cpu") is None
    assert compilation_config(settings(enforce_eager=True), "cuda") is None


def test_capture_sizes_shape():
    assert capture_sizes(4) == [1, 2, 4]
    assert capture_sizes(20) == [1, 2, 4, 8, 16, 20]


def predict(**kw):
    base = dict(runner="v1", cudagraph_mode="FULL_AND_PIECEWISE", max_capture_size=128, k=3,
                batch=1, drafter_compiled=True)
    return predict_drafter_modes(**{**base, **kw})


def test_v1_piecewise_drafter():
    m = predict()
    assert (m.first_pass, m.draft_step) == ("piecewise", "piecewise")


def test_v1_silent_fallbacks():
    assert predict(spec_enforce_eager=True).first_pass == "none"
    assert predict(drafter_compiled=False).first_pass == "none"
    assert predict(cudagraph_mode="FULL_DECODE_ONLY").first_pass == "none"
    assert predict(cudagraph_mode="FULL").first_pass == "none"
    big = predict(batch=64)  # 64*(3+1)=256 tokens > 128
    assert big.first_pass == "none" and big.draft_step == "piecewise"
    assert any("256 tokens" in r for r in big.reasons)


def test_v2_full_graphs_and_piecewise_only_mode():
    m = predict(runner="v2")
    assert (m.first_pass, m.draft_step) == ("full", "full")
    pw = predict(runner="v2", cudagraph_mode="PIECEWISE")
    assert pw.first_pass == "piecewise" and pw.draft_step == "none"
    # V2 ignores speculative_config.enforce_eager
    assert predict(runner="v2", spec_enforce_eager=True).first_pass == "full"
    assert predict(runner="v2", cudagraph_mode="NONE").first_pass == "none"
