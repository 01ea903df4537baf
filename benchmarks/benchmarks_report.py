"""``docs/benchmarks.md``: issue #14's five targets, each checked in code against the raw
``serve_compare.py`` run sets, led by specgw serve vs vllm serve and the probe overhead
with its error bars; then the router, and speculation vs none on the device-built 1 B
target with the piecewise drafter vs the eager one.

Run sets (one ``serve_compare.py --out`` directory each, see ``serve_compare_data.py``):

* ``--serve``: the bundled pair with ``specgw``, ``vllm``, ``specgw-probes-off`` and
  ``router`` (targets 1-3);
* ``--spec`` (repeatable): the 1 B pair with ``vllm-nospec``, ``vllm`` and, where run,
  ``vllm-v1-piecewise`` / ``vllm-v1-eager-draft`` (target 4). A ratio divides two runs of
  the same repetition and concurrency of one run set; the pairs of several sets are pooled
  (a repetition that a second set resumed pairs only with runs of that set).

``python -m benchmarks.benchmarks_report`` (defaults: the committed run sets). The
in-process engine vs gateway sweep on the 150 M pair is ``docs/gpu_bench.md``
(``gpu_bench_report.py``); every run set of the bundled pair side by side is
``docs/serve_compare.md`` (``serve_compare_report.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks import probe_alternate_data, probe_toggle
from benchmarks.report import Spread, Target, md_table, num, verdict, write
from benchmarks.serve_compare_data import RunSet
from benchmarks.serve_compare_report import (
    INSTANCES,
    T_PROBES,
    T_ROUTER,
    T_ROUTER_OWN,
    T_ROUTER_TTFT,
    T_SPEED,
    T_SPREAD,
    main_table,
    pair_stats,
    plot,
    ratio_table,
    rel_spread,
    reps_meeting,
    router_section,
)
from monitoring.metrics import ADDED_BUCKETS

SC = Path("docs/gpu/serve_compare")
T_SPEC = Target("speculation / no speculation output tok/s at c=1 (median of paired ratios)",
                ">=", 1.8)
T_DRAFT = Target("piecewise drafter / eager drafter output tok/s (median of paired ratios)",
                 ">", 1.0)
Pairs = list[tuple[float, float]]


def pooled(sets: list[RunSet], a: str, b: str, c: int, key: str = "output_throughput") -> Pairs:
    """(a, b) of every repetition both ran, within each run set, over all sets."""
    return [p for rs in sets for p in rs.paired(a, b, c, key)]


def ratios(pairs: Pairs) -> list[float]:
    return [x / y for x, y in pairs if y]


def paired_acceptance(sets: list[RunSet], a: str, b: str, c: int) -> list[float]:
    """``a``'s acceptance lengths (server counters) in the repetitions paired with ``b``."""
    return [ra["server_acceptance"]["acceptance_length"] for rs in sets
            for ra, _ in rs.paired_runs(a, b, c)
            if ra["server_acceptance"].get("acceptance_length")]


def by_date(sets: list[RunSet]) -> list[RunSet]:
    """Each run set once (``--router`` may also be ``--serve`` or an ``--earlier``: one
    directory loaded twice), oldest first."""
    return sorted({rs.src.resolve(): rs for rs in sets}.values(),
                  key=lambda rs: rs.meta["date"])


def concurrencies(sets: list[RunSet]) -> list[int]:
    return sorted({c for rs in sets for c in rs.conc()})


# ------------------------------------------------------------------- targets 1 to 3
def serve_rows(rs: RunSet, st: dict, sets: list[RunSet],
               split: Sequence[RunSet] = ()) -> list[list[object]]:
    """Targets 1 and 2 (across processes) in ``rs``; ``sets`` (every run set of the bundled
    pair) for the reading of target 1 over process offsets; ``split``: run sets with the
    ``vllm-plugin`` server, whose split of each missed cell is added to its cause."""
    rows: list[list[object]] = []
    speed = {c: s for c in rs.conc() if (s := st.get(("specgw", "vllm", c)))}
    met = [c for c, s in speed.items() if T_SPEED.met(s["ratio"].median)]
    splits = [(x, pair_stats(x)) for x in split]

    def cause(c: int) -> str:
        texts = [deficit_cause(rs, st, c),
                 *(f"`{x.label}`: {t}" if (t := plugin_split(x, xst, c)) else ""
                   for x, xst in splits)]
        return "; ".join(t for t in texts if t)

    cell_why = per_cell({c: cause(c) for c in speed if c not in met},
                        "two identical processes of one server")
    speed_why = "; ".join(x for x in (cell_why, process_summary(process_cells(sets)))
                          if x) or None
    rows.append(["1", str(T_SPEED) + " in every cell",
                 "; ".join(f"c={c}: {s['ratio'].text('{:.2f}')}" for c, s in speed.items()),
                 verdict(len(met) == len(speed)) + f" ({len(met)} of {len(speed)} cells)",
                 speed_why])
    spread = {c: (rel_spread(rs.values("specgw", c, "output_throughput")),
                  rel_spread(rs.values("vllm", c, "output_throughput"))) for c in speed}
    ok = [c for c, (a, b) in spread.items() if T_SPREAD.met(a - b)]
    rows.append(["1", str(T_SPREAD) + " in every cell",
                 "; ".join(f"c={c}: specgw {a:.0f}% / vllm {b:.0f}%"
                           for c, (a, b) in spread.items()),
                 verdict(len(ok) == len(spread)) + f" ({len(ok)} of {len(spread)} cells)",
                 per_cell({c: spread_cause(rs, c) for c in spread if c not in ok},
                          "two identical processes of one server")])
    if over := probe_overhead(rs, st):
        ok = [c for c, s in over.items() if T_PROBES.met(s.median)]
        rows.append(["2", str(T_PROBES) + " at every concurrency (two server processes)",
                     "; ".join(f"c={c}: {s.text('{:+.1f}')}" for c, s in over.items()),
                     verdict(len(ok) == len(over)) + f" ({len(ok)} of {len(over)}; error bars "
                     f"{min(s.hi - s.lo for s in over.values()):.0f}-"
                     f"{max(s.hi - s.lo for s in over.values()):.0f} points wide)",
                     resolution_cause(over, "repetitions")])
    return rows


def per_cell(causes: dict[int, str], lacking: str) -> str | None:
    """The cells' causes, or one line saying what the run set lacked to give any."""
    if not causes:
        return None
    if not any(causes.values()):
        return f"no cause this run set can show (it has no {lacking})"
    return "; ".join(f"c={c}: {why or 'not shown'}" for c, why in causes.items())


def spread_cause(rs: RunSet, c: int) -> str:
    """specgw's spread against vllm serve's, next to how far the spreads of two identical
    processes of one server differ in the same run set."""
    gaps = [abs(rel_spread(x) - rel_spread(y)) for a, b in INSTANCES
            if (x := rs.values(a, c, "output_throughput"))
            and (y := rs.values(b, c, "output_throughput"))]
    if not gaps:
        return ""
    d = (rel_spread(rs.values("specgw", c, "output_throughput"))
         - rel_spread(rs.values("vllm", c, "output_throughput")))
    return (f"specgw's spread exceeds vllm serve's by {d:.0f} points, the spreads of two "
            f"identical processes of one server by up to {max(gaps):.0f}: "
            + ("not resolved against that" if d <= max(gaps) else "beyond that"))


def against_target(s: Spread) -> str:
    """'shown' (every sample above the probe target), 'excluded' (every one at or below
    it) or 'straddles'."""
    t = T_PROBES.threshold
    return "shown" if s.lo > t else "excluded" if s.hi <= t else "straddles"


def span_text(values: list[float]) -> str:
    lo, hi = f"{min(values):.0f}", f"{max(values):.0f}"
    return lo if lo == hi else f"{lo}-{hi}"


def resolution_cause(over: dict[int, Spread], unit: str) -> str | None:
    """Why a probe-overhead verdict reads as it does: where the ``unit`` (repetitions,
    groups) straddle the target, the data does not resolve it either way."""
    t = T_PROBES.threshold
    shown = [c for c, s in over.items() if against_target(s) == "shown"]
    straddle = [c for c, s in over.items() if against_target(s) == "straddles"]
    parts = []
    if straddle:
        widths = [over[c].hi - over[c].lo for c in straddle]
        parts.append(f"at c={', '.join(map(str, straddle))} the {unit} straddle {t:g}% with "
                     f"error bars {span_text(widths)} points wide: not "
                     f"resolved at the {t:g}-point level (section 2: the probe path's own CPU "
                     "work per step)")
    if shown:
        parts.append(f"at c={', '.join(map(str, shown))} every one of the {unit} is above "
                     f"{t:g}%: an overhead is shown")
    return "; ".join(parts) or None


def router_rows(rs: RunSet, st: dict) -> list[list[object]]:
    rows = []
    if s := st.get(("router", "vllm", 64)):
        split = own_clock_split(rs)
        slow = None if T_ROUTER.met(s["ratio"].median) else split
        rows = [["3", str(T_ROUTER), s["ratio"].text("{:.2f}"),
                 verdict(T_ROUTER.met(s["ratio"].median)), slow],
                ["3", str(T_ROUTER_TTFT), s["ttft_add"].text("{:+.1f}"),
                 verdict(T_ROUTER_TTFT.met(s["ttft_add"].median)),
                 "; ".join(x for x in (ttft_cause(s["ttft_adds"]), split) if x) or None]]
    # The router's own clock needs no run of the engine alone to pair with.
    return rows + router_clock_rows(rs)


SPLIT_WHERE = {"own": "the router's own time before its send",
               "backend": "the backend's first byte after the router's send (the hop to the "
                          "engine and the engine itself)",
               "outside": "outside the router's clock (the client's hop to it and back, and "
                          "its process's event loop before its handler runs or after it "
                          "reads the first byte)"}


def own_clock_split(rs: RunSet, c: int = 64) -> str | None:
    """Where the router's runs spend their first byte, split by means (a mean of a sum is
    the sum of the means; p50s do not add up): per paired repetition, the client's mean
    TTFT through the router minus the direct one = the router's own time before its send
    + (the backend's mean first byte after that send - the direct client's mean TTFT) +
    what passes outside the router's clock (the client's hop to the router and back, and
    the router process's work before its handler runs or after it reads the first byte).
    The router's histograms also count the warm-up requests the client leaves out."""
    terms: dict[str, list[float]] = {"total": [], "own": [], "backend": [], "outside": []}
    cpu, extra = [], []
    for r, d in rs.paired_runs("router", "vllm", c):
        t, b = r.get("router_timing") or {}, r["bench"]
        if t.get("added_mean_ms") is None or t.get("backend_ttfb_mean_ms") is None:
            continue
        direct = d["bench"]["mean_ttft_ms"]
        terms["total"].append(b["mean_ttft_ms"] - direct)
        terms["own"].append(t["added_mean_ms"])
        terms["backend"].append(t["backend_ttfb_mean_ms"] - direct)
        terms["outside"].append(b["mean_ttft_ms"] - t["added_mean_ms"]
                                - t["backend_ttfb_mean_ms"])
        if t.get("requests") is not None:
            extra.append(round(t["requests"] - b["completed"]))
        pl = r.get("placement") or []
        if pl and r.get("wall_s") and all("cpu_s" in p for p in pl):
            cpu.append(sum(p["cpu_s"] for p in pl) / r["wall_s"])
    if not terms["total"]:
        return None
    n = len(terms["total"])
    sp = {k: Spread.of(v) for k, v in terms.items()}
    parts = ("own", "backend", "outside")
    text = (f"the added mean TTFT, by means over {n} paired repetitions (means add up, p50s "
            f"do not; a mean, not the p50 of target 3): the client's mean TTFT through the "
            f"router minus the direct one {sp['total'].text('{:+.1f}')} ms = the router's own "
            f"time before its send {sp['own'].text('{:.2f}')} ms + the backend's mean first "
            f"byte after that send minus the direct mean TTFT "
            f"{sp['backend'].text('{:+.1f}')} ms + outside the router's clock "
            f"{sp['outside'].text('{:+.1f}')} ms (medians of each term)")
    if sp["total"].median > 0:
        most = max(parts, key=lambda k: sp[k].median)
        times = sum(max(parts, key=lambda k: terms[k][i]) == most for i in range(n))
        wide = max(parts, key=lambda k: sp[k].hi - sp[k].lo)
        text += (f"; the largest median term is {SPLIT_WHERE[most]}, the largest term in "
                 f"{times} of {n} repetitions; the term that varies most between "
                 f"repetitions is {SPLIT_WHERE[wide].split(' (')[0]}")
    if extra and max(extra) > 0:
        text += (f"; the router's histograms also count each run's warm-up requests "
                 f"({span_text(extra)}), which the client's means leave out")
    if cpu:
        text += (f"; the router process used {Spread.of(cpu).text('{:.2f}')} CPU-seconds per "
                 "second of each run's whole bench call (set-up and warm-ups included)")
    return text


def elsewhere_rows(sets: list[RunSet]) -> list[list[object]]:
    """Target 3 in run sets of the router on another machine or engine (``--router-also``),
    each row marked with its set and device."""
    return [[r[0], f"{r[1]} [`{rs.label}`, {rs.meta['device_name']}]", *r[2:]]
            for rs in sets for r in router_rows(rs, pair_stats(rs))]


def bucket_of(ms: float) -> tuple[float, float]:
    """The bucket of ``specgw_gateway_added_latency_seconds`` (``le`` semantics: lower
    bound excluded) a quantile read from it lies in, in ms: an interpolated quantile is
    only known to lie inside it. A quantile at the last finite bound may be one that fell
    past it (``serve_compare.histogram_quantile`` returns that bound for the +Inf bucket)."""
    bounds = [1000 * le for le in ADDED_BUCKETS]
    if ms >= bounds[-1]:
        return (bounds[-2], float("inf"))
    lo = 0.0
    for hi in bounds:
        if ms <= hi:
            return lo, hi
        lo = hi
    raise AssertionError("unreachable: ms < the last bound")


def router_clock_rows(rs: RunSet, c: int = 64) -> list[list[object]]:
    """Target 3's TTFT on the router's own clock, where the run set recorded it. Each
    run's p50 is only known to lie in its bucket, so the median of the runs' p50s lies
    between the median of their buckets' lower bounds and that of their upper bounds: met
    where that upper bound is below the target, not met where the lower one is at or
    above it, and not told apart by the histogram in between."""
    added = rs.record_values("router", c, "router_timing", "added_p50_ms")
    if not added:
        return []
    s = Spread.of(added)
    buckets = [bucket_of(x) for x in added]
    lo = statistics.median(b[0] for b in buckets)
    hi = statistics.median(b[1] for b in buckets)
    t = T_ROUTER_OWN.threshold
    what = (f"{len(added)} of {len(rs.runs('router', c))} runs recorded it; the router's "
            f"time before the first byte apart from the backend's (reading, validation, "
            f"routing, admission, and any backend failed over from): the median p50 lies "
            f"between {lo:g} and {hi:g} ms (the histogram's buckets)")
    if hi < t or (hi == t and T_ROUTER_OWN.met(s.median)):
        return [["3", str(T_ROUTER_OWN), s.text("{:.3f}"), verdict(True), None]]
    if lo >= t:
        return [["3", str(T_ROUTER_OWN), s.text("{:.3f}"), verdict(False), what]]
    return [["3", str(T_ROUTER_OWN), s.text("{:.3f}"), "cannot tell",
             what + f", which straddle {t:g} ms"]]


def ttft_cause(adds: list[float]) -> str | None:
    """Is an added TTFT above the target in every paired repetition (a steady cost), or
    only in some (a cost that comes and goes, or noise the pairs do not separate)?"""
    if T_ROUTER_TTFT.met(statistics.median(adds)):
        return None
    t = T_ROUTER_TTFT.threshold
    over = [x for x in adds if x >= t]
    if len(over) == len(adds):
        return "every paired repetition adds at least the target: a consistent cost"
    return (f"{len(over)} of {len(adds)} paired repetitions add {t:g} ms or more (up to "
            f"{max(adds):+.1f} ms), the other {len(adds) - len(over)} do not (down to "
            f"{min(adds):+.1f} ms): the added TTFT is not the same from one repetition to "
            "the next, and these runs do not say what sets it")


def probe_overhead(rs: RunSet, st: dict) -> dict[int, Spread]:
    """{c: probe overhead in % of probes-off tok/s, median and min-max over the paired
    repetitions} (positive: the probes cost throughput)."""
    return {c: Spread.of([100 * (1 - x) for x in s["ratios"]]) for c in rs.conc()
            if (s := st.get(("specgw", "specgw-probes-off", c)))}


def probe_table(rs: RunSet, st: dict) -> list[str]:
    over = probe_overhead(rs, st)
    rows = [[c, s.n, s.text("{:+.1f}"), f"{s.hi - s.lo:.0f}",
             verdict(T_PROBES.met(s.median)),
             reps_meeting([100 * (1 - x) for x in st[("specgw", "specgw-probes-off", c)]
                           ["ratios"]], T_PROBES)] for c, s in over.items()]
    return md_table(["concurrency", "paired reps", "probe overhead % median (min to max)",
                     "error bar width, points", f"median <= {T_PROBES.threshold:g}%?",
                     "repetitions meeting it"], rows)


def toggle_rows(toggle: dict) -> list[list[object]]:
    """Target 2 inside one server (``probe_toggle.py``): the default poll, then 1 s."""
    rows = []
    poll = toggle["meta"]["poll_s"]
    widths = [s.hi - s.lo for s in probe_toggle.null_spreads(toggle).values()]
    null_text = (f"with the probes out in both windows ('off' against the next 'off', A/A) "
                 f"the groups span {span_text(widths)} points: the windows' own noise is "
                 "of that size" if widths else None)
    for state, what in (("on", f"poll every {poll:g} s, the default"),
                        ("on-poll-1s", "poll every 1 s, the shortest")):
        over = probe_toggle.overhead_spreads(toggle, state)
        rows.append(["2", f"{probe_toggle.T_OVERHEAD} ({what}) at every concurrency",
                     "; ".join(f"c={c}: {s.text('{:+.1f}')}" for c, s in over.items()),
                     probe_toggle.verdict_text(toggle, state),
                     "; ".join(x for x in (resolution_cause(over, "groups"), null_text)
                               if x) or None])
    return rows


TARGET_CONCURRENCY = (1, 16, 64, 128)  # issue #14: "concurrency 1, 16, 64, 128"


def earlier_paths(paths: Sequence[Path]) -> list[dict]:
    """--probe-alternate-earlier runs, merged per probe counting (one probe path each), in
    the order their first run was given."""
    groups: dict[str, list[dict]] = {}
    for p in paths:
        run = json.loads(p.read_text())
        groups.setdefault(probe_alternate_data.counting(run), []).append(run)
    return [probe_alternate_data.merge(runs) for runs in groups.values()]


STEP_APART = 0.05  # steps of two runs this far apart (relative) ran under other conditions


def earlier_vs_lead(old: dict, lead: dict | None) -> str:
    """Why an earlier path's percentages are no before/after of the probe change: what
    else differs between its runs and the lead run, the protocol or the steps' length
    ("" when neither does)."""
    if lead is None:
        return ""
    diff = [k for k in probe_alternate_data.SAME_PROTOCOL
            if old["meta"].get(k) != lead["meta"].get(k)]
    steps = {c.concurrency: c.step_ms for c in probe_alternate_data.verdicts(old)}
    both = [(c.concurrency, steps[c.concurrency], c.step_ms)
            for c in probe_alternate_data.verdicts(lead) if c.concurrency in steps]
    parts = []
    if any(abs(o / n - 1) > STEP_APART for _, o, n in both):
        parts.append("a step without the probes (median) lasted " + ", ".join(
            f"{o:.3f} ms at c={c} against the lead run's {n:.3f}" for c, o, n in both))
    if diff:
        parts.append("the runs also differ in " + ", ".join(
            f"{k} ({old['meta'].get(k)} vs {lead['meta'].get(k)})" for k in diff))
    if not parts:
        return ""
    return (". Here " + "; ".join(parts) + ": not only the probes' code differs, so its "
            "percentages against the lead run's are no before/after of the probe change "
            "alone")


def run_dates(run: dict) -> list[str]:
    """The dates of the runs a (possibly merged) alternation record holds."""
    meta = run.get("meta", {})
    return [r["date"] for r in meta.get("runs", [])] or [meta.get("date")]


def alternate_rows(alt: dict, repeats: Sequence[dict] = ()) -> list[list[object]]:
    """Target 2 step by step inside one engine (``probe_alternate.py``), per poll interval.
    A concurrency of the target the run did not ask for is no verdict either. A repeat
    (the same measurement on another engine start) must meet the target as well: with two
    runs at hand, a verdict from one of them would be a choice of run."""
    from engine_ext.probes.ledger import COUNTING

    runs = [alt, *repeats]
    probe_alternate_data.check_same_measurement(runs)
    dates = [d for r in runs for d in run_dates(r)]
    if repeats and len(set(dates)) < len(dates):
        raise ValueError(f"a probe_alternate run given twice (dates {dates})")
    names = ["", *(f"repeat {i}" for i in range(1, len(runs)))]
    labels = ["", *(f"{n} ({r['meta']['date']}): " for n, r in zip(names[1:], repeats,
                                                                   strict=True))]
    readings = [probe_alternate_data.verdicts(r) for r in runs]
    asked = [probe_alternate_data.requested(r) for r in runs]
    every = sorted({c for a in asked for c in a} | set(TARGET_CONCURRENCY))
    # Each one a reason for no pass, per run: cells asked for and not finished, the
    # concurrencies it never asked for (the target's, or another run's), the control
    # reading nonzero; for all, a counting other than the probes' own.
    reasons = []
    for label, run, a, cells in zip(labels, runs, asked, readings, strict=True):
        if text := probe_alternate_data.missing_text(run):
            reasons.append(label + text)
        if unasked := [c for c in every if c not in a]:
            reasons.append(f"{label}c={', '.join(map(str, unasked))}: not measured in this run")
        if biased := [c.concurrency for c in cells if not c.control_ok]:
            reasons.append(f"{label}the control (aa) does not read zero at c="
                           f"{', '.join(map(str, biased))}: the method is biased there")
    if (measured := probe_alternate_data.counting(alt)) != COUNTING:
        reasons.append(f"the run measured {measured} counting, the probes now do {COUNTING} "
                       "counting")
    rows = []
    for p in probe_alternate_data.POLL_INTERVALS_S:
        got = [{c.concurrency: c.verdict(p) for c in cells} for cells in readings]
        met = [c for c in every if all(g.get(c, ("",))[0] == "yes" for g in got)]
        of = f"({len(met)} of {len(every)} concurrencies met)"
        met_text = ("yes" if len(met) == len(every) and not reasons
                    else f"**no** {of}" if any(v == "no" for g in got for v, _ in g.values())
                    else f"not resolved {of}")
        causes = [f"{label}c={cell.concurrency}: {'above' if v == 'no' else 'straddles'} 1% "
                  f"(step overhead {cell.ab.text()}, poll share {cell.poll_pct(p):.2f}%"
                  + (f"; the median of the paired ratios, {cell.ab_median.text()}, is above "
                     "1%" if v != "no" and cell.ab_median.lo > 1 else "") + ")"
                  for label, cells, g in zip(labels, readings, got, strict=True)
                  for cell in cells if (v := g[cell.concurrency][0]) != "yes"]
        shown = "; ".join(f"c={c}: " + ", ".join(
            f"{name} {g[c][1].text()}".strip() if c in g else f"{name} not measured".strip()
            for name, g in zip(names, got, strict=True))
            for c in every if any(c in g for g in got))
        rows.append(["2", f"probe overhead, % of the engine step, neighbouring steps in / out "
                     f"inside one engine (poll every {p:g} s) <= 1 at every concurrency"
                     + (f", in each of {len(runs)} runs" if repeats else ""),
                     shown, met_text, "; ".join(causes + reasons) or None])
    return rows


def repeat_spread(lead: dict, repeat: dict) -> str:
    """Two engine starts side by side: each run's interval covers its own pairs only, so
    where the runs lie further apart than either interval's half-width, the engine start
    is the wider error bar."""
    ours = {c.concurrency: c.ab for c in probe_alternate_data.verdicts(lead)}
    cells = [(c.concurrency, ours[c.concurrency], c.ab)
             for c in probe_alternate_data.verdicts(repeat) if c.concurrency in ours]
    if not cells:
        return "No concurrency was measured by both runs."

    def half(e: probe_alternate_data.Estimate) -> float:
        return (e.hi - e.lo) / 2

    apart = [(c, a, b) for c, a, b in cells if abs(a.value - b.value) > max(half(a), half(b))]
    text = ("Step overhead (sum), the lead run against this one: " + "; ".join(
        f"c={c}: {a.value:+.2f} vs {b.value:+.2f}" for c, a, b in cells) + ". ")
    if not apart:
        return text + ("The two engine starts lie no further apart than the wider of the "
                       "two runs' 95% interval half-widths at every concurrency both "
                       "measured.")
    return text + ("Further apart than either run's own 95% interval half-width: " + "; ".join(
        f"c={c} ({abs(a.value - b.value):.2f} points against {half(a):.2f} and "
        f"{half(b):.2f})" for c, a, b in apart) + ": each run's interval covers the pairs of "
        "its own engine start, so there the spread between engine starts is the wider error "
        "bar.")


INSTANCE_OFFSET = 0.02  # a median offset between two identical processes worth naming


def instance_lines(rs: RunSet, st: dict) -> list[str]:
    """Two identical processes of one server against each other: what a ratio between two
    server processes reads when nothing but the process differs."""
    lines: list[str] = []
    for a, b in INSTANCES:
        cells = {c: s for c in rs.conc() if (s := st.get((a, b, c)))}
        if not cells:
            continue
        lines += [f"Two identical `{b}` processes (`{a}` / `{b}`, same flags, started one "
                  "after the other) in the same repetitions:", ""]
        for c, s in cells.items():
            sv = st.get(("specgw", "vllm", c))
            lines.append(f"* c={c}: {s['ratio'].text('{:.2f}')} over {s['ratio'].n} paired "
                         f"repetitions, spanning {100 * (s['ratio'].hi - s['ratio'].lo):.0f} "
                         "points" + (f"; specgw / vllm serve in the same repetitions "
                                     f"{sv['ratio'].text('{:.2f}')}, spanning "
                                     f"{100 * (sv['ratio'].hi - sv['ratio'].lo):.0f} points"
                                     if sv else "") + ".")
        far = [c for c, s in cells.items() if abs(s["ratio"].median - 1) > INSTANCE_OFFSET]
        lines += ["", (f"At c={', '.join(map(str, far))} two processes of `{b}` differ by "
                       f"more than {100 * INSTANCE_OFFSET:g}% in median: a ratio between two "
                       "server processes there carries an offset of that size whatever the "
                       "servers are."
                       if far else "No concurrency shows a median offset above "
                       f"{100 * INSTANCE_OFFSET:g}% between two processes of `{b}`."), ""]
    return lines[:-1]


def instance_floor(st: dict, c: int) -> float | None:
    """The largest median offset from 1 between two identical processes of one server at
    ``c`` (None where no instance pair ran)."""
    offs = [abs(s["ratio"].median - 1) for a, b in INSTANCES if (s := st.get((a, b, c)))]
    return max(offs) if offs else None


CLOCKS = (("bench", "mean_itl_ms"), ("engine_timing", "itl_mean_ms"))


def clock_diffs(rs: RunSet, a: str, b: str, c: int) -> tuple[float, float] | None:
    """(client, engine core) mean inter-token latency of ``a`` minus ``b``, each in % of
    ``b``'s on the same clock (medians over the repetitions); None where either server's
    runs did not record both clocks."""
    out = []
    for key in CLOCKS:
        x, y = rs.record_values(a, c, *key), rs.record_values(b, c, *key)
        if not x or not y:
            return None
        out.append(100 * (statistics.median(x) - statistics.median(y)) / statistics.median(y))
    return out[0], out[1]


def itl_floor(rs: RunSet, c: int) -> tuple[float, float] | None:
    """The larger difference between two identical processes of one server, per clock."""
    diffs = [d for a, b in INSTANCES if (d := clock_diffs(rs, a, b, c))]
    if not diffs:
        return None
    return max(abs(d[0]) for d in diffs), max(abs(d[1]) for d in diffs)


def clock_reading(diff: tuple[float, float], floor: tuple[float, float]) -> str:
    """Where a step-time difference sits, read against what separates two identical
    processes of one server on each clock."""
    (client, engine), (fc, fe) = diff, floor
    head = (f"mean inter-token latency specgw vs vllm serve {client:+.1f}% at the client, "
            f"{engine:+.1f}% on the engine core's clock (two identical processes of one "
            f"server: up to {fc:.1f}% / {fe:.1f}%)")
    if abs(client) <= fc and abs(engine) <= fe:
        return head + ": not resolved against that"
    if client * engine < 0:
        return head + ": the clocks disagree in sign, so the difference is not placed"
    if abs(engine) >= 0.5 * abs(client):
        return head + ": most of it is already there on the engine core's clock"
    return head + ": most of it is added after the engine core (API process, HTTP, client)"


# Only at c=1 do the two clocks count the same thing: one SSE event per engine step, with
# the client idle in between; under load the client's own per-event work enters its clock.
CLOCK_C = 1


def deficit_cause(rs: RunSet, st: dict, c: int) -> str:
    """What the run set says about a specgw / vllm serve gap at ``c``: against the offset
    between two identical processes of one server; at c=1, where an inter-token latency
    difference sits (engine core's clock or after it); under load, the paired TTFT and
    TPOT, which can move in opposite directions."""
    s = st[("specgw", "vllm", c)]
    parts = []
    if (floor := instance_floor(st, c)) is not None:
        gap = abs(s["ratio"].median - 1)
        parts.append(f"the gap ({100 * gap:.1f}%) is "
                     + ("not resolved against" if gap <= floor else "beyond")
                     + " the larger median offset between two identical processes of one "
                     f"server ({100 * floor:.1f}%)")
    if c == CLOCK_C:
        if (d := clock_diffs(rs, "specgw", "vllm", c)) and (f := itl_floor(rs, c)):
            parts.append(clock_reading(d, f))
    elif s["ttft_add"] and s["tpot_ratio"] and parts:
        parts.append(f"paired medians: TTFT p50 {s['ttft_add'].median:+.0f} ms, TPOT p50 "
                     f"x{s['tpot_ratio'].median:.2f}")
        if text := engine_step_reading(rs, c):
            parts.append(text)
    return "; ".join(parts)


def plugin_split(rs: RunSet, st: dict, c: int) -> str:
    """specgw / vllm serve split at ``c`` by the set's ``vllm-plugin`` server (stock vllm
    serve with specgw's plugin loaded): the plugin inside the engine (vllm-plugin / vllm)
    and the gateway in front of the same engine (specgw / vllm-plugin), each with its
    engine step difference where both took the same steps; which part is larger, and
    whether it clears the offset between two identical processes of one server."""
    plug, front = st.get(("vllm-plugin", "vllm", c)), st.get(("specgw", "vllm-plugin", c))
    if not (plug and front):
        return ""
    text = []
    for what, (a, b), s in (("the plugin inside vllm serve (vllm-plugin / vllm)",
                             ("vllm-plugin", "vllm"), plug),
                            ("the gateway in front of the same engine (specgw / vllm-plugin)",
                             ("specgw", "vllm-plugin"), front)):
        part = f"{what} {s['ratio'].text('{:.3f}')}"
        if (d := same_steps_diff(rs, a, b, c)) is not None:
            part += f", engine step {d:+.1f}%"
        text.append(part)
    gaps = {"the plugin": abs(plug["ratio"].median - 1),
            "the gateway": abs(front["ratio"].median - 1)}
    larger = max(gaps, key=gaps.__getitem__)
    floor = instance_floor(st, c)
    resolved = ("" if floor is None else
                f", {'beyond' if gaps[larger] > floor else 'not resolved against'} the "
                f"larger median offset between two identical processes ({100 * floor:.1f}%)")
    return (f"split by vllm serve with specgw's plugin (same set): {'; '.join(text)}; "
            f"the larger part is {larger} ({100 * gaps[larger]:.1f}%{resolved})")


SAME_STEPS = 0.02  # engine steps within 2%: the same batches, so one step time to compare


def engine_steps(rs: RunSet, v: str, c: int) -> tuple[float, float] | None:
    """(median engine steps, median mean step time ms on the engine core's clock) of
    ``v`` at ``c``; None where the runs did not record them."""
    steps = rs.record_values(v, c, "engine_timing", "iterations")
    itl = rs.record_values(v, c, "engine_timing", "itl_mean_ms")
    return (statistics.median(steps), statistics.median(itl)) if steps and itl else None


def engine_step_order(rs: RunSet, c: int) -> tuple[float, bool | None] | None:
    """Under load, where specgw and vllm serve (and their second processes) took the same
    engine steps: specgw's mean step time on the engine core's clock in % of vllm serve's,
    and whether both specgw processes' are longer than both vllm serve processes' (None
    without the second processes)."""
    got = {v: e for v in ("specgw", "specgw-2", "vllm", "vllm-2")
           if (e := engine_steps(rs, v, c))}
    if not ("specgw" in got and "vllm" in got and got["vllm"][0]):
        return None
    if max(abs(e[0] / got["vllm"][0] - 1) for e in got.values()) > SAME_STEPS:
        return None
    if not (d := clock_diffs(rs, "specgw", "vllm", c)):
        return None
    pct = d[1]
    if len(got) < 4:
        return pct, None
    return pct, min(got["specgw"][1], got["specgw-2"][1]) > max(got["vllm"][1],
                                                                got["vllm-2"][1])


def engine_step_reading(rs: RunSet, c: int) -> str:
    if not (o := engine_step_order(rs, c)):
        return ""
    floor = itl_floor(rs, c)
    return (f"with the same engine steps, specgw's mean step on the engine core's clock "
            f"{o[0]:+.1f}%" + (f" (two identical processes of one server: up to "
                               f"{floor[1]:.1f}%)" if floor else "")
            + ("; both specgw processes' steps longer than both vllm serve processes'"
               if o[1] else ""))


def same_steps_diff(rs: RunSet, a: str, b: str, c: int) -> float | None:
    """``a``'s mean step on the engine core's clock in % of ``b``'s, where the two took the
    same engine steps (within ``SAME_STEPS``) at ``c``."""
    ea, eb = engine_steps(rs, a, c), engine_steps(rs, b, c)
    if not (ea and eb and eb[0]) or abs(ea[0] / eb[0] - 1) > SAME_STEPS:
        return None
    return d[1] if (d := clock_diffs(rs, a, b, c)) else None


def engine_step_lines(sets: list[RunSet]) -> list[str]:
    """Across run sets: the loaded cells where specgw and vllm serve took the same engine
    steps, in how many both specgw processes' steps were the longer ones (where second
    processes ran), and specgw against its own server with the probes out."""
    cells = [(rs.label, c, o) for rs in sets for c in rs.conc() if c != CLOCK_C
             if (o := engine_step_order(rs, c))]
    probes = [(rs.label, c, d) for rs in sets for c in rs.conc() if c != CLOCK_C
              if (d := same_steps_diff(rs, "specgw", "specgw-probes-off", c)) is not None]
    probe_text = ("With the same steps, specgw's mean step against its own server with the "
                  "probes out (`specgw-probes-off`, same set): " + ", ".join(
                      f"`{label}` c={c} ({d:+.1f}%)" for label, c, d in probes) + ".")
    if not cells:
        return [probe_text] if probes else []
    paired = [x for x in cells if x[2][1] is not None]
    longer = sum(bool(o[1]) for _, _, o in paired)
    where = ", ".join(f"`{label}` c={c} ({o[0]:+.1f}%)" for label, c, o in cells)
    stock: dict[str, list[str]] = {}
    for rs in sets:
        if any(label == rs.label for label, _, _ in cells):
            stock.setdefault(rs.stock_vllm_text(), []).append(f"`{rs.label}`")
    stock_text = "; ".join(f"{', '.join(labels)}: {text}" for text, labels in stock.items())
    lines = [f"Under load, where specgw and vllm serve took the same engine steps (within "
             f"{100 * SAME_STEPS:.0f}%: the same batches, so step times compare), specgw's "
             f"mean step on the engine core's clock against vllm serve's: {where}"
             + (f"; both specgw processes' steps are longer than both vllm serve processes' "
                f"in {longer} of the {len(paired)} cells with two processes of each"
                if paired else "")
             + f". The two servers' engine cores differ in specgw's plugin (vllm serve in "
             f"{stock_text}) and in the structured "
             "output settings, which no request here uses; the sampling parameters the two "
             "front ends build from `vllm bench serve`'s request are the same field by field "
             "but for vLLM's copy flag (`tests/test_sampling_parity.py`, checked on vLLM "
             "0.32, not on the 0.26 these runs used)."]
    if probes:
        lines[0] += " " + probe_text
    else:
        lines[0] += (" These runs do not say what costs the time (a run of "
                     "`specgw-probes-off` with the engine's step timing would).")
    lines[0] += (" `serve_compare.py` also records each server process's CPU time per run; "
                 "its first run, on the CPU engine, sets the two front ends' CPU per "
                 "generated token side by side (`docs/cpu/serve_compare_cputime.md`).")
    return lines


Cell = tuple[RunSet, int, Spread, float | None, list[dict | None]]


def process_cells(sets: list[RunSet]) -> list[Cell]:
    """(run set, c, specgw / vllm serve ratio, the larger instance offset or None, each
    instance pair's stats or None) for every cell where both servers ran."""
    out = []
    for rs in sets:
        st = pair_stats(rs)
        out += [(rs, c, s["ratio"], instance_floor(st, c),
                 [st.get((a, b, c)) for a, b in INSTANCES]) for c in rs.conc()
                if (s := st.get(("specgw", "vllm", c)))]
    return out


def process_summary(cells: list[Cell]) -> str:
    floored = [(r, f) for _, _, r, f, _ in cells if f is not None]
    if not floored:
        return ""
    below = sum(r.median < 1 for _, _, r, _, _ in cells)
    within = sum(abs(r.median - 1) <= f for r, f in floored)
    n_sets = len({rs.label for rs, *_ in cells})
    return (f"specgw / vllm serve is below 1 in {below} of {len(cells)} (run set, concurrency) "
            f"cells over {n_sets} run set{'s' * (n_sets != 1)}; where a set has two identical "
            f"processes of each server, the gap is not resolved against their larger median "
            f"offset in {within} of {len(floored)} cells")


def lscpu_fields(rs: RunSet) -> dict[str, str]:
    """``lscpu``'s "key: value" lines as ``serve_compare.py`` recorded them ({} where the
    run set predates the record or lscpu was unavailable)."""
    text = rs.meta.get("host", {}).get("lscpu", "")
    if text.startswith("unavailable"):
        return {}
    return {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in text.splitlines()
                                              if ":" in ln)}


def host_line(sets: list[RunSet]) -> str:
    """What the hosts of the run sets that recorded it were."""
    seen = [(rs, f) for rs in sets if (f := lscpu_fields(rs)).get("CPU(s)")]
    if not seen:
        return ""
    topo = {(f.get("NUMA node(s)"), f.get("Socket(s)")) for _, f in seen}
    return ("The host as `lscpu` described it, in the run sets that recorded it: " + "; ".join(
        f"`{rs.label}`: {f['CPU(s)']} CPUs, {f.get('Socket(s)', '?')} socket(s), "
        f"{f.get('NUMA node(s)', '?')} NUMA node(s), hypervisor "
        f"{f.get('Hypervisor vendor', 'none')}" for rs, f in seen) + "." + (
        " One NUMA node and one socket as the guest sees them: within the guest, the "
        "offsets are not a matter of which node a server's engine core landed on; how the "
        "hypervisor maps those CPUs onto the physical host is not visible from inside."
        if topo == {("1", "1")} else "") + " Those run sets also record, per run, each "
        "server's processes and the CPU each last ran on (`placement`).")


def process_lines(sets: list[RunSet]) -> list[str]:
    """specgw / vllm serve next to the two instance pairs, per run set and concurrency:
    whether a gap between the two servers is larger than what separates two processes of
    one server in the same set."""
    cells = process_cells(sets)
    if not (summary := process_summary(cells)):
        return []
    rows, reps = [], set()
    for rs, c, r, _, inst in cells:
        reps |= {x["ratio"].n for x in inst if x}
        rows.append([rs.label, rs.meta["protocol"].get("pin") or "not pinned", c,
                     r.text("{:.2f}"), *(x["ratio"].text("{:.2f}") if x else None
                                         for x in inst)])
    return ["specgw / vllm serve in every run set, next to two identical processes of each "
            "server in the same set (output tok/s, median (min-max) of paired ratios):", "",
            *md_table(["run set", "CPUs per server", "concurrency", "specgw / vllm",
                       *(f"{a} / {b}" for a, b in INSTANCES)], rows), "",
            f"{summary}. On this host a ratio between two server processes carries an offset "
            "of that size whatever the servers are; those instance offsets are themselves "
            f"medians of {span_text(sorted(reps))} paired repetitions and move between run "
            "sets (compare the last two columns across sets), so they bound the resolution, "
            "not the cause.",
            *(["", text] if (text := pinning_line(cells)) else []),
            *(["", text] if (text := host_line(sets)) else [])]


def pinning_line(cells: list[Cell]) -> str:
    """Whether giving each server CPUs of its own (``serve_compare.py --pin``) shrank the
    offset between two identical processes: the per-cell offsets of pinned run sets
    against those of the others."""
    floors: dict[bool, list[float]] = {True: [], False: []}
    pinned = set()
    for rs, _, _, f, _ in cells:
        if f is not None:
            pin = rs.meta["protocol"].get("pin")
            floors[bool(pin)].append(100 * f)
            if pin:
                pinned.add(f"`{rs.label}` ({pin} CPUs per server)")
    on, off = floors[True], floors[False]
    if not (on and off):
        return ""
    if max(on) < min(off):
        verdict = "every pinned cell is below every unpinned one"
    elif min(on) > max(off):
        verdict = "every pinned cell is above every unpinned one"
    else:
        verdict = ("the two ranges overlap: pinning each server to CPUs of its own did not "
                   "remove the offset between two identical processes")
    return (f"Pinned against not pinned, the larger instance offset per cell (points from "
            f"1): {', '.join(sorted(pinned))}: {min(on):.1f}-{max(on):.1f}, median "
            f"{statistics.median(on):.1f} over {len(on)} cells; not pinned: "
            f"{min(off):.1f}-{max(off):.1f}, median {statistics.median(off):.1f} over "
            f"{len(off)} cells; {verdict}.")


LOADED = (64, 128)  # where TTFT and TPOT part ways between the two servers


def balance_lines(sets: list[RunSet]) -> list[str]:
    """Under load, specgw's paired TTFT and TPOT against vllm serve's in every run set,
    next to the same differences between two identical processes of one server: a
    difference both instance pairs lack is one between the servers, not the processes."""
    rows, cells, beyond, checked = [], [], 0, 0
    for rs in sets:
        st = pair_stats(rs)
        for c in LOADED:
            s = st.get(("specgw", "vllm", c))
            if not (s and s["ttft_add"] and s["tpot_ratio"]):
                continue
            inst = [x for a, b in INSTANCES if (x := st.get((a, b, c))) and x["ttft_add"]]
            cells.append(s)
            if inst:
                checked += 1
                beyond += all(abs(s["ttft_add"].median) > abs(x["ttft_add"].median)
                              for x in inst)
            rows.append([rs.label, c, s["ttft_add"].text("{:+.0f}"),
                         s["tpot_ratio"].text("{:.2f}"),
                         "; ".join(f"{x['ttft_add'].median:+.0f} ms, x"
                                   f"{x['tpot_ratio'].median:.2f}" for x in inst) or None])
    if not cells:
        return []
    lower = sum(s["ttft_add"].median < 0 for s in cells)
    longer = sum(s["tpot_ratio"].median > 1 for s in cells)
    return [f"Under load (c={', '.join(map(str, LOADED))}), paired TTFT p50 (specgw minus "
            "vllm serve, ms) and TPOT p50 (specgw / vllm serve), median (min-max), next to "
            "two identical processes of each server (medians):", "",
            *md_table(["run set", "concurrency", "TTFT p50 difference ms", "TPOT p50 ratio",
                       "identical processes: TTFT difference, TPOT ratio"], rows), "",
            f"specgw's first token comes earlier in {lower} of {len(cells)} cells and its "
            f"decode is slower per token in {longer} of {len(cells)}"
            + (f"; in {beyond} of {checked} cells with identical processes, specgw's TTFT "
               "difference is larger than both instance pairs' (a difference between the "
               "servers, not the processes)" if checked else "")
            + ". Output tok/s thus compares two different balances of prefill and decode"
            + ("." if stage_lines(sets) else
               "; what in the request path sets them apart was not measured.")]


STAGE_TERMS = (("front", "before vLLM's arrival stamp, and after its output loop"),
               ("outside_core", "outside the engine core"),
               ("queue", "scheduler queue"), ("prefill", "prefill"))


def instance_spread(rs: RunSet, c: int, of: Callable[[str], float | None]) -> float | None:
    """The larger difference in ``of`` between two identical processes of one server."""
    diffs = [abs(a - b) for x, y in INSTANCES
             if (a := of(x)) is not None and (b := of(y)) is not None]
    return max(diffs) if diffs else None


def stage_cell(rs: RunSet, c: int, st: dict) -> dict | None:
    """One loaded cell of stage_lines: specgw's TTFT terms against vllm serve's, the
    largest term against the same term's instance spread, and the engine steps."""
    s, v = rs.ttft_stages("specgw", c), rs.ttft_stages("vllm", c)
    es, ev = engine_steps(rs, "specgw", c), engine_steps(rs, "vllm", c)
    if not (s and v and es and ev):
        return None
    diff = {k: s[k] - v[k] for k, _ in STAGE_TERMS}
    main = max(diff, key=lambda k: abs(diff[k]))
    term_spread = instance_spread(rs, c, lambda x: (t := rs.ttft_stages(x, c)) and t[main])
    step_spread = instance_spread(rs, c, lambda x: (e := engine_steps(rs, x, c)) and e[0])
    tpot = (p := st.get(("specgw", "vllm", c))) and p["tpot_ratio"]
    return {"s": s, "v": v, "diff": diff, "main": main, "term_spread": term_spread,
            "steps": (es[0], ev[0]), "step_spread": step_spread,
            "longer_step": es[1] > ev[1], "slower_tpot": bool(tpot) and tpot.median > 1}


def stage_lines(sets: list[RunSet]) -> list[str]:
    """Under load, the client's TTFT split on vLLM's own clocks (RunSet.ttft_stages),
    specgw against vllm serve term by term, in the run sets that recorded it; and the
    engine steps each took for the same tokens, each against two identical processes."""
    rows, cells = [], []
    for rs in sets:
        st = pair_stats(rs)
        for c in LOADED:
            if not (x := stage_cell(rs, c, st)):
                continue
            cells.append(x)
            s, v, diff = x["s"], x["v"], x["diff"]
            rows.append([rs.label, c,
                         f"{s['client']:.0f} / {v['client']:.0f} "
                         f"({s['client'] - v['client']:+.0f})",
                         *(f"{s[k]:.0f} / {v[k]:.0f} ({diff[k]:+.0f})" for k, _ in STAGE_TERMS),
                         num(x["term_spread"], "{:.0f}"),
                         f"{x['steps'][0]:.0f} / {x['steps'][1]:.0f}",
                         num(x["step_spread"], "{:.0f}")])
    if not cells:
        return []
    labels = dict(STAGE_TERMS)
    mains = {x["main"] for x in cells}
    lead = (f"the largest term is '{labels[mains.pop()]}' in {len(cells)} of {len(cells)} "
            "cells" if len(mains) == 1 else "the largest term differs between cells")
    checked = [x for x in cells if x["term_spread"] is not None]
    beyond = sum(abs(x["diff"][x["main"]]) > x["term_spread"] for x in checked)
    fewer = [x for x in cells if x["steps"][0] < x["steps"][1]]
    fewer_beyond = sum(x["step_spread"] is not None
                       and x["steps"][1] - x["steps"][0] > x["step_spread"] for x in fewer)
    return ["The client's mean TTFT split on vLLM's own clocks (`docs/serve_compare.md` "
            "defines each term and where each server's arrival stamp sits: vllm serve's "
            "tokenization falls after its stamp, specgw's before), specgw / vllm serve, "
            "medians of the repetitions in ms (specgw minus vllm serve), and the engine "
            "steps each run's window took for the same generated tokens, each next to the "
            "larger difference between two identical processes of one server:", "",
            *md_table(["run set", "concurrency", "client TTFT",
                       *(label for _, label in STAGE_TERMS),
                       "identical processes: difference in the largest term",
                       "engine steps", "identical processes: difference in steps"], rows), "",
            f"Of specgw's TTFT difference, {lead}"
            + (f"; it exceeds the same term's difference between two identical processes "
               f"in {beyond} of {len(checked)} cells" if checked else "")
            + f". The engine took fewer steps for specgw in {len(fewer)} of {len(cells)} "
            f"cells, by more than two identical processes differ in {fewer_beyond} of them; "
            f"in those {len(fewer)}, its mean step on the engine core's clock was longer in "
            f"{sum(x['longer_step'] for x in fewer)} and its TPOT p50 slower in "
            f"{sum(x['slower_tpot'] for x in fewer)}. This splits the time; it does not name "
            "the work inside a term."]


def c1_step_lines(sets: list[RunSet], cost: dict | None) -> list[str]:
    """At c=1 each SSE event is one engine step (its tokens together), so the inter-token
    latency p50 is the step time the client sees: per server and run set, and specgw's
    minus the same run set's probes-off server where both ran. Where the runs recorded
    it, the engine core's own mean inter-token latency next to the client's."""
    servers = ("specgw", "specgw-probes-off", "vllm")
    rows, gaps, engine_rows = [], [], []
    for rs in sets:
        med = {v: statistics.median(x) for v in servers
               if (x := rs.values(v, 1, "median_itl_ms"))}
        if "specgw" not in med:
            continue
        rows.append([rs.label, *(f"{med[v]:.2f}" if v in med else None for v in servers)])
        if "specgw-probes-off" in med:
            gaps.append((rs.label, 1000 * (med["specgw"] - med["specgw-probes-off"])))
        for v in rs.variants():
            client = rs.values(v, 1, "mean_itl_ms")
            engine = rs.record_values(v, 1, "engine_timing", "itl_mean_ms")
            if client and engine:
                cm, em = statistics.median(client), statistics.median(engine)
                engine_rows.append([rs.label, v, len(engine), f"{cm:.3f}", f"{em:.3f}",
                                    f"{cm - em:+.3f}"])
    if not rows:
        return []
    lines = ["Step time at c=1 as the client sees it (inter-token latency p50, ms, median of "
             "the repetitions; at c=1 an SSE event carries one engine step's tokens):", "",
             *md_table(["run set", *servers], rows)]
    if engine_rows:
        lines += ["", "The same at c=1 on two clocks, mean inter-token latency (medians of the "
                  "repetitions): the client's (`vllm bench serve`), and the engine core's "
                  "(`vllm:inter_token_latency_seconds`, fed from the engine-core process's "
                  "output timestamps, so before the API process and HTTP; its window also "
                  "holds the run's warm-up requests, of the same shape):", "",
                  *md_table(["run set", "server", "reps", "client ms", "engine core ms",
                             "client minus engine ms"], engine_rows)]
    if gaps:
        timed = (cost or {}).get("step_cost_us", {})
        path = next((timed[k] for k in DEVICE_PATH if k in timed), None)
        lines += ["", "specgw with probes minus the same server without them (another process "
                  "of the same run set, so a process's own offset is in it too): " + "; ".join(
            f"`{label}` {us:+.0f} us" for label, us in gaps) + " per step" + (
            f", against {path['median']:.1f} us of Python work for the whole probe path as "
            "it is now per runner V2 step timed on this CPU (section 2; these run sets "
            "served an earlier path, with run_fullgraph wrapped, whose ledger work alone is "
            "in section 2 too): the probes' own work does not account for that difference; "
            "what does was not found in these runs."
            if path and min(us for _, us in gaps) > 10 * path["median"] else ".")]
    return lines


def router_history(sets: list[RunSet]) -> list[str]:
    """Router / direct at c=64 in each run set that had the router (relay client as
    recorded in the router's log; the httpx relay before it was selectable)."""
    out = []
    for rs in sets:
        if s := pair_stats(rs).get(("router", "vllm", 64)):
            client = next((ln.split("relay client: ", 1)[1].split(")")[0]
                           for ln in rs.log_lines("router") if "relay client: " in ln),
                          "httpx (the only relay before `--router-client`)")
            out.append(f"* `{rs.label}` ({rs.meta['date']}, relay client {client}): router / "
                       f"direct at c=64 {s['ratio'].text('{:.2f}')}, TTFT p50 "
                       f"{s['ttft_add'].text('{:+.1f}')} ms.")
    return out


def config_evidence(rs: RunSet) -> list[str]:
    """Whether the engines' own logged configurations are identical, and where not, which
    top-level settings differ (the harness states one configuration for all)."""
    import re

    from benchmarks.serve_compare_data import engine_evidence

    def settings(v: str) -> dict[str, str]:
        line = next((ln.split("with config:", 1)[1] for ln in rs.log_lines(v)
                     if "with config:" in ln), "")
        return dict(re.findall(r"(\w+)=((?:[^,{]|\{[^}]*\})*)", line))

    engines = [v for v in rs.variants() if engine_evidence(rs.log_lines(v))["config_digest"]]
    digests = {v: engine_evidence(rs.log_lines(v))["config_digest"] for v in engines}
    if len(set(digests.values())) <= 1:
        return [f"The engines of `{rs.label}` logged identical configurations "
                f"({', '.join(engines)})."]
    a, b = settings("specgw"), settings("vllm")
    diff = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return [f"The engines' own 'with config:' lines differ between specgw and vllm serve in: "
            f"{', '.join(f'`{k}`' for k in diff) or 'formatting only'} (the harness passes "
            "the same stated configuration to both; `docs/serve_compare.md` has the digests)."]


def probe_reading(rs: RunSet, st: dict) -> list[str]:
    return spread_reading(probe_overhead(rs, st))


def spread_reading(over: dict[int, Spread], unit: str = "repetitions") -> list[str]:
    """Per concurrency: is the overhead shown, excluded or not resolved by the ``unit``
    (repetitions of a run set, groups of windows inside one server)?"""
    out, one = [], unit.removesuffix("s")
    for c, s in over.items():
        if against_target(s) == "shown":
            what = (f"every {one} above {T_PROBES.threshold:g}%: an overhead is shown "
                    "in this data")
        elif against_target(s) == "excluded":
            what = f"every {one} at or below {T_PROBES.threshold:g}%"
        else:
            what = (f"the {unit} straddle {T_PROBES.threshold:g}%: not resolved at "
                    "this level")
        out.append(f"* c={c}: {s.text('{:+.1f}')} %, {what}.")
    return out


def served_key(cost: dict) -> str | None:
    """``probe_cost.json``'s key for the ledger the run sets served (``--baseline``)."""
    return f"at {cost['baseline']}" if cost.get("baseline") else None


def ledger_model(cost: dict) -> tuple[dict, str]:
    """The ledgers whose work "one forward scope and a propose of two" models, and a note
    on what it leaves out. Runner V2 now counts a whole-graph replay with no forward scope,
    so once the whole path is timed (``step_cost_us``) the model holds only for the ledger
    the run set served (``baseline``); today's cost per step is the whole path."""
    med, served = cost["median_us"], served_key(cost)
    if served not in med or not cost.get("step_cost_us"):
        return med, ""
    return {served: med[served]}, (
        " Today's runner V2 path opens no forward scope around a FULL graph's replay, so "
        "this model of a step holds for the served ledger only; what the path costs now is "
        "the whole-path figure below.")


def probe_cost_lines(rs: RunSet, cost: dict) -> list[str]:
    """The ledger's own per-step work (``probe_cost.py``) against the length of an engine
    step of the server without probes: one target forward and one propose of two forward
    scopes per step (runner V2, k=3: a first pass and one fused replay of k-1 steps)."""
    med, now = ledger_model(cost)
    served = served_key(cost)
    per_step = {i: m["forward_scope"] + m["propose_2_forwards"] for i, m in med.items()}
    lines = [f"The probes' ledger work alone, a lower bound of what they add (the wrappers' "
             f"own calls are not in it) (`benchmarks/probe_cost.py`, "
             f"`docs/probe_cost.json`: {cost['reps']} repetitions of {cost['n']} calls, "
             f"rotated, on {cost['machine']['cpu_count']}-core {cost['machine']['cpu']} "
             f"with Python {cost['machine']['python']}, {cost['date']}; not the device's "
             "host), per engine step: " + "; ".join(
                 f"{i}: {us:.1f} us (forward scope {med[i]['forward_scope']:.1f}, propose "
                 f"with two forwards {med[i]['propose_2_forwards']:.1f}, a piece "
                 f"{med[i]['piece']:.2f})" for i, us in per_step.items()) + "." + now, "",
             f"Against a step of `specgw-probes-off` in `{rs.label}` (TPOT p50 x acceptance "
             "length, medians of the runs):", ""]
    rows = [[c, f"{step_us:.0f}", *(f"{100 * us / step_us:.2f}%" for us in per_step.values())]
            for c, step_us in probe_steps_us(rs).items()]
    out = [*lines, *md_table(["concurrency", "engine step us",
                              *(f"bookkeeping / step ({i})" for i in per_step)], rows)]
    shown = {c: s for c, s in probe_overhead(rs, pair_stats(rs)).items()
             if s.lo > T_PROBES.threshold}
    for c, s in shown.items():
        row = next(r for r in rows if r[0] == c)
        ran = list(per_step).index(served) + 2 if served in per_step else -1
        out += ["", f"At c={c}, where `{rs.label}` shows an overhead ({s.text('{:+.1f}')} %), "
                f"the ledger as of `{cost.get('baseline') or 'this revision'}` (the one this "
                f"run set served with) costs {row[ran]} of a step: that work does not account "
                "for the gap, whose cause these runs do not establish."]
    if cost.get("step_cost_us"):
        out += ["", *probe_path_lines(rs, cost)]
    return out


PROBE_PATH_LIMIT = 1.0  # % of an engine step: issue #14's probe-overhead target
PATH_NAMES = {"v2_full_k3": "runner V2, FULL graphs, k=3, vLLM 0.27-0.32's calls (one "
                            "fused decode graph)",
              "v2_full_k3_0_26": "runner V2, FULL graphs, k=3, vLLM 0.26's calls (a decode "
                                 "graph per drafter step: what the device runs)",
              "v1_piecewise_k3": "runner V1, PIECEWISE, k=3"}
DEVICE_PATH = ("v2_full_k3_0_26", "v2_full_k3")  # the device's shape, else the nearest


def probe_steps_us(rs: RunSet) -> dict[int, float]:
    """Per concurrency: an engine step of ``specgw-probes-off`` in microseconds (TPOT p50
    x acceptance length, medians of the runs)."""
    out = {}
    for c in rs.conc():
        tpot = rs.values("specgw-probes-off", c, "median_tpot_ms")
        al = [r["server_acceptance"]["acceptance_length"]
              for r in rs.runs("specgw-probes-off", c)
              if r["server_acceptance"].get("acceptance_length")]
        if tpot and al:
            out[c] = 1000 * statistics.median(tpot) * statistics.median(al)
    return out


def probe_path_lines(rs: RunSet, cost: dict) -> list[str]:
    """The whole probe path per engine step (wrappers and ledger, ``probe_path.py``) as a
    share of each concurrency's step, with the verdict against the 1 % target."""
    path = cost["step_cost_us"]
    steps = probe_steps_us(rs)
    lines = ["The whole probe path per engine step, the wrappers of `engine_ext/internals/"
             "install.py` with the ledger, applied to stand-ins of the vLLM functions they "
             "wrap (`benchmarks/probe_path.py`) and timed against the same stand-ins "
             f"unwrapped, paired by repetition ({cost['reps']} repetitions of "
             f"{cost['step_n']} steps, rotated; CPU time on this "
             f"{cost['machine']['cpu_count']}-core machine, not the device's host): " +
             "; ".join(f"{PATH_NAMES.get(k, k)}: {v['median']:.1f} us (min-max "
                       f"{v['min']:.1f}-{v['max']:.1f}; bare step {v['bare_median']:.2f} us)"
                       for k, v in path.items()) + ". Against the same steps of "
             "`specgw-probes-off` (the device ran runner V2; a V1 row divides by those V2 "
             "step lengths too):", ""]
    rows = [[c, f"{st:.0f}", *(f"{100 * v['median'] / st:.2f}% ({100 * v['min'] / st:.2f}"
                               f"-{100 * v['max'] / st:.2f}%)" for v in path.values())]
            for c, st in steps.items()]
    lines += md_table(["concurrency", "engine step us",
                       *(f"whole path / step ({k})" for k in path)], rows)
    for k, v in path.items():
        worst = {c: 100 * v["max"] / st for c, st in steps.items()}
        over = [c for c, w in worst.items() if w > PROBE_PATH_LIMIT]
        verdict = (f"at or below {PROBE_PATH_LIMIT:g}% of the step at every concurrency, "
                   "in every repetition" if not over else
                   f"above {PROBE_PATH_LIMIT:g}% of the step in at least one repetition at "
                   f"c={', '.join(map(str, over))}")
        lines += ["", f"* {PATH_NAMES.get(k, k)}: {verdict} (largest: "
                  f"{max(worst.values()):.2f}% at c={max(worst, key=worst.get)}), taking "
                  "this machine's CPU time for the device host's."]
    return lines


def swing_text(rs: RunSet) -> str:
    a, b = (rel_spread(rs.values(v, 64, "output_throughput")) for v in ("specgw", "vllm"))
    verdict_text = ("specgw's c=64 swings are not removed" if a > b
                    else "specgw's c=64 spread is no wider than vllm serve's")
    return (f"{verdict_text}: at c=64 its output tok/s spans {a:.0f}% of its median over the "
            f"repetitions, `vllm serve`'s {b:.0f}%.")


def speed_causes(rs: RunSet, st: dict) -> list[str]:
    """Target 1 per cell, from the paired repetitions: a consistent deficit (every pair
    below 1) is not noise; pairs on both sides of 1 are."""
    lines = []
    for c in rs.conc():
        s = st.get(("specgw", "vllm", c))
        if not s:
            continue
        below = sum(r < 1 for r in s["ratios"])
        if below == len(s["ratios"]):
            what = "every paired repetition below 1: a consistent deficit, not noise"
        elif below == 0:
            what = "every paired repetition at or above 1"
        else:
            what = f"{below} of {len(s['ratios'])} paired repetitions below 1, the rest above"
        cause = deficit_cause(rs, st, c) if s["ratio"].median < 1 else ""
        lines.append(f"* c={c}: {s['ratio'].text('{:.2f}')}, {what}"
                     + (f"; {cause}" if cause else "") + ".")
    return lines


def router_ceiling(rs: RunSet) -> str:
    """Router tok/s as concurrency doubles, next to the engine behind it."""
    cs = [c for c in rs.conc() if rs.values("router", c, "output_throughput")]
    if len(cs) < 2:
        return ""
    lo, hi = cs[-2], cs[-1]
    r = [statistics.median(rs.values("router", c, "output_throughput")) for c in (lo, hi)]
    d = [statistics.median(rs.values("vllm", c, "output_throughput")) for c in (lo, hi)]
    text = (f"From c={lo} to c={hi} the router's median output rises {r[1] / r[0]:.2f}x "
            f"({r[0]:.0f} -> {r[1]:.0f} tok/s) while `vllm serve` behind it rises "
            f"{d[1] / d[0]:.2f}x ({d[0]:.0f} -> {d[1]:.0f})")
    if r[1] / r[0] < 1.1 <= d[1] / d[0]:
        return (text + ": the router, not the engine, sets the rate there. It is one Python "
                "process relaying every SSE event; where its time goes was not profiled on "
                "the device.")
    return text + "."


# ------------------------------------------------------------------------- target 4
def spec_table(sets: list[RunSet]) -> list[str]:
    rows = []
    for c in concurrencies(sets):
        pairs = pooled(sets, "vllm", "vllm-nospec", c)
        if not pairs:
            continue
        r = Spread.of(ratios(pairs))
        tp = pooled(sets, "vllm", "vllm-nospec", c, "median_tpot_ms")
        tpot = [statistics.median(y for _, y in tp), statistics.median(x for x, _ in tp)]
        al = paired_acceptance(sets, "vllm", "vllm-nospec", c)
        rows.append([c, len(pairs), Spread.of([y for _, y in pairs]).text(),
                     Spread.of([x for x, _ in pairs]).text(), r.text("{:.2f}"),
                     f"{sum(x > y for x, y in pairs)} of {len(pairs)}",
                     f"{tpot[0]:.2f} / {tpot[1]:.2f}",
                     num(statistics.median(al)) if al else None])
    return md_table(["concurrency", "paired reps", "no speculation tok/s median (min-max)",
                     "EAGLE-3 k=3 tok/s", "ratio median (min-max)",
                     "reps where speculation is faster",
                     "TPOT p50 ms none / EAGLE-3 (median of the paired runs)",
                     "acceptance length (paired runs)"], rows)


def spec_verdicts(sets: list[RunSet]) -> tuple[list[list[object]], list[str]]:
    """Target 4's rows, and the reading: the step cost and where speculation stops paying."""
    rows: list[list[object]] = []
    notes: list[str] = []
    one = ratios(pooled(sets, "vllm", "vllm-nospec", 1))
    if one:
        s = Spread.of(one)
        tp = ratios(pooled(sets, "vllm", "vllm-nospec", 1, "median_tpot_ms"))
        al = statistics.median(paired_acceptance(sets, "vllm", "vllm-nospec", 1))
        # TPOT x tokens per step = the time of one step, so a speculative step (3 drafter
        # passes + a 4-token verify + rejection sampling) over a plain decode step is the
        # paired TPOT ratio times the acceptance length.
        steps = Spread.of([t * al for t in tp])
        need = T_SPEC.threshold * steps.median
        rows.append(["4", str(T_SPEC), s.text("{:.2f}"), verdict(T_SPEC.met(s.median)),
                     None if T_SPEC.met(s.median) else
                     f"acceptance length {al:.2f} against a speculative step of "
                     f"{steps.median:.2f} plain steps: {T_SPEC.threshold:g}x needs an "
                     f"acceptance length of {need:.2f} at that step cost"])
        notes.append(
            f"* At c=1 a speculative step yields {al:.2f} tokens (acceptance length, vLLM's "
            f"counters, median of the paired runs) and costs {steps.text('{:.2f}')} plain "
            f"decode steps (paired TPOT p50 ratio x acceptance length, median (min-max) "
            f"over {steps.n} pairs). {T_SPEC.threshold:g}x at this acceptance length needs "
            f"a speculative step of at most {al / T_SPEC.threshold:.2f} plain steps; at the "
            f"median step cost it needs an acceptance length of {need:.2f} (k=3 caps it "
            "at 4).")
    med = {c: statistics.median(r) for c in concurrencies(sets)
           if (r := ratios(pooled(sets, "vllm", "vllm-nospec", c)))}
    below = [c for c, m in med.items() if m < 1]
    above = [c for c, m in med.items() if m >= 1]
    cross = ("speculation is ahead at every concurrency measured" if not below else
             f"median below 1 at c={', '.join(map(str, below))}; at or above 1 at "
             f"c={', '.join(map(str, above)) or 'none'}")
    monotone = all(m1 >= m2 for m1, m2 in zip(list(med.values()), list(med.values())[1:],
                                              strict=False))
    spans = [Spread.of(r) for c in med if (r := ratios(pooled(sets, "vllm", "vllm-nospec", c)))]
    rows.append(["4", "where speculation stops paying (crossover)", cross,
                 "single crossover" if monotone and below else "no single crossover",
                 None if monotone else crossover_cause(med, spans)])
    for c in (1, 32):
        r = ratios(pooled(sets, "vllm-v1-piecewise", "vllm-v1-eager-draft", c))
        if r:
            s = Spread.of(r)
            rows.append(["4", f"{T_DRAFT} at c={c}", f"{s.text('{:.2f}')}, {s.n} paired reps",
                         verdict(T_DRAFT.met(s.median)), None])
    return rows, notes


def crossover_cause(med: dict[int, float], spans: list[Spread]) -> str:
    """Whether the paired ratios can order the concurrencies at all."""
    gap, widest = max(med.values()) - min(med.values()), max(x.hi - x.lo for x in spans)
    if widest > gap:
        return (f"the paired ratios of one concurrency span up to {widest:.2f}, wider than the "
                f"{gap:.2f} between the highest and lowest median: these runs do not order "
                "the concurrencies")
    return (f"the medians differ by up to {gap:.2f}, more than any concurrency's span "
            f"({widest:.2f}): the gain does not fall steadily with load on this pair")


def drafter_table(sets: list[RunSet]) -> list[str]:
    rows = []
    for v in ("vllm-v1-piecewise", "vllm-v1-eager-draft"):
        for c in concurrencies(sets):
            runs = [r for rs in sets for r in rs.runs(v, c)]
            g = [r["drafter_graphs"] for r in runs if r.get("drafter_graphs")]
            if not runs:
                continue
            fw, rp = sum(x["forwards"] for x in g), sum(x["replayed"] for x in g)
            rows.append([v, c, len(runs),
                         Spread.of([r["bench"]["output_throughput"] for r in runs]).text(),
                         f"{rp:.0f} / {fw:.0f}" if g else None,
                         num(rp / fw, "{:.3f}") if fw else None])
    return md_table(["server", "concurrency", "reps", "output tok/s median (min-max)",
                     "drafter graph replays / drafter forwards (specgw probes)",
                     "hit ratio"], rows)


def pair_text(info: dict) -> str:
    c, t = info["config"], info.get("target", {})
    h = info.get("head", {})
    epochs = (t.get("steps_done") or 0) * c["batch_size"] * c["seq_len"] / info["tokens"]
    return (f"Pair (`{SC}/pair_1b_build_info.json`, `models/build_pair.py --preset "
            f"{info['preset']}` on the {info.get('gpu', 'device')}, "
            f"{info['build_seconds']:.0f} s): "
            f"Llama target {info['target_parameters'] / 1e9:.2f} B parameters "
            f"({c['num_layers']} x {c['hidden_size']}, MLP {c['intermediate_size']}, "
            f"{c['num_heads']} query / {c['num_kv_heads']} KV heads, vocabulary "
            f"{c['vocab_size']}), {t.get('steps_done')} steps of {c['batch_size']} x "
            f"{c['seq_len']} tokens over {info['tokens'] / 1e6:.1f} M tokens of the standard "
            f"library: training loss {info['target_final_loss']:.2f}, held-out "
            f"{t.get('eval_loss', float('nan')):.2f}. EAGLE-3 head over aux layers "
            f"{'/'.join(map(str, c['aux_layers']))}, {h.get('steps_done')} steps, "
            "teacher-forced top-1 agreement "
            f"{'/'.join(f'{a:.2f}' for a in info['head_train_top1_per_step'])} at draft "
            "positions 1-3. Both phases were cut to the device session's budget (a fitted "
            f"schedule): the target saw {epochs:.1f} passes over its corpus, and its held-out "
            f"loss is {t.get('eval_loss', float('nan')) - info['target_final_loss']:.2f} nats "
            "above its training loss.")


# --------------------------------------------------------------------------- document
def probe_section(serve: RunSet, earlier: list[RunSet], toggle: dict | None,
                  cost: dict | None) -> list[str]:
    """Inside one server first (the switch), then across two server processes."""
    lines = []
    if toggle:
        lines += ["### Inside one server: the probes switched in and out", "",
                  probe_toggle.protocol_text(toggle) + " Raw windows: "
                  "`docs/gpu/probe_toggle/probe_toggle.json`; protocol: "
                  "`benchmarks/probe_toggle.py`.", "", *probe_toggle.toggle_table(toggle), "",
                  *probe_toggle.null_lines(toggle), "",
                  "Probes in at the default poll, group by group:", "",
                  *spread_reading(probe_toggle.overhead_spreads(toggle, "on"), "groups"),
                  "",
                  "### Across two server processes (the protocol before the switch)", ""]
    crossed = [rs for rs in [serve, *earlier] if probe_overhead(rs, pair_stats(rs))]
    for rs in crossed:
        st = pair_stats(rs)
        lines += [f"`{rs.label}` ({rs.meta['date']}): specgw serve with its worker probes "
                  "(poll every 5 s) against another process of it with `SPECGW_PROBES=0`, "
                  "paired by repetition:", "", *probe_table(rs, st), "",
                  *probe_reading(rs, st), ""]
    if not any(rs.runs("specgw-poll-1s", c) for rs in crossed for c in rs.conc()):
        lines += ["The 1 s poll interval was measured only inside one server (above)."
                  if toggle else "The shortest poll interval (`specgw-poll-1s`) was not "
                  "measured (device time).", ""]
    if cost and crossed:
        # Against the set that gives a step at the most concurrencies.
        lines += [*probe_cost_lines(max(crossed, key=lambda rs: len(probe_steps_us(rs))),
                                    cost), ""]
    return lines


def document(serve: RunSet, spec: list[RunSet], info: dict | None, out: Path,
             earlier: list[RunSet], cost: dict | None = None,
             toggle: dict | None = None, router: RunSet | None = None,
             router_also: Sequence[RunSet] = (), alt: dict | None = None,
             split: Sequence[RunSet] = (), alt_src: Sequence[Path] = (),
             alt_earlier: Sequence[dict] = (), alt_earlier_src: Sequence[Path] = (),
             alt_repeats: Sequence[dict] = (), alt_repeat_src: Sequence[Path] = ()
             ) -> list[str]:
    st = pair_stats(serve)
    router = router or serve
    rst = pair_stats(router)
    rows = (serve_rows(serve, st, by_date([*earlier, serve]), split)
            + (alternate_rows(alt, alt_repeats) if alt
               else toggle_rows(toggle) if toggle else [])
            + router_rows(router, rst) + elsewhere_rows(list(router_also)))
    rows.sort(key=lambda r: r[0])
    srows, snotes = spec_verdicts(spec) if spec else ([], [])
    png = out.with_name(f"serve_compare_{serve.label}.png")  # serve_compare_report's too
    cmd = ("python -m benchmarks.benchmarks_report --serve " + str(serve.src) +
           (f" --router {router.src}" if router is not serve else "") +
           "".join(f" --spec {rs.src}" for rs in spec) +
           "".join(f" --earlier {rs.src}" for rs in earlier) +
           "".join(f" --router-also {rs.src}" for rs in router_also) +
           "".join(f" --split {rs.src}" for rs in split) +
           "".join(f" --probe-alternate {p}" for p in alt_src) +
           "".join(f" --probe-alternate-repeat {p}" for p in alt_repeat_src) +
           "".join(f" --probe-alternate-earlier {p}" for p in alt_earlier_src))
    # The target-1 set's card, then the alternation's where it differs: a set from
    # another card (the alternation may come from an H100) must not read as the H200's.
    alt_card = alt["meta"].get("device_name", alt["meta"]["device"]) if alt else None
    cards = list(dict.fromkeys(c for c in (serve.meta["device_name"], alt_card) if c))
    lines = ["# Benchmarks: specgw serve vs vllm serve, probe overhead, router, and when "
             f"speculation pays ({' and '.join(cards)}, vLLM {serve.meta['vllm']})", "",
             "<!-- Generated by benchmarks/benchmarks_report.py from the raw JSON; do not edit "
             "by hand. -->", "",
             f"`{cmd}`. Every number and verdict below is computed from the raw runs "
             f"(`runs/*.json`, one `vllm bench serve` run each; `servers.json`; gzipped server "
             "logs) by this generator. Protocol (`benchmarks/serve_compare.py`): the servers "
             "of a run set start one after another on one H200 and stay warm together; each "
             "repetition runs every server at every concurrency, the server order rotated per "
             "repetition; `vllm bench serve`, random dataset, 128 input / 128 output tokens, "
             "`--ignore-eos`, greedy. A ratio divides two runs of the same repetition and "
             "concurrency, seconds apart.", "",
             *(f"* `{rs.label}` ({what}): {rs.meta['device_name']}, vLLM "
               f"{rs.meta['vllm']}, torch {rs.meta['torch']}, {rs.meta['date']}; the bundled "
               f"pair; servers {', '.join(f'`{v}`' for v in rs.variants())}; "
               f"{rs.meta['protocol']['reps']} repetitions."
               for rs, what in ([(serve, "target 1"), (router, "target 3")]
                                if router is not serve else [(serve, "targets 1-3")])),
             *(f"* `{rs.label}` (target 1, split): {rs.meta['device_name']}, vLLM "
               f"{rs.meta['vllm']}, torch {rs.meta['torch']}, {rs.meta['date']}; the bundled "
               f"pair; servers {', '.join(f'`{v}`' for v in rs.variants())}; "
               f"{rs.meta['protocol']['reps']} repetitions." for rs in split),
             *([f"* `docs/gpu/probe_alternate` (target 2): {alt_card}, vLLM "
                f"{alt['meta']['vllm']}, {alt['meta']['date']}, one "
                "`specgw serve` switching its probes step by step "
                "(`benchmarks/probe_alternate.py`)"
                + "".join(f"; repeated on another engine start {r['meta']['date']}"
                          for r in alt_repeats) + "."] if alt else []),
             *([f"* `docs/gpu/probe_toggle` (target 2{', earlier' if alt else ''}): "
                f"{toggle['meta']['date']}, one `specgw serve` switching its probes "
                "window by window (`benchmarks/probe_toggle.py`)."] if toggle else []),
             *(f"* `{rs.label}` (target 3, elsewhere): {rs.meta['device_name']}, vLLM "
               f"{rs.meta['vllm']}, torch {rs.meta['torch']}, {rs.meta['date']}; the bundled "
               f"pair; servers {', '.join(f'`{v}`' for v in rs.variants())}; "
               f"{rs.meta['protocol']['reps']} repetitions of "
               f"{rs.meta['protocol']['output_len']} output tokens." for rs in router_also),
             *(f"* `{rs.label}` (target 4): {rs.meta['date']}; servers "
               f"{', '.join(f'`{v}`' for v in rs.variants())}; "
               f"{len({r['rep'] for rr in rs.cells.values() for r in rr})} repetitions "
               "present" for rs in spec), "",
             "## The targets of issue #14", "",
             *md_table(["#", "target", "measured: median (min-max) over paired repetitions",
                        "met?", "why not, as far as these runs show"], rows + srows), "",
             "Target 5 (one report writer, verdicts in code) is this page and its generator; "
             "the audit errors the issue lists were corrected in `docs/gpu_bench.md` (the "
             "in-process sweep, formerly this page).", "",
             f"## 1. specgw serve vs vllm serve (`{serve.label}`)", ""]
    if plot(serve, st, png):
        lines += [f"![error bars]({png.name})", ""]
    lines += [*main_table(serve), "", *ratio_table(serve, st), "",
              "Target 1 cell by cell, from the paired repetitions:", "",
              *speed_causes(serve, st), "",
              *config_evidence(serve), "",
              swing_text(serve), "",
              *instance_lines(serve, st), "",
              *process_lines(by_date([*earlier, serve])), "",
              *engine_step_lines(by_date([*earlier, serve])), "",
              *balance_lines(by_date([*earlier, serve])), "",
              *stage_lines(by_date([*earlier, serve])), "",
              *c1_step_lines(by_date([*earlier, serve]), cost), "",
              *(ln for rs in split for ln in [
                  f"### Target 1 split: the plugin inside vllm serve vs the gateway in front "
                  f"(`{rs.label}`)", "",
                  "`vllm-plugin` is stock `vllm serve` with specgw's plugin loaded as the "
                  "README tells a vLLM user (probes, worker extension, the same runner): "
                  "vllm-plugin / vllm is the plugin's cost inside the engine, specgw / "
                  "vllm-plugin the gateway's in front of the same engine.", "",
                  *main_table(rs), "", *ratio_table(rs, pair_stats(rs)), ""]),
              "## 2. Probe overhead, with error bars", "",
              *(["### Step by step inside one engine (the protocol of target 2's verdict)",
                 "", *probe_alternate_data.report_body(alt), "",
                 "The windowed switch below came first; its windows' own noise is why "
                 "target 2 is read step by step.", ""] if alt else []),
              *(ln for i, r in enumerate(alt_repeats, 1) for ln in [
                  f"### Step by step, repeat {i}: the same measurement on another engine start "
                  "(part of the verdict)", "", repeat_spread(alt, r), "",
                  *probe_alternate_data.report_body(r), ""]),
              *(ln for old in alt_earlier for ln in [
                  "### Step by step, the probes with "
                  f"{probe_alternate_data.counting(old)} counting (no verdict)", "",
                  "The same method, shown beside the lead run, not merged with it (another "
                  "probe path, or runs given as earlier)" + earlier_vs_lead(old, alt) + ":",
                  "", *probe_alternate_data.report_body(old), ""]),
              *probe_section(serve, earlier, toggle, cost),
              "## 3. Router", "", *router_section(router, rst), "", router_ceiling(router), "",
              *(ln for rs in router_also for ln in
                [f"On {rs.meta['device_name']} (`{rs.label}`, `{rs.src}`), where the router, "
                 "the engine and the load client share the cores:", "",
                 *router_section(rs, pair_stats(rs)), ""]),
              "Router / direct at c=64 in every run set with the router (each ratio paired "
              "within its set):", "",
              *router_history(by_date([*earlier, serve, router])), "",
              "The relay's CPU cost per SSE event, httpx against aiohttp, on this CPU: "
              "`docs/router_cost.md` (`benchmarks/router_cost.py`).", ""]
    if spec:
        lines += ["## 4. When speculation pays: a 1 B target built on the device", "",
                  *([pair_text(info), ""] if info else []),
                  f"`vllm serve` ({'; '.join(sorted({rs.stock_vllm_text() for rs in spec}))}) "
                  "with and without `--speculative-config` (EAGLE-3, k=3, vLLM's default "
                  "runner), same engine configuration otherwise:", "", *spec_table(spec), "",
                  *snotes, "",
                  "Piecewise drafter vs eager drafter, runner V1 (`VLLM_USE_V2_MODEL_RUNNER=0`) "
                  "with the specgw plugin in `vllm serve` (its compiled drafter replays the "
                  "piecewise graphs; its probes count them), the eager one with "
                  "`speculative_config.enforce_eager`:", "", *drafter_table(spec), ""]
    lines += ["## Earlier runs", "",
              "* `docs/serve_compare.md`: every run set of the bundled pair (before and "
              "after the router fixes), with the run-to-run noise of `vllm serve` across "
              "sets and the repetitions at c >= 64 one by one.",
              "* `docs/gpu_bench.md`: the in-process engine against the gateway on one "
              "engine, 150 M pair, runner V1/V2, k = 2-4, with CUDA-graph hit rates."]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--serve", type=Path, default=SC / "run7_pinned",
                    help="run set of specgw and vllm serve (target 1)")
    ap.add_argument("--router", type=Path, default=SC / "run4_router",
                    help="run set of the router and vllm serve (target 3)")
    ap.add_argument("--spec", type=Path, action="append",
                    help=f"default: {SC}/run3_1b_a and {SC}/run3_1b_b")
    ap.add_argument("--pair-info", type=Path, default=SC / "pair_1b_build_info.json")
    ap.add_argument("--earlier", type=Path, action="append",
                    help=f"earlier run sets of the bundled pair (default: {SC}/run5_instance, "
                         "run6_instance, run4_speed, run3, run1)")
    ap.add_argument("--router-also", type=Path, action="append", default=[],
                    help="run sets of the router elsewhere (another machine or engine), "
                         "reported beside --router's")
    ap.add_argument("--split", type=Path, action="append", default=[],
                    help="run sets with the vllm-plugin server (target 1 split into the "
                         "plugin and the gateway)")
    ap.add_argument("--probe-cost", type=Path, default=Path("docs/probe_cost.json"))
    ap.add_argument("--probe-toggle", type=Path,
                    default=Path("docs/gpu/probe_toggle/probe_toggle.json"))
    ap.add_argument("--probe-alternate", type=Path, action="append", default=[],
                    help="probe_alternate.json of a run, repeatable: each concurrency "
                         "from the last run that has it (default: docs/gpu/probe_alternate"
                         "/run4_inline/probe_alternate.json)")
    ap.add_argument("--probe-alternate-repeat", type=Path, action="append", default=[],
                    help="probe_alternate.json of a repeat of the lead run (same protocol, "
                         "another engine start), repeatable: each must meet target 2 too "
                         "(default, with the default lead run: run4_inline_repeat)")
    ap.add_argument("--probe-alternate-earlier", type=Path, action="append", default=[],
                    help="probe_alternate.json of runs of an earlier probe path, repeatable: "
                         "merged per probe counting, each shown, never the verdict")
    ap.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    a = ap.parse_args()
    spec = [RunSet.load(s) for s in a.spec or [SC / "run3_1b_a", SC / "run3_1b_b"]]
    info = json.loads(a.pair_info.read_text()) if a.pair_info.exists() else None
    earlier = [RunSet.load(s) for s in a.earlier or [
        SC / "run5_instance", SC / "run6_instance", SC / "run4_speed", SC / "run3",
        SC / "run1"]]
    cost = json.loads(a.probe_cost.read_text()) if a.probe_cost.exists() else None
    # Paths given must exist (a typo must not drop a run); the default may be absent.
    default_alt = Path("docs/gpu/probe_alternate/run4_inline/probe_alternate.json")
    default_repeat = Path("docs/gpu/probe_alternate/run4_inline_repeat/probe_alternate.json")
    alt = a.probe_alternate or ([default_alt] if default_alt.exists() else [])
    # The default lead run comes with its repeat: a verdict from one of them would be a
    # choice of run.
    repeats = a.probe_alternate_repeat or (
        [default_repeat] if not a.probe_alternate and default_repeat.exists() else [])
    if repeats and not alt:
        raise SystemExit("--probe-alternate-repeat needs the run it repeats "
                         "(--probe-alternate)")
    toggle = json.loads(a.probe_toggle.read_text()) if a.probe_toggle.exists() else None
    lines = document(RunSet.load(a.serve), spec, info, a.out, earlier, cost, toggle,
                     RunSet.load(a.router) if a.router else None,
                     [RunSet.load(s) for s in a.router_also],
                     probe_alternate_data.merge([json.loads(p.read_text()) for p in alt])
                     if alt else None,
                     [RunSet.load(s) for s in a.split], a.probe_alternate,
                     earlier_paths(a.probe_alternate_earlier), a.probe_alternate_earlier,
                     [json.loads(p.read_text()) for p in repeats], repeats)
    write(a.out, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
