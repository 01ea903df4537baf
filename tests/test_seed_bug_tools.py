"""The seed-bug tools: SpecgwDrafterEagerFallback in Prometheus's own rule engine
(``promtool test rules``), fed the way ``benchmarks/seed_bug_alert.py`` feeds it a recorded
run (a silent eager counter that grows must fire the alert one evaluation interval after
the first evaluation that sees it; a flat one never), and the report's verdicts."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "seed_bug_alert.py"
SERIES = 'specgw_silent_eager_forwards_total{{model="pair",phase="{}",rank="0",role="draft"}}'


def recorded(run: str, silent: list[float], t0: float = 1_700_000_000.0) -> dict:
    """A run JSON as seed_bug_gpu.py writes it: one scrape a second."""
    scrapes = [{"t": t0 + i + 0.02 * (i % 3), "values": {
        SERIES.format("first_pass"): v,
        SERIES.format("draft_step"): 2 * v,
        'specgw_model_forwards_total{model="pair",phase="first_pass",rank="0",role="draft"}':
            10.0 * i,
    }} for i, v in enumerate(silent)]
    return {"run": run, "model": "pair", "ok": True, "scrapes": scrapes}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_alert_fires_on_growth_and_stays_quiet_without(tmp_path):
    grows_at = 13
    bug = [0.0] * grows_at + [5.0 * (i + 1) for i in range(12)]
    (tmp_path / "v1_b.json").write_text(json.dumps(recorded("v1_b", bug)))
    (tmp_path / "v1_a.json").write_text(json.dumps(recorded("v1_a", [0.0] * 25)))
    proc = subprocess.run([sys.executable, str(SCRIPT), "--runs", str(tmp_path),
                           "--openmetrics"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads((tmp_path / "alert_check.json").read_text())
    assert res["v1_a"]["ok"] and res["v1_a"]["fires"] is False
    b = res["v1_b"]
    # grown at the 13th scrape (13.02 s: held from the 14 s grid point)
    assert b["ok"] and b["fires"] and b["growth_s"] in (grows_at, grows_at + 1)
    # group interval 10 s: first evaluation at/after the growth is 20 s, firing one later.
    assert (b["first_eval_seeing_s"], b["fires_at_s"]) == (20, 30)
    assert b["fires_at_s"] - b["first_eval_seeing_s"] == b["interval_s"]
    om = (tmp_path / "v1_b.om").read_text()
    assert om.endswith("# EOF\n") and "# TYPE specgw_silent_eager_forwards counter" in om


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_a_wrong_expectation_fails(tmp_path):
    """The check can fail: shift the growth by one interval and promtool disagrees."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import seed_bug_alert as sba

    run = recorded("v1_b", [0.0] * 13 + [5.0 * (i + 1) for i in range(12)])
    series, n = sba.grid(run["scrapes"])
    group, rule = sba.alert_rule()
    growth = sba.first_growth(series, n)
    assert sba.promtool_test(series, n, growth, group, rule, "pair")["ok"]
    assert not sba.promtool_test(series, n, growth - 10, group, rule, "pair")["ok"]
    assert not sba.promtool_test(series, n, None, group, rule, "pair")["ok"]


def _series(name: str, phase: str, **extra: str) -> str:
    labels = {"model": "pair", "phase": phase, "rank": "0", "role": "draft", **extra}
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _run(case: str, graph_per_s: float, silent_per_s: float, tps: list[float]) -> dict:
    scrapes = []
    for i in range(6):
        g, s = graph_per_s * i, silent_per_s * i
        scrapes.append({"t": 100.0 + i, "values": {
            _series("specgw_model_forwards_total", "first_pass"): g + s,
            _series("specgw_cudagraph_replayed_forwards_total", "first_pass",
                    mode="piecewise"): g,
            _series("specgw_eager_forwards_total", "first_pass", mode="piecewise"): s,
            _series("specgw_silent_eager_forwards_total", "first_pass"): s,
            _series("specgw_cudagraph_pieces_replayed_total", "first_pass"): 2 * g,
            _series("specgw_cudagraph_pieces_expected_total", "first_pass"): 2 * (g + s),
        }})
    return {"run": f"v1_{case}", "runner": "v1", "case": case, "ok": True, "scrapes": scrapes,
            "rounds": [{"tokens_per_s": t, "warmup": False} for t in tps],
            "self_check": {"warnings": ["drafter not compiled"] if case == "b" else []}}


def test_report_verdicts_follow_the_data():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import seed_bug_report as rep

    a = rep.summarize_run(_run("a", 10, 0, [1000, 1010, 990]))
    b = rep.summarize_run(_run("b", 0, 10, [600, 610, 590]))
    c = rep.summarize_run(_run("c", 10, 0, [1005, 995, 1000]))
    assert a["draft"]["piece_coverage"] == 1.0 and a["draft"]["hit_ratio"] == 1.0
    assert b["draft"]["hit_ratio"] == 0 and b["draft"]["silent_eager"] == 50
    assert b["silent_growth"] == {"active_intervals": 5, "silent_grew_intervals": 5}
    good = dict(rep.verdicts("v1", {"a": a, "b": b, "c": c}, {}))
    assert all(good.values()), good
    # (c) still broken: the verdicts must say so.
    bad_c = rep.summarize_run(_run("c", 5, 5, [800, 790, 810]))
    bad = dict(rep.verdicts("v1", {"a": a, "b": b, "c": bad_c}, {}))
    assert not bad["(c) bug, fix on: piece coverage 1.000, silent eager 0"]
    assert not bad["(c) bug, fix on: tokens/s back to (a) within noise"]
