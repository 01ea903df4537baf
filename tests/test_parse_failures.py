"""benchmarks/parse_failures.py: the failure classes follow the text, and the metric is
model_quality's own (pure Python, no engine)."""

from __future__ import annotations

import json

from benchmarks import model_quality as mq
from benchmarks import parse_failures as pf
from benchmarks.harness import ROOT


def test_classes_follow_the_text():
    fence = pf.classify('def f(x):\n    """Doc."""\n', "```\n", finished=True)
    assert fence["class"] == pf.FENCE and fence["longest_parsing_prefix"] == 0
    cut = pf.classify("def f(x):\n", "    y = g(1,\n          2,\n    3", finished=False)
    assert cut["class"] == pf.CUT and cut["structure"] == "open bracket"
    assert cut["longest_parsing_prefix"] is None  # "def f(x):" alone has no body
    doc = pf.classify("def f(x):\n", '    """Doc\n    more\n    x', finished=False)
    assert doc["structure"] == "unterminated string or docstring"
    header = pf.classify("def f(x):\n", "    return x\n\ndef g(y):\n    if y:\n    z",
                         finished=False)
    assert header["structure"] == "block header without a body"
    assert header["longest_parsing_prefix"] == 2 and header["ends_at"] == "token limit"
    bad = pf.classify("def f(x):\n", "    return x +* 2\n", finished=True)
    assert bad["class"] == pf.SYNTAX and bad["error_lineno_in_completion"] == 1
    ok = pf.classify("def f(x):\n", "    return x\n    y = (", finished=False)
    assert ok["class"] == "parses" and ok["ends_at"] == "token limit"


def test_the_metric_is_model_qualitys():
    lines = "".join(f"    x{i} = {i}\n" for i in range(30))
    for completion, finished in ((lines, False), (lines[:-1], True), ("    x = [\n" + lines,
                                                                     False)):
        row = pf.classify("def f():\n", completion, finished)
        ok, kept = mq.parses("def f():\n", completion, finished)
        assert (row["class"] == "parses") == ok and row["lines_kept"] == kept
    assert pf.classify("def f():\n", lines, False)["ends_at"] == "20-line cut"


def test_committed_report_matches_the_raw_completions():
    out = json.loads((ROOT / "docs" / "model_quality_parse.json").read_text())
    data = json.loads((ROOT / out["source"]).read_text())
    rows = pf.model_rows(data, out["label"])
    assert [r["class"] for r in rows] == [r["class"] for r in out["completions"]]
    for m in out["metric"]:
        assert sum(r["class"] == "parses" for r in rows
                   if r["temperature"] == m["temperature"]) == m["parses"]
