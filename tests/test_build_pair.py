"""models/build_pair.py end to end at toy size: the code path of the GPU preset (whole
stdlib corpus, reused tokenizer, 12 layers with aux layers 2/6/9) runs on the CPU, writes
a pair vLLM's loaders accept, and is deterministic."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "models"))
import build_pair  # noqa: E402

TOKENIZER = ROOT / "models" / "tiny-code-llama" / "target" / "tokenizer.json"


def build(out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toy = dataclasses.replace(
        build_pair.PRESETS["h200-150m"], hidden_size=32, intermediate_size=64, num_heads=2,
        seq_len=32, batch_size=2, target_steps=2, head_steps=2, max_corpus_bytes=300_000,
        threads=1, device="cpu")
    monkeypatch.setitem(build_pair.PRESETS, "toy", toy)
    monkeypatch.setattr(sys, "argv", ["build_pair.py", "--preset", "toy", "--out", str(out),
                                      "--tokenizer", str(TOKENIZER)])
    build_pair.main()


def digest(d: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(d.rglob("*.safetensors")):
        h.update(f.read_bytes())
    return h.hexdigest()


def test_gpu_preset_code_path_builds_a_loadable_deterministic_pair(tmp_path, monkeypatch):
    from transformers import AutoConfig

    build(tmp_path / "a", monkeypatch)
    build(tmp_path / "b", monkeypatch)
    assert digest(tmp_path / "a") == digest(tmp_path / "b")

    target = AutoConfig.from_pretrained(tmp_path / "a" / "target")
    assert target.num_hidden_layers == 12 and target.vocab_size == 4096
    draft = json.loads((tmp_path / "a" / "eagle3" / "config.json").read_text())
    assert draft["architectures"] == ["LlamaForCausalLMEagle3"]
    assert draft["eagle_aux_hidden_state_layer_ids"] == [2, 6, 9]
    info = json.loads((tmp_path / "a" / "build_info.json").read_text())
    assert info["tokenizer"] == "reused" and info["config"]["corpus"] == "stdlib-all"
    # The reused tokenizer travels with the target, byte for byte.
    assert (tmp_path / "a" / "target" / "tokenizer.json").read_text() == TOKENIZER.read_text()


def test_presets_keep_the_bundled_pair_reproducible():
    # The committed pair was built with these; changing them silently would make
    # models/build_info.json lie about how to rebuild it.
    recorded = json.loads((ROOT / "models" / "tiny-code-llama" / "build_info.json").read_text())
    bundled = dataclasses.asdict(build_pair.PRESETS["bundled"])
    for key, value in recorded["config"].items():
        assert bundled[key] == (tuple(value) if isinstance(value, list) else value), key
    assert bundled["device"] == "cpu" and bundled["corpus"] == "stdlib-top"
