"""Compiled subclasses for drafter classes vLLM ships without @support_torch_compile."""

from __future__ import annotations

import importlib

import pytest

from engine_ext.compiled_drafters import (
    UNCOMPILED_MTP_DRAFTERS,
    compiled_subclass,
    is_compiled_class,
    register_compiled_drafters,
)


@pytest.mark.parametrize("arch", sorted(UNCOMPILED_MTP_DRAFTERS))
def test_compiled_subclass_keeps_the_original_and_adds_compile(arch):
    mod, name = UNCOMPILED_MTP_DRAFTERS[arch]
    base = getattr(importlib.import_module(mod), name)
    assert not is_compiled_class(base), f"vLLM now compiles {name}: drop it from the list"
    cls = compiled_subclass(base)
    assert issubclass(cls, base) and is_compiled_class(cls)
    assert cls.forward is base.forward  # same math; only the compile wrapper is added


def test_registry_points_at_compiled_classes():
    from vllm import ModelRegistry

    registered = register_compiled_drafters()
    assert set(registered) == set(UNCOMPILED_MTP_DRAFTERS)
    for arch in registered:
        cls = ModelRegistry._try_load_model_cls(arch)
        assert cls is not None and is_compiled_class(cls), arch


def _run_mtp(model_dir, compiled: bool) -> dict:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "SPECGW_RECORD_DRAFTS": "1",
           "SPECGW_COMPILED_DRAFTERS": "1" if compiled else "0"}
    r = subprocess.run([sys.executable, str(root / "tests" / "mtp_run.py"), str(model_dir)],
                       cwd=root, env=env, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, r.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_compiled_glm4_mtp_drafts_exactly_like_vllms_class(tmp_path):
    """A real engine run (CPU, where vLLM traces @support_torch_compile modules with
    Dynamo): the compiled subclass proposes the very same draft tokens as vLLM's own
    uncompiled Glm4MoeMTP on a random GLM-4-MoE + MTP checkpoint."""
    from mtp_fixture import build

    model = build(tmp_path / "glm4-moe-mtp")
    ours, theirs = _run_mtp(model, True), _run_mtp(model, False)
    assert ours["drafter_model_class"] == "CompiledGlm4MoeMTP" and ours["drafter_compiled"]
    assert theirs["drafter_model_class"] == "Glm4MoeMTP" and not theirs["drafter_compiled"]
    assert ours["compilation_mode"] != "NONE"  # the compiled path really ran
    assert len(ours["drafts"]) > 10
    assert ours["drafts"] == theirs["drafts"]
    assert ours["outputs"] == theirs["outputs"]
