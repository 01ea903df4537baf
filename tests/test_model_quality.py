"""benchmarks/model_quality.py's verdicts and the README's numbers (pure Python, no engine)."""

from __future__ import annotations

import json

from benchmarks import model_quality as mq
from benchmarks.harness import ROOT


def record(a0: float, a1: float, parse: float, mb: float = 20.0, tok_s: float = 100.0,
           start: float = 60.0) -> dict:
    return {"acceptance": [{"acceptance_length": a0, "tokens_per_s": tok_s},
                           {"acceptance_length": a1, "tokens_per_s": tok_s}],
            "parse": [{"temperature": 0.0, "parse_share": parse},
                      {"temperature": 0.7, "parse_share": parse}],
            "pair_mb": mb, "start_s": start}


def test_verdicts_follow_the_numbers():
    base = record(2.0, 1.0, 0.1)
    good = mq.verdicts(record(2.5, 1.8, 0.5, mb=30.0, tok_s=70.0, start=60.0), base)
    assert all(ok for *_, ok, _ in good) and mq.standing(good) == (7, 4.0)
    bad = mq.verdicts(record(2.49, 1.79, 0.49, mb=30.1, tok_s=69.0, start=61.0), base)
    assert not any(ok for *_, ok, _ in bad)
    # Progress is measured from acceptance 1 (nothing accepted) and a parse share of 0.
    assert mq.standing(mq.verdicts(record(1.0, 1.0, 0.0), None)) == (1, 0.0)


def test_ranking_prefers_more_targets_then_progress():
    res = {"base": record(2.0, 1.0, 0.1), "x": record(2.4, 1.5, 0.3),
           "y": record(2.6, 1.2, 0.0)}
    assert [label for label, _ in mq.ranking(res, "base")] == ["y", "x", "base"]


def test_parse_drops_the_cut_line_only():
    assert mq.parses("def f():\n", "    return 1\n    x = (", finished=False) == (True, 1)
    assert mq.parses("def f():\n", "    return 1\n    x = (", finished=True)[0] is False


def test_a_completion_is_empty_by_what_the_metric_kept():
    """A completion cut inside its first line keeps nothing: it parses as the prompt alone
    and holds no code, whatever the cut-off line had."""
    row = {"prompt": "class A:\n    pass\n", "completion": "\n\n    x = (",
           "finish_reason": "length"}
    assert mq.parses(row["prompt"], row["completion"], finished=False)[0]
    assert mq.kept_code(row) == ""
    assert mq.kept_code({**row, "completion": "x = 1\n    y = ("}) == "x = 1"
    assert mq.kept_code({**row, "finish_reason": "stop"}) == "x = ("


def test_readme_states_the_committed_numbers():
    # The bundled pair's measurement: the run that chose it against the pair it replaced.
    data = json.loads((ROOT / "docs" / "model_quality_awh" / "model_quality.json").read_text())
    assert data["results"][data["candidate"]]["preset"] == json.loads(
        (ROOT / "models" / "tiny-code-llama" / "build_info.json").read_text())["preset"]
    block = mq.readme_block(data, data["candidate"], data["baseline"],
                            "docs/model_quality_awh/model_quality.md")
    readme = (ROOT / "README.md").read_text()
    assert f"{mq.README_BEGIN}\n{block}\n{mq.README_END}" in readme
