"""docs/benchmarks.md's generator on the committed H200 run sets: speculation ratios pooled
over the 1 B run sets without ever pairing runs of two sets, target 4's verdict following
the data, the probe-overhead reading computed from every repetition. Pure Python over the
raw JSON; no engine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from benchmarks.benchmarks_report import (
    T_PROBES,
    T_SPEC,
    pooled,
    probe_overhead,
    probe_reading,
    spec_verdicts,
)
from benchmarks.serve_compare_data import RunSet
from benchmarks.serve_compare_report import pair_stats

DATA = Path(__file__).resolve().parent.parent / "docs" / "gpu" / "serve_compare"
SETS = ("run3_1b_a", "run3_1b_b")


def load(root: Path = DATA) -> list[RunSet]:
    return [RunSet.load(root / s) for s in SETS]


def test_a_repetition_split_across_run_sets_is_not_paired():
    a, b = load()
    # c=32 rep 1: speculation ran in the first set, no-speculation only in the resumed one.
    assert any(r["rep"] == 1 for r in a.runs("vllm", 32))
    assert not any(r["rep"] == 1 for r in a.runs("vllm-nospec", 32))
    assert any(r["rep"] == 1 for r in b.runs("vllm-nospec", 32))
    assert not any(r["rep"] == 1 for r in b.runs("vllm", 32))
    assert len(pooled([a, b], "vllm", "vllm-nospec", 32)) == 4
    assert len(pooled([a, b], "vllm", "vllm-nospec", 1)) == 5


def test_speculation_verdict_follows_the_data(tmp_path: Path):
    def row(sets: list[RunSet]) -> list:
        return next(r for r in spec_verdicts(sets)[0] if r[1] == str(T_SPEC))

    assert row(load())[3] == "**no**"
    for s in SETS:
        shutil.copytree(DATA / s, tmp_path / s)
    for f in tmp_path.glob("*/runs/vllm_c1_r*.json"):  # speculation twice as fast
        r = json.loads(f.read_text())
        r["bench"]["output_throughput"] *= 2
        f.write_text(json.dumps(r))
    assert row(load(tmp_path))[3] == "yes"


def test_probe_reading_is_computed_from_every_repetition():
    rs = RunSet.load(DATA / "run3")
    over = probe_overhead(rs, pair_stats(rs))
    reading = dict(zip(over, probe_reading(rs, pair_stats(rs)), strict=True))
    for c, s in over.items():
        shown = s.lo > T_PROBES.threshold
        assert ("an overhead is shown" in reading[c]) == shown, (c, s)
        assert ("not resolved" in reading[c]) == (s.lo <= T_PROBES.threshold < s.hi), (c, s)


def test_probe_bookkeeping_share_is_cost_per_step_over_the_step_without_probes():
    from benchmarks.benchmarks_report import probe_cost_lines

    rs = RunSet.load(DATA / "run3")
    cost = {"median_us": {"a": {"forward_scope": 10.0, "propose_2_forwards": 30.0,
                                "piece": 1.0}},
            "reps": 1, "n": 1, "date": "-", "machine": {"cpu_count": 2, "cpu": "x",
                                                       "python": "3"}}
    rows = [ln for ln in probe_cost_lines(rs, cost) if ln.startswith("| 16 |")]
    tpot = sorted(rs.values("specgw-probes-off", 16, "median_tpot_ms"))[2]
    al = sorted(r["server_acceptance"]["acceptance_length"]
                for r in rs.runs("specgw-probes-off", 16))[2]
    assert rows == [f"| 16 | {1000 * tpot * al:.0f} | {100 * 40 / (1000 * tpot * al):.2f}% |"]


def test_probe_toggle_pairs_windows_within_groups_and_drops_cells_the_client_broke():
    """The in-server probe cost: each group's 'on' against the same group's 'off', and a
    cell whose load generator had failures is no evidence either way."""
    from benchmarks import probe_toggle as pt

    raw = json.loads((DATA.parent / "probe_toggle" / "probe_toggle.json").read_text())
    by_c = {cd["concurrency"]: cd for cd in raw["cells"]}
    one = by_c[1]
    g0 = {w["state"]: w["tok_s"] for w in one["windows"] if w["group"] == 0}
    assert pt.overheads(one, "on")[0] == 100 * (1 - g0["on"] / g0["off"])
    assert len(pt.overheads(one, "on")) == raw["meta"]["groups"]
    assert pt.invalid(by_c[128]) and not pt.invalid(one)
    assert 128 not in pt.overhead_spreads(raw, "on") and 1 in pt.overhead_spreads(raw, "on")
    assert "c=128 not valid" in pt.verdict_text(raw)
    # A cell with no client errors is judged on its median.
    clean = {**raw, "cells": [one]}
    med = pt.overhead_spreads(clean, "on")[1].median
    assert pt.verdict_text(clean).startswith("yes" if med <= 1 else "**no**")


def test_probe_path_share_and_verdict_are_computed_from_the_step():
    from benchmarks.benchmarks_report import PROBE_PATH_LIMIT, probe_path_lines, probe_steps_us

    rs = RunSet.load(DATA / "run3")
    steps = probe_steps_us(rs)
    low = min(steps.values())

    def cost(hi_us: float) -> dict:
        path = {"median": 1.0, "min": 0.5, "max": hi_us, "bare_median": 0.1, "per_rep": []}
        return {"step_cost_us": {"v2_full_k3": path}, "reps": 9, "step_n": 1,
                "machine": {"cpu_count": 2}}

    lines = probe_path_lines(rs, cost(2.0))
    c0, st0 = next(iter(steps.items()))
    assert f"| {c0} | {st0:.0f} | {100 / st0:.2f}% ({50 / st0:.2f}-{200 / st0:.2f}%) |" in lines
    assert any("at or below" in ln for ln in lines)
    over = probe_path_lines(rs, cost(1.01 * PROBE_PATH_LIMIT / 100 * low))
    assert any(f"above {PROBE_PATH_LIMIT:g}%" in ln for ln in over)


def test_c1_step_gap_is_computed_within_each_run_set():
    import statistics

    from benchmarks.benchmarks_report import c1_step_lines

    sets = [RunSet.load(DATA / s) for s in ("run1", "run3")]
    text = "\n".join(c1_step_lines(sets, None))
    for rs in sets:
        gap = 1000 * (statistics.median(rs.values("specgw", 1, "median_itl_ms"))
                      - statistics.median(rs.values("specgw-probes-off", 1, "median_itl_ms")))
        assert f"`{rs.label}` {gap:+.0f} us" in text
    # Without a timed probe path there is nothing to compare the gap with.
    assert "does not account" not in text
