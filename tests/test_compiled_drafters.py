"""Compiled subclasses for drafter classes that reach vLLM without @support_torch_compile:
vLLM's own uncompiled MTP heads and the seed bug's EAGLE-3 head (tests/seed_bug_plugin)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from engine_ext import compiled_drafters as cd

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "models" / "tiny-code-llama"


def _cls(mod: str, name: str) -> type:
    return getattr(importlib.import_module(f"vllm.model_executor.models.{mod}"), name)


def test_vllms_compiled_drafters_are_kept():
    # The decorator sits on the top class (DeepSeekMTP) or on the inner model (EAGLE-3).
    for mod, name, where in (("deepseek_mtp", "DeepSeekMTP", "DeepSeekMTP"),
                             ("llama_eagle3", "Eagle3LlamaForCausalLM", "LlamaModel")):
        cls = _cls(mod, name)
        assert cd.compiled_part(cls) == where
        assert cd.repair("X", cls, None) is cls
    assert cd.DECISIONS[-1].action == "kept_compiled"


def test_uncompiled_mtp_head_gets_a_compiled_subclass():
    from transformers import Glm4MoeConfig

    base = _cls("glm4_moe_mtp", "Glm4MoeMTP")
    assert cd.compiled_part(base) is None, "vLLM now compiles Glm4MoeMTP: pick another class"
    cls = cd.repair("Glm4MoeMTPModel", base, Glm4MoeConfig(num_nextn_predict_layers=1))
    assert issubclass(cls, base) and cd.is_compiled_class(cls)
    assert cls.forward is base.forward  # same math; only the compile wrapper is added
    assert cd.DECISIONS[-1].action == "compiled"


def test_multi_layer_mtp_is_eager_by_decision():
    from transformers import Glm4MoeConfig

    base = _cls("glm4_moe_mtp", "Glm4MoeMTP")
    assert cd.repair("Glm4MoeMTPModel", base, Glm4MoeConfig(num_nextn_predict_layers=2)) is base
    d = cd.DECISIONS[-1]
    assert d.action == "eager_unsafe" and "2 MTP layers" in d.unsafe_reason
    plan = cd.plan_fields(None, False)
    assert plan["drafter_compile_unsafe"] == d.unsafe_reason
    assert plan["drafter_compiled_by_specgw"] is False


def test_seed_bug_class_is_genuinely_undecorated():
    from specgw_seed_bug.eagle3 import SeedBugEagle3LlamaForCausalLM, SeedBugLlamaModel

    vllm_cls = _cls("llama_eagle3", "Eagle3LlamaForCausalLM")
    assert issubclass(SeedBugEagle3LlamaForCausalLM, vllm_cls)  # vLLM asserts isinstance
    assert not cd.is_compiled_class(SeedBugLlamaModel)
    assert SeedBugLlamaModel.forward is _cls("llama_eagle3", "LlamaModel").forward
    assert cd.compiled_part(SeedBugEagle3LlamaForCausalLM) is None
    assert cd.is_compiled_class(cd.repair("LlamaForCausalLMEagle3",
                                          SeedBugEagle3LlamaForCausalLM, None))


def _record(*args: str, **env: str) -> dict:
    """One engine run of tests/mtp_run.py in its own process (plugins read the env)."""
    env = {**os.environ, "SPECGW_RECORD_DRAFTS": "1", "SPECGW_SEED_BUG": "0", **env}
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "mtp_run.py"), *args],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, r.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def _record_all(*runs: tuple[tuple[str, ...], dict[str, str]]) -> list[dict]:
    """Several ``_record(*args, **env)`` runs, two at a time: half of an engine run's wall
    time on CI's 2 cores is process start-up and shutdown waits, not compute."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda run: _record(*run[0], **run[1]), runs))


def test_compiled_glm4_mtp_drafts_exactly_like_vllms_class(tmp_path):
    """A real engine run (CPU, where vLLM traces @support_torch_compile modules with
    Dynamo): the compiled subclass proposes the very same draft tokens as vLLM's own
    uncompiled Glm4MoeMTP on a random GLM-4-MoE + MTP checkpoint."""
    from mtp_fixture import build

    model = str(build(tmp_path / "glm4-moe-mtp"))
    ours, theirs = _record_all(((model,), {"SPECGW_COMPILED_DRAFTERS": "1"}),
                               ((model,), {"SPECGW_COMPILED_DRAFTERS": "0"}))
    assert ours["drafter_model_class"] == "CompiledGlm4MoeMTP" and ours["drafter_compiled"]
    assert ours["drafter_compiled_by_specgw"] is True
    assert theirs["drafter_model_class"] == "Glm4MoeMTP" and not theirs["drafter_compiled"]
    assert theirs["drafter_compiled_by_specgw"] is False
    assert ours["compilation_mode"] != "NONE"  # the compiled path really ran
    assert len(ours["drafts"]) > 10
    assert ours["drafts"] == theirs["drafts"]
    assert ours["outputs"] == theirs["outputs"]


@pytest.mark.parametrize("runner", ["v1"])  # V2 needs Triton's CPU backend: GPU only
def test_seed_bug_eagle3_is_repaired_and_drafts_like_vllms_class(runner):
    """The seed bug (SPECGW_SEED_BUG=1 loads an EAGLE-3 head without
    @support_torch_compile): with the fix on, the drafter is our compiled subclass and
    proposes exactly vLLM's own compiled class's draft tokens; with it off, the
    uncompiled class runs and the plan says so."""
    from importlib.metadata import entry_points

    names = {e.name for e in entry_points(group="vllm.general_plugins")}
    assert "specgw_seed_bug" in names, "run scripts/setup.sh (installs tests/seed_bug_plugin)"
    pair = (str(BUNDLED / "target"), "--method", "eagle3", "--draft-model",
            str(BUNDLED / "eagle3"), "--runner", runner, "--max-tokens", "12")
    vllm_own, fixed, bug = _record_all(
        (pair, {}), (pair, {"SPECGW_SEED_BUG": "1", "SPECGW_COMPILED_DRAFTERS": "1"}),
        (pair, {"SPECGW_SEED_BUG": "1", "SPECGW_COMPILED_DRAFTERS": "0"}))
    assert vllm_own["runner"] == runner and vllm_own["compilation_mode"] != "NONE"
    assert vllm_own["drafter_model_class"] == "Eagle3LlamaForCausalLM"
    assert vllm_own["drafter_compiled"] and not vllm_own["drafter_compiled_by_specgw"]
    assert fixed["drafter_model_class"] == "CompiledSeedBugEagle3LlamaForCausalLM"
    assert fixed["drafter_compiled"] and fixed["drafter_compiled_by_specgw"]
    assert bug["drafter_model_class"] == "SeedBugEagle3LlamaForCausalLM"
    assert bug["drafter_compiled"] is False and bug["drafter_compiled_by_specgw"] is False
    assert len(vllm_own["drafts"]) > 10
    assert fixed["drafts"] == vllm_own["drafts"] == bug["drafts"]
    assert fixed["outputs"] == vllm_own["outputs"] == bug["outputs"]


def test_seed_bug_plugin_is_inert_unless_asked():
    """Through vLLM's own plugin loader, in a fresh process (the registry is global)."""
    code = ("from vllm.plugins import load_general_plugins; load_general_plugins(); "
            "from vllm import ModelRegistry; "
            "print('CLS', ModelRegistry._try_load_model_cls('LlamaForCausalLMEagle3').__name__)")
    got = {}
    for flag in ("0", "1"):
        r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                           text=True, timeout=300,
                           env={**os.environ, "SPECGW_SEED_BUG": flag, "SPECGW_PROBES": "0"})
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("CLS ")]
        assert r.returncode == 0 and lines, r.stderr[-2000:]
        got[flag] = lines[-1].split()[1]
    assert got == {"0": "Eagle3LlamaForCausalLM", "1": "SeedBugEagle3LlamaForCausalLM"}


def test_two_layer_mtp_head_is_dispatched_eager_by_decision(tmp_path):
    """Two MTP layers picked by spec_step_idx: not compiled, and the engine's own config
    gets speculative_config.enforce_eager, which runner V1 reads when it sets up the
    drafter's dispatcher (on the CPU every dispatch is NONE anyway: the flag is the check)."""
    from mtp_fixture import build

    run = _record(str(build(tmp_path / "glm4-moe-mtp2", mtp_layers=2)), "--runner", "v1",
                  "--max-tokens", "6", SPECGW_COMPILED_DRAFTERS="1")
    assert run["drafter_model_class"] == "Glm4MoeMTP" and run["drafter_compiled"] is False
    assert run["drafter_compiled_by_specgw"] is False
    assert "2 MTP layers" in run["drafter_compile_unsafe"]
    assert run["spec_enforce_eager"] is True
