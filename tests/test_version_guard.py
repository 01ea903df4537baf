"""Fails loudly when the vLLM internals the probes wrap have moved."""

from __future__ import annotations

import pytest

from engine_ext.internals import UnsupportedVLLMVersion, table_for, vllm_version


def test_every_probed_internal_exists_in_installed_vllm():
    table = table_for()
    found = table.resolve_all()
    v2_needs_triton = {k for k in found if k.startswith("vllm.v1.worker.gpu.")}
    missing = [k for k, ok in found.items() if not ok and k not in v2_needs_triton]
    assert not missing, f"vLLM {vllm_version()} moved: {missing}"


def test_v2_internals_exist_in_source():
    """MRV2 modules may not import without Triton (CPU), but must exist with the names
    the probes patch: check the source text."""
    import importlib.util
    from pathlib import Path

    table = table_for()
    mod, cls = table.v2_speculator
    spec = importlib.util.find_spec(mod)
    assert spec is not None and spec.origin, f"{mod} is gone"
    src = Path(spec.origin).read_text()
    assert f"class {cls}(" in src and "def propose(" in src
    assert "set_forward_context" in src
    if table.v2_fused_decode_method:
        assert f"def {table.v2_fused_decode_method}(" in src
    cg = Path(importlib.util.find_spec(table.v2_cudagraph_module).origin).read_text()
    assert "class CudaGraphManager" in cg and "def run_fullgraph(" in cg


def test_graph_rules_and_constants_hold_in_installed_vllm():
    """The dispatch rules graph_config predicts with, and the compile-mode value it hands
    vLLM, are still what the installed vLLM's source says."""
    table = table_for()
    assert table.compile_mode_matches()
    rules = table.dispatch_rules_hold()
    assert rules and all(rules.values()), [k for k, ok in rules.items() if not ok]
    from vllm.config.compilation import CUDAGraphMode

    modes = {m.name for m in CUDAGraphMode}
    for name in (*table.v1_drafter_modes, *table.v2_draft_step_modes,
                 table.v2_first_pass_uniform_mode, table.v2_first_pass_mixed_mode):
        assert name in modes


def test_piece_wrapper_is_the_platform_static_graph_wrapper():
    """Pieces are counted on the class vLLM wraps split-graph pieces in (CUDA's)."""
    import importlib.util
    from pathlib import Path

    table = table_for()
    mod, cls = table.cudagraph_wrapper
    src = Path(importlib.util.find_spec("vllm.platforms.cuda").origin).read_text()
    assert f"{mod}.{cls}" in src
    backends = Path(importlib.util.find_spec("vllm.compilation.backends").origin).read_text()
    assert "runtime_mode=CUDAGraphMode.PIECEWISE" in backends

def test_torch_graph_methods_exist():
    import torch

    assert callable(torch.cuda.CUDAGraph.replay)
    assert callable(torch.cuda.CUDAGraph.capture_begin)


def test_unknown_versions_are_refused():
    with pytest.raises(UnsupportedVLLMVersion):
        table_for("0.40.0")
    assert table_for("0.26.0").v2_fused_decode_method is None
    assert table_for("0.32.0+cpu").v2_speculator[0].endswith("target_dependent_ar.speculator")
