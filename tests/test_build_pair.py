"""models/build_pair.py end to end at toy size: the code paths of the GPU presets (whole
stdlib corpus, reused tokenizer; h200-150m's 12 layers with aux layers 2/6/9;
h200-small's chat examples, held-out loss and wall-clock guards) run on the CPU, write
a pair vLLM's loaders accept, and are deterministic."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "models"))
import build_pair  # noqa: E402

TOKENIZER = ROOT / "models" / "tiny-code-llama" / "target" / "tokenizer.json"


def build(out: Path, monkeypatch: pytest.MonkeyPatch, preset: str = "h200-150m",
          **changes) -> None:
    toy = dataclasses.replace(
        build_pair.PRESETS[preset], **{
            "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "seq_len": 32,
            "batch_size": 2, "target_steps": 2, "head_steps": 2, "max_corpus_bytes": 300_000,
            "threads": 1, "device": "cpu", **changes})
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


def test_small_gpu_preset_code_path_adds_chat_examples_and_a_held_out_loss(
        tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    for name in ("a", "b"):
        build(tmp_path / name, monkeypatch, preset="h200-small", chat_examples=50,
              val_tokens=500, threads=2)
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    info = json.loads((tmp_path / "a" / "build_info.json").read_text())
    assert info["chat_examples"] == 50 and info["config"]["aux_layers"] == [1, 2, 3]
    assert info["target"]["steps_done"] == 2 and info["head"]["steps_done"] == 2
    assert info["target"]["eval_loss"] > 0

    # The transcripts the target trains on are what the served chat template renders.
    tok = AutoTokenizer.from_pretrained(tmp_path / "a" / "target")
    texts, _ = build_pair.load_corpus(300_000, "stdlib-all")
    chat = build_pair.chat_examples(texts, 1, seed=4)[0]
    user = chat.split("<|user|>\n", 1)[1].split("\n<|assistant|>", 1)[0]
    prompt = tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                     add_generation_prompt=True)
    assert chat.replace(f"<|system|>\n{build_pair.SYSTEM_PROMPT}\n", "").startswith(prompt)
    ids = tok(chat, add_special_tokens=False).input_ids
    assert ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id
    # A tools list renders (Hermes style) without disturbing the turns after it.
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    with_tools = tok.apply_chat_template([{"role": "user", "content": user}], tools=tools,
                                         tokenize=False, add_generation_prompt=True)
    assert '"name": "lookup"' in with_tools and with_tools.endswith(prompt.removeprefix(
        "<|bos|>"))


def test_presets_keep_the_bundled_pair_reproducible():
    # The committed pair was built with these; changing them silently would make
    # models/build_info.json lie about how to rebuild it.
    recorded = json.loads((ROOT / "models" / "tiny-code-llama" / "build_info.json").read_text())
    preset = dataclasses.asdict(build_pair.PRESETS[recorded.get("preset", "cpu-5m")])
    for key, value in recorded["config"].items():
        assert preset[key] == (tuple(value) if isinstance(value, list) else value), key
    assert build_pair.PRESETS["cpu-5m"].device == "cpu"


def test_site_corpus_takes_only_permissively_licensed_packages():
    import importlib.metadata as md

    names = {n.split("/")[1] for n, _ in build_pair.site_files()}
    licences = {(d.metadata["Name"] or "").lower(): d for d in md.distributions()}
    assert names and all(build_pair.permissive(licences[n]) for n in names)
    # httpx (BSD-3-Clause), jinja2 (a BSD classifier only) and certifi (MPL-2.0, a
    # dependency of httpx) are installed wherever the gateway is.
    assert "httpx" in names and "jinja2" in names and "certifi" not in names
    texts, _ = build_pair.load_corpus(400_000_000, "stdlib+site", package_max_bytes=50_000)
    stdlib, _ = build_pair.load_corpus(400_000_000, "stdlib-all")
    assert texts[: len(stdlib)] == stdlib and len(texts) > len(stdlib)


def test_line_split_sources_teach_the_lone_newline_before_an_indented_line():
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER))
    texts = [f"def f{i}(x):\n    return x + {i}\n" for i in range(40)]
    cfg = dataclasses.replace(build_pair.PRESETS["h200-code"], split_lines_share=0.5)
    docs = build_pair.encode_sources(tok, texts, cfg)
    eos, newline = tok.token_to_id("<|eos|>"), tok.token_to_id("Ċ")
    assert all(d[-1] == eos and tok.decode(d[:-1]) == t for d, t in zip(docs, texts,
                                                                         strict=True))
    split = [newline in d[:-2] for d in docs]  # a lone newline inside the file
    assert 0 < sum(split) < len(docs)
    assert docs == build_pair.encode_sources(tok, texts, cfg)  # seeded
    whole = dataclasses.replace(cfg, split_lines_share=0.0)
    assert build_pair.encode_sources(tok, texts, whole) == [
        [*e.ids, eos] for e in tok.encode_batch(texts)]


def test_definition_units_end_each_top_level_definition_with_eos():
    from tokenizers import Tokenizer

    src = ('"""Module."""\nimport os\n\nX = 1\n\n\ndef first(a):\n    return a\n\n\n'
           '# about second\n@staticmethod\ndef second(b):\n    if b:\n        return b\n\n'
           'Y = 2\n\n\nclass Third:\n    def method(self):\n        pass\n')
    pieces = build_pair.definition_units(src)
    assert pieces == [
        '"""Module."""\nimport os\n\nX = 1\n\n\ndef first(a):\n    return a\n',
        "# about second\n@staticmethod\ndef second(b):\n    if b:\n        return b\n\n"
        "Y = 2\n",
        "class Third:\n    def method(self):\n        pass\n"]
    assert all(compile(p, "<unit>", "exec") for p in pieces)
    assert build_pair.definition_units("def broken(:\n") == ["def broken(:\n"]
    # Only module-level comments right above go with a definition: not the indented
    # comment that ends the function above, nor a string's line that starts with "#".
    src2 = ('def a():\n    x = 1\n    # end of a\n# about b\ndef b():\n    pass\n'
            'S = """\n# not a comment"""\ndef c():\n    pass\n\x0c# about d\ndef d():\n'
            '    pass\n')
    assert build_pair.definition_units(src2) == [
        "def a():\n    x = 1\n    # end of a\n",
        '# about b\ndef b():\n    pass\nS = """\n# not a comment"""\n',
        "def c():\n    pass\n", "\x0c# about d\ndef d():\n    pass\n"]
    # A form feed is no line break to ast: the cut stays before the definition.
    assert build_pair.definition_units("x = 1\x0c\ndef a():\n    pass\ndef b():\n    pass") == [
        "x = 1\x0c\ndef a():\n    pass\n", "def b():\n    pass\n"]

    tok = Tokenizer.from_file(str(TOKENIZER))
    eos = tok.token_to_id("<|eos|>")
    cfg = dataclasses.replace(build_pair.PRESETS["h200-code-units"], split_lines_share=0.0,
                              threads=1)
    texts = [src] * 40
    docs = build_pair.encode_sources(tok, texts, cfg)
    cut = len(docs) - len(texts)  # each cut file adds two documents
    assert cut % 2 == 0 and 0 < cut // 2 < len(texts)
    assert all(d[-1] == eos and eos not in d[:-1] for d in docs)
    assert {tok.decode(d[:-1]) for d in docs} == {src, *pieces}
    assert docs == build_pair.encode_sources(tok, texts, cfg)  # seeded
    whole = dataclasses.replace(cfg, unit_share=0.0)
    assert build_pair.encode_sources(tok, texts, whole) == [
        [*e.ids, eos] for e in tok.encode_batch(texts)]

    # units_line_split: every piece line by line, so no piece ends in a lone newline that
    # mostly a piece's end shows after an indented line; a file left whole encodes as
    # without it (here whole, split_lines_share being 0).
    lines = dataclasses.replace(cfg, units_line_split=True)
    split_docs = build_pair.encode_sources(tok, texts, lines)
    by_line = {p: [i for ln in p.splitlines(keepends=True) for i in tok.encode(ln).ids]
               for p in pieces}
    assert [d for d in split_docs if tok.decode(d[:-1]) != src] == [
        [*by_line[tok.decode(d[:-1])], eos] for d in docs if tok.decode(d[:-1]) != src]
    assert [d for d in split_docs if tok.decode(d[:-1]) == src] == [
        d for d in docs if tok.decode(d[:-1]) == src]
    assert build_pair.PRESETS["h200-code-units-lines"] == dataclasses.replace(
        build_pair.PRESETS["h200-code-units"], units_line_split=True)


def test_1b_preset_code_path_has_grouped_kv_heads_and_fits_its_schedule_to_the_budget(
        tmp_path, monkeypatch):
    from transformers import AutoConfig

    # A budget far shorter than the step count asks: the schedule (and its LR decay) is
    # fitted to the steps the budget holds, not cut off mid-schedule.
    build(tmp_path / "a", monkeypatch, preset="h200-1b", num_layers=4, num_heads=4,
          num_kv_heads=2, aux_layers=(1, 2, 3), target_steps=100_000, head_steps=100_000,
          target_budget_s=3.0, head_budget_s=2.0, val_tokens=500, draft_vocab_size=512)
    target = AutoConfig.from_pretrained(tmp_path / "a" / "target")
    assert (target.num_attention_heads, target.num_key_value_heads) == (4, 2)
    info = json.loads((tmp_path / "a" / "build_info.json").read_text())
    assert info["target_parameters"] > 0
    for phase in ("target", "head"):
        done, scheduled = info[phase]["steps_done"], info[phase]["steps_scheduled"]
        assert build_pair.FIT_AFTER < scheduled < 100_000, (phase, scheduled)
        assert done <= scheduled


def test_no_window_starts_inside_a_chat_answer():
    # A toy stream: source (30), chat (12, <|assistant|> = 5 at index 3), source (25),
    # chat (9, <|assistant|> at index 2).
    docs = [[9] * 30, [1, 4, 4, 5, 7, 8, 8, 8, 8, 7, 8, 2], [9] * 25, [1, 4, 5, 7, 8, 8, 7, 8, 2]]
    is_chat, seq_len = [False, True, False, True], 8
    n = sum(map(len, docs))
    allowed = build_pair.window_starts(docs, is_chat, n, seq_len, 5).tolist()
    answers = set(range(34, 42)) | set(range(70, 76))  # after each <|assistant|>
    assert {30, 33, 42} <= set(allowed) and not answers & set(allowed)
    assert allowed == sorted(set(range(n - seq_len - 1)) - answers)
    cfg = dataclasses.replace(build_pair.PRESETS["cpu-5m"], seq_len=seq_len, batch_size=64)
    ids = torch.arange(n)
    x = next(build_pair.batches(ids, cfg, torch.Generator().manual_seed(0),
                                torch.tensor(allowed)))
    assert not answers & set(x[:, 0].tolist())
    # Without a restriction the draws are the earlier builds' exactly.
    gen_a, gen_b = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    starts = torch.randint(0, n - seq_len - 1, (64,), generator=gen_b)
    assert next(build_pair.batches(ids, cfg, gen_a))[:, 0].tolist() == starts.tolist()


def test_fence_targets_without_header_are_counted_and_removed_by_answers_with_header():
    # doc 1 is a transcript: <|assistant|> (id 5) at index 2, closing fence (id 7) at 10.
    docs = [[9] * 20, [1, 4, 5, 7, 8, 8, 8, 8, 8, 8, 7, 2], [9] * 20]
    is_chat, seq_len = [False, True, False], 12
    n = sum(map(len, docs))
    uniform = build_pair.fence_targets_without_header(docs, is_chat, n, seq_len, 5, 7, None)
    # The fence at stream position 30 is a target for starts 19..29; those after
    # <|assistant|> (position 22), 23..29, do not show the header.
    assert uniform == {"chats": 1, "fence_target_windows": 11, "without_header": 7,
                       "share": round(7 / 11, 4)}
    fixed_starts = build_pair.window_starts(docs, is_chat, n, seq_len, 5)
    fixed = build_pair.fence_targets_without_header(docs, is_chat, n, seq_len, 5, 7,
                                                    fixed_starts)
    # Left: the starts 19..22, every one with <|assistant|> in view.
    assert fixed == {"chats": 1, "fence_target_windows": 4, "without_header": 0,
                     "share": 0.0}


def test_stream_only_counts_header_less_fence_targets_on_the_real_pipeline(
        monkeypatch, capsys):
    toy = dataclasses.replace(build_pair.PRESETS["h200-code-answers-with-header"],
                              max_corpus_bytes=300_000, chat_examples=30, threads=1,
                              corpus="stdlib-all", val_tokens=500)
    monkeypatch.setitem(build_pair.PRESETS, "toy", toy)
    monkeypatch.setattr(sys, "argv", ["build_pair.py", "--preset", "toy", "--stream-only",
                                      "--tokenizer", str(TOKENIZER)])
    build_pair.main()
    out = json.loads(capsys.readouterr().out)
    fence = out["fence_targets_without_header"]
    assert out["chat_examples"] == 30 and fence["uniform"]["chats"] == 30
    assert fence["uniform"]["share"] > 0.05
    assert fence["answers_with_header"]["without_header"] == 0
    assert out["allowed_starts"] < out["tokens"]


def test_a_fitted_schedule_keeps_its_warm_up_ramp_when_the_step_count_shrinks():
    w = build_pair.FIT_WARMUP
    assert w > build_pair.FIT_AFTER  # the fit happens inside the ramp
    for step in range(w):  # the same ramp whatever the fitted total
        assert build_pair.lr_at(step, 2000, 1.0, w) == build_pair.lr_at(step, 349, 1.0, w)
    assert build_pair.lr_at(w - 1, 349, 1.0, w) == 1.0
