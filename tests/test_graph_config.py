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


# ------------------------------------------------------- rules from the version tables
@pytest.mark.parametrize("version", ["0.26.0", "0.32.0"])
def test_rules_come_from_the_version_table(version):
    from engine_ext.internals import table_for

    rules = table_for(version)
    cc = compilation_config(settings(), "cuda", rules=rules)
    assert cc["mode"] == rules.compile_mode_value
    m = predict(runner="v2", rules=rules)
    assert (m.first_pass, m.first_pass_mixed, m.draft_step) == ("full", "piecewise", "full")
    assert predict(rules=rules).first_pass_mixed == "piecewise"  # V1: same as first pass


def test_v2_mixed_first_pass_needs_a_compiled_drafter_or_breakable_graphs():
    m = predict(runner="v2", drafter_compiled=False)
    # Uniform decode batches replay FULL graphs (compile does not matter) ...
    assert (m.first_pass, m.draft_step) == ("full", "full")
    # ... but mixed batches are dispatched PIECEWISE: eager without pieces.
    assert m.first_pass_mixed == "none"
    assert any(r.startswith("first_pass_mixed:") for r in m.reasons)
    assert predict(runner="v2", drafter_compiled=False,
                   breakable_graphs=True).first_pass_mixed == "piecewise"
    assert predict(runner="v2", cudagraph_mode="FULL_DECODE_ONLY").first_pass_mixed == "none"


# ----------------------------------------------------------------------- self-check
def plan(**kw) -> dict:
    return {"runner": "v2", "cudagraph_mode": "FULL_AND_PIECEWISE",
            "max_cudagraph_capture_size": 128, "max_num_seqs": 32,
            "num_speculative_tokens": 3, "drafter_compiled": True,
            "drafter_model_class": "Eagle3LlamaForCausalLM",
            "captures": {"target": 50, "draft": 20}, **kw}


def test_self_check_v2_uncompiled_drafter_warns_about_mixed_batches():
    from engine_ext.self_check import evaluate

    assert evaluate(plan(), "cuda")["warnings"] == []
    rep = evaluate(plan(drafter_compiled=False), "cuda")
    assert rep["expected"]["max"]["first_pass"] == "full"
    assert rep["expected"]["max"]["first_pass_mixed"] == "none"
    assert any("mixed batches will run EAGER" in w for w in rep["warnings"])
    assert any("not torch-compiled" in w and "mixed batches" in w for w in rep["warnings"])
    # one warning per shape class, not per batch size
    assert len(rep["warnings"]) == len(set(rep["warnings"])) == 2
    breakable = plan(drafter_compiled=False, draft_prefill_manager={"use_breakable_cg": True})
    assert evaluate(breakable, "cuda")["warnings"] == []
    # CPU: predictions, never warnings
    assert evaluate(plan(drafter_compiled=False), "cpu")["warnings"] == []


def test_self_check_v1_uncompiled_drafter_warns():
    from engine_ext.self_check import evaluate

    rep = evaluate(plan(runner="v1", drafter_compiled=False), "cuda")
    assert rep["expected"]["1"]["first_pass"] == "none"
    assert any("PIECEWISE dispatch would run eager" in w for w in rep["warnings"])


def test_self_check_reports_specgw_compile_and_unsafe_and_unattributed_captures():
    from engine_ext.self_check import evaluate

    rep = evaluate(plan(drafter_compiled_by_specgw=True), "cuda")
    assert rep["warnings"] == []
    assert any("compiled by specgw" in n for n in rep["notes"])
    unsafe = evaluate(plan(drafter_compile_unsafe="multi-layer MTP"), "cuda")
    assert "drafter dispatched eager on purpose: multi-layer MTP" in unsafe["warnings"]
    odd = evaluate(plan(captures={"target": 3, "unknown": 2}), "cuda")
    assert any("2 CUDA graph captures not attributed" in n for n in odd["notes"])
