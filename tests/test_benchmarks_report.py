"""docs/benchmarks.md's generator on the committed H200 run sets: speculation ratios pooled
over the 1 B run sets without ever pairing runs of two sets, target 4's verdict following
the data, the probe-overhead reading computed from every repetition. Pure Python over the
raw JSON; no engine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

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

    # With the whole path timed and a served baseline, the scope model of a step is shown
    # for the served ledger only: today's runner V2 path opens no scope on a FULL replay.
    from benchmarks.benchmarks_report import ledger_model

    served = {**cost, "baseline": "abc", "step_cost_us": {"v2_full_k3": {}}, "median_us": {
        "current": cost["median_us"]["a"], "at abc": cost["median_us"]["a"]}}
    assert list(ledger_model(served)[0]) == ["at abc"] and ledger_model(served)[1]
    assert list(ledger_model({**served, "step_cost_us": {}})[0]) == ["current", "at abc"]


def test_probe_toggle_pairs_windows_within_groups_and_drops_cells_the_client_broke():
    """The in-server probe cost: each group's 'on' against the same group's 'off', and a
    cell whose load generator had failures is no evidence either way."""
    from benchmarks import probe_toggle as pt

    # The first device run: its load generator (httpx) broke at c=128.
    raw = json.loads((DATA.parent / "probe_toggle" / "run1_httpx" / "probe_toggle.json")
                     .read_text())
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
    # The A/A reading: consecutive groups' 'off' windows, nothing switched between them.
    offs = [w["tok_s"] for w in sorted(one["windows"], key=lambda w: w["group"])
            if w["state"] == "off"]
    assert pt.null_overheads(one) == [100 * (1 - offs[i + 1] / offs[i])
                                      for i in range(len(offs) - 1)]
    assert len(pt.null_overheads(one)) == raw["meta"]["groups"] - 1


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


def test_target1_cause_reads_instance_offsets_and_both_clocks():
    """The cause attached to a specgw / vllm serve gap: the larger offset between two
    identical processes of one server in the same run set, and (at c=1) where the
    inter-token latency difference sits, each clock against its own instance floor."""
    import statistics

    from benchmarks.benchmarks_report import (
        clock_diffs,
        clock_reading,
        deficit_cause,
        instance_floor,
        itl_floor,
        process_cells,
        process_summary,
    )

    rs = RunSet.load(DATA / "run5_instance")
    st = pair_stats(rs)
    floor = instance_floor(st, 1)
    assert floor == max(abs(st[(a, b, 1)]["ratio"].median - 1)
                        for a, b in (("specgw-2", "specgw"), ("vllm-2", "vllm")))

    def med(v: str, key: tuple[str, str]) -> float:
        return statistics.median(rs.record_values(v, 1, *key))

    client, engine = clock_diffs(rs, "specgw", "vllm", 1)
    for got, key in ((client, ("bench", "mean_itl_ms")),
                     (engine, ("engine_timing", "itl_mean_ms"))):
        # Each clock against vllm serve's own reading on the same clock.
        assert got == 100 * (med("specgw", key) - med("vllm", key)) / med("vllm", key)
    inst = [clock_diffs(rs, a, b, 1) for a, b in (("specgw-2", "specgw"), ("vllm-2", "vllm"))]
    assert itl_floor(rs, 1) == (max(abs(d[0]) for d in inst), max(abs(d[1]) for d in inst))
    gap = abs(st[("specgw", "vllm", 1)]["ratio"].median - 1)
    cause = deficit_cause(rs, st, 1)
    assert (("not resolved against" if gap <= floor else "beyond") + " the larger") in cause
    assert "engine core's clock" in cause and "TTFT" not in cause
    # Under load the clocks are not read; the paired TTFT and TPOT are given instead.
    assert "engine core's clock" not in deficit_cause(rs, st, 64)
    assert "paired medians: TTFT p50" in deficit_cause(rs, st, 64)
    assert clock_reading((1.0, -1.0), (2.0, 2.0)).endswith("not resolved against that")
    assert "already there" in clock_reading((8.0, 7.0), (2.0, 2.0))
    assert "added after the engine core" in clock_reading((8.0, 1.0), (2.0, 2.0))
    assert "disagree in sign" in clock_reading((-9.0, 12.0), (2.0, 2.0))
    assert clock_reading((8.0, 7.0), (9.0, 9.0)).endswith("not resolved against that")
    # A run set without instance pairs or the engine's clock has no cause to give.
    old = RunSet.load(DATA / "run4_speed")
    assert instance_floor(pair_stats(old), 1) is None and itl_floor(old, 1) is None
    assert deficit_cause(old, pair_stats(old), 1) == ""
    assert process_summary(process_cells([old])) == ""
    sets = [old, rs, RunSet.load(DATA / "run6_instance")]
    within = below = 0
    for s in sets:
        for c in s.conc():
            r = pair_stats(s)[("specgw", "vllm", c)]["ratio"].median
            below += r < 1
            if (f := instance_floor(pair_stats(s), c)) is not None:
                within += abs(r - 1) <= f
    text = process_summary(process_cells(sets))
    assert text.startswith(f"specgw / vllm serve is below 1 in {below} of 12 ")
    assert text.endswith(f"larger median offset in {within} of 8 cells")
    assert "over 3 run sets" in text
    assert "over 3 run sets" in process_summary(process_cells([*sets, rs]))


def test_host_line_names_only_the_run_sets_that_recorded_the_host():
    from benchmarks.benchmarks_report import host_line

    old, new = RunSet.load(DATA / "run4_speed"), RunSet.load(DATA / "run5_instance")
    assert host_line([old]) == ""
    text = host_line([old, new])
    assert "`run5_instance`: 16 CPUs, 1 socket(s), 1 NUMA node(s), hypervisor KVM" in text
    assert "run4_speed" not in text and "One NUMA node and one socket" in text
    new.meta = {**new.meta, "host": {"lscpu": "unavailable: [Errno 2] lscpu"}}
    assert host_line([new]) == ""


def test_ttft_and_resolution_causes_follow_the_pairs():
    from benchmarks.benchmarks_report import resolution_cause, ttft_cause
    from benchmarks.report import Spread

    assert ttft_cause([0.2, 0.5, 0.9]) is None
    assert "consistent cost" in ttft_cause([1.5, 2.0, 3.0])
    mixed = ttft_cause([0.5, 2.0, 3.0])
    assert mixed.startswith("2 of 3 paired repetitions add 1 ms or more (up to +3.0 ms)")
    assert "the other 1 do not (down to +0.5 ms)" in mixed
    over = {1: Spread.of([-5.0, 2.0, 9.0]), 16: Spread.of([2.0, 3.0, 4.0]),
            64: Spread.of([-1.0, 0.0, 0.5])}
    text = resolution_cause(over, "groups")
    assert "at c=1 the groups straddle 1% with error bars 14 points wide" in text
    assert "at c=16 every one of the groups is above 1%" in text
    assert resolution_cause({64: over[64]}, "groups") is None


def test_balance_under_load_counts_cells_and_checks_them_against_instance_pairs():
    from benchmarks.benchmarks_report import LOADED, balance_lines

    sets = [RunSet.load(DATA / s) for s in ("run4_speed", "run5_instance")]
    lower = longer = beyond = 0
    for rs in sets:
        st = pair_stats(rs)
        for c in LOADED:
            s = st[("specgw", "vllm", c)]
            lower += s["ttft_add"].median < 0
            longer += s["tpot_ratio"].median > 1
            inst = [st[(*p, c)]["ttft_add"].median for p in (("specgw-2", "specgw"),
                                                              ("vllm-2", "vllm"))
                    if (*p, c) in st]
            beyond += bool(inst) and all(abs(s["ttft_add"].median) > abs(x) for x in inst)
    text = balance_lines(sets)[-1]
    assert text.startswith(f"specgw's first token comes earlier in {lower} of 4 cells and its "
                           f"decode is slower per token in {longer} of 4")
    assert f"in {beyond} of 2 cells with identical processes" in text
    assert balance_lines([RunSet.load(DATA / "run3_1b_a")]) == []


def test_stage_lines_split_specgws_earlier_first_token_on_vllms_clocks(tmp_path):
    """Under load, the client's TTFT per term (RunSet.ttft_stages), specgw against vllm
    serve, the largest term named and checked against two identical processes, and the
    engine steps likewise; run sets without vLLM's stage timing give nothing, and the
    balance sentence then says so."""
    from benchmarks.benchmarks_report import LOADED, STAGE_TERMS, balance_lines, stage_lines

    old, rs = RunSet.load(DATA / "run5_instance"), RunSet.load(DATA / "run7_pinned")
    assert stage_lines([old]) == []
    assert balance_lines([old])[-1].endswith("sets them apart was not measured.")
    assert balance_lines([old, rs])[-1].endswith("balances of prefill and decode.")
    text = stage_lines([old, rs])
    mains, beyond, fewer = [], 0, 0
    for c in LOADED:
        s, v = rs.ttft_stages("specgw", c), rs.ttft_stages("vllm", c)
        diff = {k: s[k] - v[k] for k, _ in STAGE_TERMS}
        main = max(diff, key=lambda k: abs(diff[k]))
        mains.append(main)
        inst = [abs(rs.ttft_stages(a, c)[main] - rs.ttft_stages(b, c)[main])
                for a, b in (("specgw-2", "specgw"), ("vllm-2", "vllm"))]
        beyond += abs(diff[main]) > max(inst)
        fewer += s["steps"] < v["steps"]
        row = next(ln for ln in text if ln.startswith(f"| run7_pinned | {c} |"))
        term = "outside_core"
        assert f"| {s[term]:.0f} / {v[term]:.0f} ({diff[term]:+.0f}) |" in row
        assert f"| {max(inst):.0f} | {s['steps']:.0f} / {v['steps']:.0f} |" in row
    summary = text[-1]
    if len(set(mains)) == 1:
        assert f"the largest term is '{dict(STAGE_TERMS)[mains[0]]}' in 2 of 2" in summary
    assert f"between two identical processes in {beyond} of 2 cells" in summary
    assert f"fewer steps for specgw in {fewer} of 2 cells" in summary
    # Prefill made the largest term at c=128 only: the cells then disagree.
    src = tmp_path / "run7_pinned"
    shutil.copytree(DATA / "run7_pinned", src)
    for f in (src / "runs").glob("specgw_c128_*.json"):
        r = json.loads(f.read_text())
        r["engine_timing"]["prefill_mean_ms"] += 1000.0
        r["engine_timing"]["ttft_mean_ms"] += 1000.0
        r["bench"]["mean_ttft_ms"] += 1000.0
        f.write_text(json.dumps(r))
    assert "the largest term differs between cells" in stage_lines([RunSet.load(src)])[-1]


def test_pinning_line_compares_instance_offsets_of_pinned_and_unpinned_sets():
    from benchmarks.benchmarks_report import instance_floor, pinning_line, process_cells

    old, pinned = RunSet.load(DATA / "run5_instance"), RunSet.load(DATA / "run7_pinned")
    assert pinning_line(process_cells([old])) == ""
    on = [100 * instance_floor(pair_stats(pinned), c) for c in pinned.conc()]
    off = [100 * instance_floor(pair_stats(old), c) for c in old.conc()]
    text = pinning_line(process_cells([old, pinned]))
    assert f"`run7_pinned` (3 CPUs per server): {min(on):.1f}-{max(on):.1f}" in text
    assert f"not pinned: {min(off):.1f}-{max(off):.1f}" in text
    assert ("overlap" in text) == (max(on) >= min(off))
    # The same cells, the pinned offsets scaled below every unpinned one.
    cells = [(rs, c, r, f * (min(off) / max(on) / 2 if rs is pinned else 1), inst)
             for rs, c, r, f, inst in process_cells([old, pinned])]
    assert "every pinned cell is below every unpinned one" in pinning_line(cells)
    cells = [(rs, c, r, f * (2 * max(off) / min(on) if rs is pinned else 1), inst)
             for rs, c, r, f, inst in process_cells([old, pinned])]
    assert "every pinned cell is above every unpinned one" in pinning_line(cells)


def test_engine_steps_are_compared_only_where_both_servers_took_the_same_steps(tmp_path):
    from benchmarks.benchmarks_report import (
        SAME_STEPS,
        engine_step_lines,
        engine_step_order,
        engine_steps,
    )

    sets = [RunSet.load(DATA / s) for s in ("run5_instance", "run6_instance", "run7_pinned")]
    expect = []
    for rs in sets:
        for c in rs.conc():
            got = {v: engine_steps(rs, v, c) for v in ("specgw", "specgw-2", "vllm", "vllm-2")}
            same = max(abs(e[0] / got["vllm"][0] - 1) for e in got.values()) <= SAME_STEPS
            o = engine_step_order(rs, c)
            assert (o is not None) == same
            if same and c != 1:
                longer = (min(got["specgw"][1], got["specgw-2"][1])
                          > max(got["vllm"][1], got["vllm-2"][1]))
                assert o[0] == pytest.approx(100 * (got["specgw"][1] / got["vllm"][1] - 1))
                assert o[1] == longer
                expect.append(longer)
    assert expect, "the committed run sets have loaded cells with the same engine steps"
    text = engine_step_lines([RunSet.load(DATA / "run4_speed"), *sets])[0]
    assert f"in {sum(expect)} of the {len(expect)} cells with two processes" in text
    assert "These runs do not say what costs the time" in text
    assert engine_step_lines([RunSet.load(DATA / "run4_speed")]) == []
    # A set with the probes-off server beside specgw: specgw's step against it, where the
    # two took the same steps, from the runs' own engine timing.
    r8 = RunSet.load(DATA / "run8_router")
    text = engine_step_lines([r8])[0]
    for c in r8.conc():
        a, b = engine_steps(r8, "specgw", c), engine_steps(r8, "specgw-probes-off", c)
        if abs(a[0] / b[0] - 1) <= SAME_STEPS:
            assert f"`run8_router` c={c} ({100 * (a[1] / b[1] - 1):+.1f}%)" in text
    assert "specgw-probes-off`, same set): `run8_router` c=16" in text
    assert "These runs do not say" not in text
    # One server taking 10% more steps at c=16: its batches differ, so no comparison.
    src = tmp_path / "run7_pinned"
    shutil.copytree(DATA / "run7_pinned", src)
    for f in (src / "runs").glob("vllm-2_c16_*.json"):
        r = json.loads(f.read_text())
        r["engine_timing"]["iterations"] *= 1.1
        f.write_text(json.dumps(r))
    assert engine_step_order(RunSet.load(src), 16) is None


def test_router_own_clock_verdict_reads_the_runs_p50s_and_their_bucket():
    """Target 3 on the router's histogram: met where the runs' p50s lie in buckets below
    1 ms, not met where their buckets lie at or above it, and "cannot tell" where the
    median's bounds straddle it, an even number of runs included (the median of two p50s
    in different buckets is known only between their buckets' bounds)."""
    from benchmarks.benchmarks_report import bucket_of, router_clock_rows

    assert bucket_of(1.0) == (0.5, 1.0) and bucket_of(1.0001) == (1.0, 2.5)
    assert bucket_of(0.05) == (0.0, 0.1)
    assert bucket_of(1000.0) == (250.0, float("inf"))  # the +Inf bucket reads as its floor
    rs = RunSet.load(DATA.parent.parent / "cpu" / "serve_compare_profile_run2")
    assert router_clock_rows(rs, 64) == []  # that CPU run ran c=1 and 8 only
    runs = [r for r in rs.runs("router", 8) if r.get("router_timing")]
    assert len(runs) == 5

    def rows_with(p50s: list[float]) -> list[object]:
        for r, x in zip(runs, p50s, strict=True):
            r["router_timing"]["added_p50_ms"] = x
        [row] = router_clock_rows(rs, 8)
        return row

    row = rows_with([0.3, 0.45, 0.2, 0.9, 0.95])
    assert row[3] == "yes" and row[4] is None and row[2].startswith("0.450 (0.200-0.950)")
    row = rows_with([1.2, 3.0, 0.9, 1.1, 2.0])
    assert row[3] == "**no**" and "between 1 and 2.5 ms" in row[4]
    row = rows_with([0.6, 0.7, 1.5, 2.0, 0.8])  # median 0.8, in (0.5, 1]: met
    assert row[3] == "yes"
    row = rows_with([0.6, 0.7, 1.5, 2.0, 1.2])  # median 1.2, but two of five in (0.5, 1]
    assert row[3] == "**no**"
    runs.pop()["router_timing"] = None  # four runs: two below 1 ms, two above
    [row] = router_clock_rows(rs, 8)
    assert row[3] == "cannot tell" and "between 0.75 and 1.75 ms" in row[4]
    assert row[4].startswith("4 of 5 runs recorded it")


def test_router_rows_place_the_lost_first_byte_on_the_routers_clock():
    """Where target 3 is missed and the router's histograms were recorded, the cause splits
    the client's added mean TTFT, paired by repetition, into the router's time before its
    send, the backend's first byte after it against the direct TTFT, and the rest outside
    the router's clock (the three terms add up to the total in every repetition); without
    the histograms there is no such claim and no own-clock row. A run set from elsewhere
    is marked with its set and device."""
    from benchmarks.benchmarks_report import elsewhere_rows, router_rows
    from benchmarks.report import Spread

    rs = RunSet.load(DATA.parent.parent / "cpu" / "serve_compare_router_c64")
    ratio, ttft, own = router_rows(rs, pair_stats(rs))
    assert ratio[3] == "**no**" and own[3] == "yes"
    direct = {r["rep"]: r["bench"]["mean_ttft_ms"] for r in rs.runs("vllm", 64)}
    total, own, backend, outside = [], [], [], []
    for r in rs.runs("router", 64):
        t = r["router_timing"]
        total.append(r["bench"]["mean_ttft_ms"] - direct[r["rep"]])
        own.append(t["added_mean_ms"])
        backend.append(t["backend_ttfb_mean_ms"] - direct[r["rep"]])
        outside.append(r["bench"]["mean_ttft_ms"] - t["added_mean_ms"]
                       - t["backend_ttfb_mean_ms"])
    assert len(total) == 5
    assert all(abs(a - b - c - d) < 1e-9
               for a, b, c, d in zip(total, own, backend, outside, strict=True))
    # Which term is the largest, per repetition, counted from the same values.
    largest = sum(o > max(b, w) for o, b, w in zip(outside, own, backend, strict=True))
    for text in (f"minus the direct one {Spread.of(total).text('{:+.1f}')} ms",
                 f"before its send {Spread.of(own).text('{:.2f}')} ms",
                 f"minus the direct mean TTFT {Spread.of(backend).text('{:+.1f}')} ms",
                 f"outside the router's clock {Spread.of(outside).text('{:+.1f}')} ms",
                 f"the largest term in {largest} of 5 repetitions",
                 "a mean, not the p50 of target 3"):
        assert text in ratio[4] and text in ttft[4]
    [marked] = [r for r in elsewhere_rows([rs]) if r[1].startswith(str(ratio[1]))]
    assert marked[1].endswith(f"[`{rs.label}`, {rs.meta['device_name']}]")
    for r in rs.runs("router", 64):
        r["router_timing"] = None
    ratio, ttft = router_rows(rs, pair_stats(rs))
    assert ratio[4] is None and "by means" not in ttft[4]


def test_a_run_set_named_twice_is_read_once():
    """``--router`` may also be an ``--earlier``: one directory, loaded twice, counts once
    (and the oldest comes first)."""
    from benchmarks.benchmarks_report import by_date

    r8, r7 = RunSet.load(DATA / "run8_router"), RunSet.load(DATA / "run7_pinned")
    got = by_date([r8, r7, RunSet.load(DATA / "run8_router")])
    assert [rs.label for rs in got] == ["run7_pinned", "run8_router"]


def test_plugin_split_divides_the_gap_into_the_plugin_and_the_gateway(tmp_path):
    """A set with ``vllm-plugin`` (here run9_stock's second vllm serve renamed, so its ratios
    are known): each part's paired ratio, which is larger, and its place in target 1's
    cause for the cells specgw missed."""
    from benchmarks.benchmarks_report import document, plugin_split

    src = tmp_path / "split"
    shutil.copytree(DATA / "run9_stock", src)
    for f in (src / "runs").glob("vllm-2_*.json"):
        r = json.loads(f.read_text())
        r["variant"] = "vllm-plugin"
        (src / "runs" / f.name.replace("vllm-2", "vllm-plugin")).write_text(json.dumps(r))
        f.unlink()
    meta = json.loads((src / "servers.json").read_text())
    meta["protocol"]["variants"] = [v if v != "vllm-2" else "vllm-plugin"
                                    for v in meta["protocol"]["variants"]]
    (src / "servers.json").write_text(json.dumps(meta))
    rs = RunSet.load(src)
    st = pair_stats(rs)
    for c in rs.conc():
        plug = st[("vllm-plugin", "vllm", c)]["ratio"]
        front = st[("specgw", "vllm-plugin", c)]["ratio"]
        text = plugin_split(rs, st, c)
        assert f"(vllm-plugin / vllm) {plug.text('{:.3f}')}" in text
        assert f"(specgw / vllm-plugin) {front.text('{:.3f}')}" in text
        larger = "the plugin" if abs(plug.median - 1) > abs(front.median - 1) else "the gateway"
        assert f"the larger part is {larger}" in text
    assert plugin_split(RunSet.load(DATA / "run9_stock"),
                        pair_stats(RunSet.load(DATA / "run9_stock")), 1) == ""
    serve = RunSet.load(DATA / "run9_stock")
    lines = document(serve, [], None, tmp_path / "b.md", [], split=[rs])
    row = next(ln for ln in lines if ln.startswith("| 1 | specgw / vllm serve output"))
    missed = [c for c in serve.conc()
              if pair_stats(serve)[("specgw", "vllm", c)]["ratio"].median < 1]
    assert missed and row.count("`split`: split by vllm serve with specgw's plugin") == len(
        missed)
    assert any(ln.startswith("### Target 1 split") and "`split`" in ln for ln in lines)
