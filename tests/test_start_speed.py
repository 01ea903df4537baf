"""benchmarks/start_speed.py's verdicts come from the raw samples (pure Python, no engine)."""

from __future__ import annotations

from benchmarks import start_speed as ss


def phase(new_starts: list[float], old_starts: list[float], new_toks: list[float],
          old_toks: list[float]) -> dict:
    samples, order = [], []
    for rep, row in enumerate(zip(new_starts, old_starts, new_toks, old_toks, strict=True)):
        o = ["new", "old"] if rep % 2 == 0 else ["old", "new"]
        order.append(o)
        vals = {"new": (row[0], row[2]), "old": (row[1], row[3])}
        samples += [{"pair": p, "rep": rep, "position": i, "start_s": vals[p][0],
                     "tokens_per_s": vals[p][1], "loadavg_1m_before": 0.0}
                    for i, p in enumerate(o)]
    return {"cache": "warm", "reps": len(order), "order": order, "samples": samples,
            "discarded": [], "started": "2026-12-03T20:11:07+00:00"}


def test_verdicts_are_the_issue_targets_on_the_ratio_of_medians():
    data = {"new": "new", "old": "old", "phases": {"warm": phase(
        [50, 52, 48, 70, 49], [50, 50, 50, 50, 50], [70, 71, 80, 69, 75],
        [100, 100, 100, 100, 100])}}
    start, toks = ss.checks(data)
    # Median 50 vs 50: "no slower" holds; one slow outlier does not move it.
    assert start["ratio"] == 1.0 and start["met"] is True
    assert start["paired_diff"] == [0, -2, 20, 5]
    assert start["new_better_beyond_spread"] == "within noise"
    # tokens/s: median 71 vs 100 = 0.71 >= 0.7.
    assert toks["ratio"] == 0.71 and toks["met"] is True
    assert toks["new_better_beyond_spread"] == "no"
    data["phases"]["warm"] = phase([51, 52, 53, 54, 55], [50] * 5, [69] * 5, [100] * 5)
    start, toks = ss.checks(data)
    assert start["met"] is False and start["new_better_beyond_spread"] == "no"
    assert toks["met"] is False


def test_report_states_every_start_and_a_missing_cold_phase():
    data = {"new": "new", "old": "old",
            "pairs": {p: {"source": p, "preset": p, "mb": 1.0} for p in ("new", "old")},
            "meta": {"vllm": "x", "cpus": 2, "machine": "m", "date": "d"},
            "phases": {"warm": phase([50, 52, 51, 53, 49], [50] * 5, [70] * 5, [100] * 5)}}
    data["checks"] = ss.checks(data)
    text = "\n".join(ss.report(data))
    assert "| 4 | new old | 49 | 50 | 70 | 100 |" in text
    assert "Cold cache (a user's first start): not measured" in text
    # Each cache state is its own run: the report dates each, not the file as a whole.
    assert "each cache state measured in its own run (warm: started 2026-12-03T20:11:07" in text
