"""``serve_compare.py`` output -> a markdown report (default ``docs/serve_compare.md``) and
an error-bar plot per run set next to it.

One or more ``--src`` directories, each one set of servers started together (a "run set").
Servers are only divided by servers of the same run set: two sets ran at different times in
different processes, so the one server both may contain (``vllm``) is shown side by side
as a measure of how far the same configuration moves between sets, never as a reference
for the other set. Per run set and concurrency: the median and min-max over repetitions of
output tok/s, TPOT p50 and TTFT p50; per pair of servers the ratio paired by repetition;
the targets of issue #14 checked in code; the repetitions at c >= 64 one by one; the
router's failures with its own log lines.

``python -m benchmarks.serve_compare_report --src docs/gpu/serve_compare/run1
--src docs/gpu/serve_compare/run2_router --out docs/serve_compare.md``
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.profile_data import Profiles
from benchmarks.profile_report import profile_lines
from benchmarks.report import Spread, Target, md_table, num, verdict, write
from benchmarks.serve_compare_data import RunSet, engine_evidence, router_events

METRICS = (("output_throughput", "output tok/s", "{:.0f}"),
           ("median_tpot_ms", "TPOT p50 ms", "{:.2f}"),
           ("median_ttft_ms", "TTFT p50 ms", "{:.1f}"))
# (numerator, denominator, what the ratio measures)
PAIRS = (("specgw", "vllm", "specgw serve vs vllm serve, same engine configuration"),
         ("specgw-probes-off", "vllm", "specgw serve without probes vs vllm serve"),
         ("specgw-poll-1s", "vllm", "specgw serve polling probes every 1 s vs vllm serve"),
         ("specgw-defaults", "vllm-defaults", "each server's defaults"),
         ("specgw", "specgw-probes-off", "probes on (poll 5 s) vs off"),
         ("specgw-poll-1s", "specgw-probes-off", "probes on (poll 1 s) vs off"),
         ("router", "vllm", "specgw router in front of vllm serve vs vllm serve directly"),
         # Splits specgw / vllm: the plugin in the engine vs the gateway in front of it.
         ("vllm-plugin", "vllm", "vllm serve with specgw's plugin vs stock vllm serve"),
         ("specgw", "vllm-plugin", "specgw serve vs vllm serve with specgw's plugin"),
         ("specgw-2", "specgw", "a second, identical specgw serve process vs the first"),
         ("vllm-2", "vllm", "a second, identical vllm serve process vs the first"))
# Instance pairs: two processes of one server, the floor under every cross-process ratio.
INSTANCES = (("specgw-2", "specgw"), ("vllm-2", "vllm"))
ALL_VARIANTS = ("specgw", "vllm", "specgw-probes-off", "specgw-poll-1s", "router",
                "specgw-defaults", "vllm-defaults", "specgw-2", "vllm-2", "vllm-plugin")
# One colour per server in every plot.
COLOR = {v: f"C{i}" for i, v in enumerate(ALL_VARIANTS)}
T_SPEED = Target("specgw / vllm serve output tok/s (median of paired ratios)", ">=", 1.0)
T_SPREAD = Target("specgw's output tok/s spread minus vllm serve's, points of the median",
                  "<=", 0.0)
T_PROBES = Target("probe overhead, % of output tok/s (median of paired repetitions)", "<=",
                  1.0)
T_ROUTER = Target("router / direct output tok/s at c=64 (median of paired ratios)", ">=", 0.98)
T_ROUTER_TTFT = Target("added TTFT p50 ms through the router at c=64 (median of paired "
                       "differences)", "<", 1.0)
# The same target read on the router's own histogram (specgw_gateway_added_latency_seconds):
# the client's TTFT difference between two runs carries the backend's run-to-run noise.
T_ROUTER_OWN = Target("added TTFT p50 ms through the router at c=64, on its own clock "
                      "(median of the runs' p50s)", "<", 1.0)
T_FAILED = Target("failed requests over all runs of a server", "<=", 0)

Stats = dict[tuple[str, str, int], dict]


def rel_spread(vals: Sequence[float]) -> float:
    """(max - min) / median, in % of the median."""
    return 100 * (max(vals) - min(vals)) / statistics.median(vals)


def reps_meeting(vals: Sequence[float], t: Target) -> str:
    return f"{sum(bool(t.met(x)) for x in vals)} of {len(vals)}"


def pair_stats(rs: RunSet) -> Stats:
    """{(a, b, c): paired ratios and TTFT differences} for the pairs this run set has."""
    stats: Stats = {}
    for a, b, _ in PAIRS:
        for c in rs.conc():
            tp = rs.paired(a, b, c, "output_throughput")
            if not tp:
                continue
            r = [x / y for x, y in tp]
            dt = [x - y for x, y in rs.paired(a, b, c, "median_ttft_ms")]
            dtp = [x / y for x, y in rs.paired(a, b, c, "median_tpot_ms") if y]
            stats[(a, b, c)] = {"ratios": r, "ratio": Spread.of(r), "ttft_adds": dt,
                                "ttft_add": Spread.of(dt) if dt else None,
                                "tpot_ratio": Spread.of(dtp) if dtp else None}
    return stats


TITLE = "specgw serve vs vllm serve under vllm bench serve"


# ---------------------------------------------------------------------------- tables
def main_table(rs: RunSet) -> list[str]:
    rows = []
    for c in rs.conc():
        for v in rs.variants():
            runs = rs.runs(v, c)
            if not runs:
                continue
            acc = [r["server_acceptance"]["acceptance_length"] for r in runs
                   if r["server_acceptance"]["acceptance_length"]]
            tp = rs.values(v, c, "output_throughput")
            rows.append([c, v, len(runs),
                         *(Spread.of(rs.values(v, c, k)).text(f) if rs.values(v, c, k) else None
                           for k, _, f in METRICS),
                         f"{rel_spread(tp):.0f}%" if tp else None,
                         num(statistics.median(acc), "{:.2f}") if acc else None,
                         sum(r["bench"].get("failed") or 0 for r in runs)])
    return md_table(["concurrency", "server", "reps",
                     *(f"{label} median (min-max)" for _, label, _ in METRICS),
                     "tok/s spread (max-min)/median", "acceptance length (server counters)",
                     "failed requests"], rows)


def ratio_table(rs: RunSet, stats: Stats) -> list[str]:
    rows = [[f"{a} / {b}", what, c, s["ratio"].n, s["ratio"].text("{:.3f}"),
             s["tpot_ratio"] and s["tpot_ratio"].text("{:.3f}"),
             s["ttft_add"] and s["ttft_add"].text("{:+.1f}")]
            for a, b, what in PAIRS for c in rs.conc() if (s := stats.get((a, b, c)))]
    return md_table(["pair", "measures", "concurrency", "paired reps",
                     "output tok/s ratio median (min-max)", "TPOT p50 ratio",
                     "TTFT p50 difference ms"], rows)


# (key of RunSet.ttft_stages, column label, format)
TTFT_STAGES = (("client", "client TTFT", "{:.1f}"), ("engine", "vLLM's TTFT", "{:.1f}"),
               ("front", "client minus vLLM's", "{:+.1f}"),
               ("outside_core", "outside the engine core", "{:.1f}"),
               ("queue", "scheduler queue", "{:.1f}"), ("prefill", "prefill", "{:.1f}"),
               ("steps", "engine steps in the window", "{:.0f}"))


def ttft_stage_table(rs: RunSet) -> list[str]:
    """Where the time to a first token goes, per server and concurrency, on the clocks
    the runs recorded (RunSet.ttft_stages); empty for run sets that predate them."""
    rows = [[c, v, st["reps"], *(num(st.get(k), fmt) for k, _, fmt in TTFT_STAGES)]
            for c in rs.conc() for v in rs.variants() if (st := rs.ttft_stages(v, c))]
    if not rows:
        return []
    return ["Where the time to a first token goes (means, ms; each term per run, then the "
            "median over the repetitions): the client's TTFT; vLLM's own "
            "(`vllm:time_to_first_token_seconds`: from the arrival time vLLM stamps on the "
            "request to when the front end's output loop takes the first token in, "
            "`IterationStats` in `vllm/v1/metrics/stats.py`. vLLM's own server stamps the "
            "arrival where its renderer starts on the prompt, before tokenization "
            "(`vllm/renderers/base.py`, `render_cmpl_async`, in 0.26 and 0.32 alike), while "
            "specgw hands the engine client token ids it tokenized itself, so vllm serve's "
            "tokenization counts after the stamp and specgw's before it); the client's minus "
            "vLLM's (before the stamp, and from the output loop to the client); outside the "
            "engine core (vLLM's TTFT minus queue and prefill: from the stamp to the engine "
            "core's scheduler queue, i.e. input processing, the hop to the engine core and "
            "for vllm serve its tokenization, plus the first token's way back from the "
            "engine core to the front end's output loop); the scheduler queue and prefill "
            "(`vllm:request_queue_time_seconds`, `vllm:request_prefill_time_seconds`, both "
            "on the engine core's clock); and the engine steps the run's window took "
            "(`vllm:iteration_tokens_total`'s count; every run of a cell generates the same "
            "tokens). vLLM's figures also count the run's warm-up requests.", "",
            *md_table(["concurrency", "server", "reps",
                       *(label for _, label, _ in TTFT_STAGES)], rows)]


def cpu_table(rs: RunSet) -> list[str]:
    """CPU time per generated token of each server's front end and engine
    (RunSet.cpu_per_token); empty for run sets that predate the record."""
    rows = [[c, v, st["reps"], f"{st['front']:.3f}", f"{st['engine']:.3f}",
             f"{st['front'] / st['engine']:.2f}" if st["engine"] else None]
            for c in rs.conc() for v in rs.variants() if (st := rs.cpu_per_token(v, c))]
    if not rows:
        return []
    return ["CPU time per generated token (ms, user + system, over each run's `vllm bench "
            "serve` call with its warm-ups; medians over the repetitions), from each "
            "process's own CPU clock (`placement` in each run's JSON): the front end (every "
            "process of the server but vLLM's engine processes: HTTP, tokenization, "
            "detokenization, streaming) and the engine (`VLLM::EngineCore`, and the "
            "`VLLM::Worker` processes where the model runs apart from it).", "",
            *md_table(["concurrency", "server", "reps", "front end ms / token",
                       "engine ms / token", "front end / engine"], rows)]


def config_rows(cfg: dict) -> Iterable[list[object]]:
    for k, v in cfg.items():
        yield [k, f"`{json.dumps(v)}`" if isinstance(v, dict | list) else v]


def evidence_table(sets: list[RunSet]) -> list[str]:
    rows = []
    for rs in sets:
        for v in rs.meta["servers"]:
            e = engine_evidence(rs.log_lines(v))
            rows.append([rs.label, v, e["config_digest"] and f"`{e['config_digest']}`",
                         e["config_chars"] or None, e["kv_cache_tokens"],
                         ("yes" if e["async_scheduling"] else "no") if e["config_digest"]
                         else None, ", ".join(e["max_num_batched_tokens"]) or None])
    return md_table(["run set", "server", "digest of the engine's resolved 'with config:' "
                     "line", "its length (chars)", "GPU KV cache size (tokens)",
                     "asynchronous scheduling", "max_num_batched_tokens in the log"], rows)


# --------------------------------------------------------------------------- targets
def targets(sets: list[RunSet], stats: dict[str, Stats]) -> list[list[object]]:  # noqa: C901
    """Every target of issue #14 these run sets can answer, each within one run set."""
    rows: list[list[object]] = []
    for rs in sets:
        st = stats[rs.label]
        for c in rs.conc():
            if s := st.get(("specgw", "vllm", c)):
                rows.append([str(T_SPEED), rs.label, c, s["ratio"].text("{:.3f}"),
                             verdict(T_SPEED.met(s["ratio"].median)),
                             reps_meeting(s["ratios"], T_SPEED)])
        for c in rs.conc():
            a, b = rs.values("specgw", c, "output_throughput"), rs.values("vllm", c,
                                                                          "output_throughput")
            if a and b:
                d = rel_spread(a) - rel_spread(b)
                rows.append([str(T_SPREAD), rs.label, c,
                             f"specgw {rel_spread(a):.0f}% vs vllm {rel_spread(b):.0f}%",
                             verdict(T_SPREAD.met(d)), None])
        for a in ("specgw", "specgw-poll-1s"):
            for c in rs.conc():
                if s := st.get((a, "specgw-probes-off", c)):
                    over = [100 * (1 - x) for x in s["ratios"]]
                    rows.append([f"{T_PROBES} ({a})", rs.label, c,
                                 Spread.of(over).text("{:+.1f}") + " %",
                                 verdict(T_PROBES.met(statistics.median(over))),
                                 reps_meeting(over, T_PROBES)])
        if "router" in rs.variants() and not st.get(("router", "vllm", 64)):
            rows.append([str(T_ROUTER), rs.label, 64, "no c=64 run", verdict(None), None])
        if s := st.get(("router", "vllm", 64)):
            rows.append([str(T_ROUTER), rs.label, 64, s["ratio"].text("{:.3f}"),
                         verdict(T_ROUTER.met(s["ratio"].median)),
                         reps_meeting(s["ratios"], T_ROUTER)])
            if s["ttft_add"]:
                rows.append([str(T_ROUTER_TTFT), rs.label, 64, s["ttft_add"].text("{:+.1f}"),
                             verdict(T_ROUTER_TTFT.met(s["ttft_add"].median)),
                             reps_meeting(s["ttft_adds"], T_ROUTER_TTFT)])
        for v in rs.variants():
            done, failed = rs.requests(v)
            rows.append([f"{T_FAILED} ({v})", rs.label, "all", f"{failed} of {done + failed}",
                         verdict(T_FAILED.met(failed)), None])
    for what, a, b in (("probe overhead at poll 1 s", "specgw-poll-1s", "specgw-probes-off"),
                       ("each server's defaults", "specgw-defaults", "vllm-defaults")):
        if not any((a, b, c) in stats[rs.label] for rs in sets for c in rs.conc()):
            rows.append([what, "-", "-", f"no run set has both `{a}` and `{b}`", verdict(None),
                         None])
    return rows


def resolution(stats: dict[str, Stats]) -> list[str]:
    """How wide the probe-overhead error bars are next to the 1 % target."""
    w = [100 * (s["ratio"].hi - s["ratio"].lo) for st in stats.values()
         for (a, b, _), s in st.items() if b == "specgw-probes-off"]
    if not w:
        return []
    return [f"The probe-overhead error bars (min-max over paired repetitions) are "
            f"{min(w):.0f}-{max(w):.0f} points wide against a {T_PROBES.threshold:g}% target: "
            "these runs do not resolve the overhead at that level, whichever side the median "
            "falls on.", ""]


# ------------------------------------------------------------------------ the swings
def noise_table(sets: list[RunSet], v: str = "vllm") -> list[str]:
    """The same server configuration in every run set, side by side (never divided)."""
    have = [rs for rs in sets if any(vv == v for vv, _ in rs.cells)]
    cs = sorted({c for rs in have for c in rs.conc()})
    rows = []
    for c in cs:
        row: list[object] = [c]
        meds = []
        for rs in have:
            vals = rs.values(v, c, "output_throughput")
            row += [Spread.of(vals).text() if vals else None,
                    f"{rel_spread(vals):.0f}%" if vals else None]
            meds.append(statistics.median(vals) if vals else None)
        ok = [m for m in meds if m]
        row.append(f"{max(ok) / min(ok):.2f}x" if len(ok) > 1 else None)
        rows.append(row)
    heads = [h for rs in have for h in (f"{rs.label} tok/s median (min-max)",
                                        f"{rs.label} spread")]
    return md_table(["concurrency", *heads, "largest / smallest median"], rows)


def spread_table(sets: list[RunSet]) -> list[str]:
    cs = sorted({c for rs in sets for c in rs.conc()})
    rows = [[rs.label, v, *(f"{rel_spread(x):.0f}% ({max(x) / min(x):.2f}x)"
                            if (x := rs.values(v, c, "output_throughput")) else None
                            for c in cs)]
            for rs in sets for v in rs.variants()]
    return md_table(["run set", "server", *(f"c={c}" for c in cs)], rows)


def rep_table(rs: RunSet, cs: Sequence[int]) -> list[str]:
    rows = []
    for c in cs:
        for v in rs.variants():
            for r in rs.runs(v, c):
                b = r["bench"]
                rows.append([c, v, r["rep"], r["position"], f"{b['output_throughput']:.0f}",
                             f"{b['duration']:.2f}", f"{b['median_tpot_ms']:.2f}",
                             f"{b['median_ttft_ms']:.0f}", f"{b['p90_ttft_ms']:.0f}",
                             f"{b['p99_ttft_ms']:.0f}", f"{b['mean_ttft_ms']:.0f}",
                             b.get("failed")])
    return md_table(["c", "server", "rep", "position in rep", "output tok/s", "duration s",
                     "TPOT p50 ms", "TTFT p50 ms", "TTFT p90", "TTFT p99", "TTFT mean",
                     "failed"], rows)


def count_pairs(rs: RunSet, a: str, c: int, key: str,
                test: Callable[[float, float], bool]) -> tuple[int, int]:
    p = rs.paired(a, "vllm", c, key)
    return sum(test(x, y) for x, y in p), len(p)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    def ranks(v: Sequence[float]) -> list[int]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        return [order.index(i) for i in range(len(v))]

    rx, ry = ranks(x), ranks(y)
    n = len(x)
    return 1 - 6 * sum((a - b) ** 2 for a, b in zip(rx, ry, strict=True)) / (n * (n * n - 1))


def slowest(rs: RunSet, v: str, c: int, r: dict) -> str:
    """'2nd slowest of 5': where run ``r`` ranks among ``v``'s repetitions by tok/s."""
    vals = sorted(rs.values(v, c, "output_throughput"))
    k = vals.index(r["bench"]["output_throughput"]) + 1
    if k in (1, len(vals)):
        return f"{'slowest' if k == 1 else 'fastest'} of {len(vals)}"
    return f"{k}{({2: 'nd', 3: 'rd'}).get(k, 'th')} slowest of {len(vals)}"


def swing_summary(sets: list[RunSet], cs: Sequence[int]) -> list[str]:
    """The reading of the swings, each number computed from the runs."""
    cells = [(rs, v, c) for rs in sets for v in rs.variants() for c in cs
             if v != "router" and len(rs.values(v, c, "output_throughput")) > 1]
    rho = {k: statistics.median(spearman(rs.values(v, c, "output_throughput"),
                                         rs.values(v, c, k)) for rs, v, c in cells)
           for k in ("median_tpot_ms", "mean_ttft_ms")}
    dur = [r["bench"]["duration"] for rs, v, c in cells for r in rs.runs(v, c)]
    n = {c: {r["bench"]["completed"] + r["bench"]["failed"] for rs, v, cc in cells
             if cc == c for r in rs.runs(v, c)} for c in cs}
    mm = {(rs.label, v, c): max(x) / min(x) for rs, v, c in cells
          if (x := rs.values(v, c, "output_throughput"))}
    sg = [x for (_, v, _), x in mm.items() if v.startswith("specgw")]
    return [
        "* Not specgw only: `vllm serve`'s slowest to fastest repetition is "
        + ", ".join(f"{x:.2f}x ({lab}, c={c})" for (lab, v, c), x in mm.items() if v == "vllm")
        + (f"; specgw's variants {min(sg):.2f}x-{max(sg):.2f}x." if sg else
           " (no specgw variant ran at these concurrencies)."),
        f"* Over the repetitions of each (run set, server, concurrency) cell at c="
        f"{'/'.join(map(str, cs))}, the median Spearman rank correlation of output tok/s "
        f"with TPOT p50 is {rho['median_tpot_ms']:+.2f} and with mean TTFT "
        f"{rho['mean_ttft_ms']:+.2f} ({len(cells)} cells): slow repetitions go with "
        + ("a slower decode pace (TPOT) more consistently than with a later first token."
           if abs(rho["median_tpot_ms"]) > abs(rho["mean_ttft_ms"]) else
           "a later first token more consistently than with a slower decode pace (TPOT)."),
        f"* Each run is short: {min(dur):.2f}-{max(dur):.2f} s of benchmark duration "
        "(" + ", ".join(f"c={c}: {'/'.join(map(str, sorted(k)))} requests"
                        for c, k in n.items()) + f"); a 0.5 s stall is "
        f"{50 / statistics.median(dur):.0f}% of the median duration.",
        "* What the data do not establish: the cause of those TPOT and TTFT excursions "
        "(no host-side measurements, no per-request timings were kept).",
    ]


def tail_requests(r: dict, ceiling: float) -> str:
    """Which requests of run ``r`` waited longer than ``ceiling`` ms for their first token,
    when the run kept per-request timings."""
    b = r["bench"]
    late = [s for s, t in zip(b.get("request_start_ms", []), b.get("request_ttft_ms", []),
                              strict=True) if t > ceiling]
    if not late:
        return ""
    return (f", {len(late)} requests over {ceiling:.0f} ms, started {min(late):.0f}-"
            f"{max(late):.0f} ms after the run's first request")


def swing_findings(sets: list[RunSet], cs: Sequence[int]) -> list[str]:
    """The statements about the swings, every number computed here."""
    out = []
    for rs in sets:
        for c in cs:
            if not rs.values("vllm", c, "output_throughput"):
                continue
            mm = {v: (max(x) / min(x)) for v in rs.variants() if v != "router"
                  if (x := rs.values(v, c, "output_throughput"))}
            out.append(f"* {rs.label}, c={c}: slowest to fastest repetition, output tok/s: "
                       + ", ".join(f"{v} {x:.2f}x" for v, x in mm.items()) + ".")
            for v in rs.variants():
                if v in ("vllm", "router") or not rs.runs(v, c):
                    continue
                lo_ttft = count_pairs(rs, v, c, "median_ttft_ms", lambda x, y: x < y)
                hi_tpot = count_pairs(rs, v, c, "median_tpot_ms", lambda x, y: x > y)
                out.append(f"  * {v} vs vllm in the same repetition: TTFT p50 lower in "
                           f"{lo_ttft[0]} of {lo_ttft[1]}, TPOT p50 higher in {hi_tpot[0]} "
                           f"of {hi_tpot[1]}.")
            ceiling = max(rs.values("vllm", c, "p99_ttft_ms"))
            others = [v for v in rs.variants() if v not in ("vllm", "router")]
            tails = [(v, r) for v in others for r in rs.runs(v, c)
                     if r["bench"]["p99_ttft_ms"] > ceiling]
            n = sum(len(rs.runs(v, c)) for v in others)
            out.append(f"  * TTFT p99 above the highest of vllm serve's "
                       f"{len(rs.runs('vllm', c))} runs ({ceiling:.0f} ms): {len(tails)} of {n} "
                       f"runs of {', '.join(others)}"
                       + (": " + "; ".join(
                           f"{v} rep {r['rep']} p90/p99 {r['bench']['p90_ttft_ms']:.0f}/"
                           f"{r['bench']['p99_ttft_ms']:.0f} ms, "
                           f"{r['bench']['output_throughput']:.0f} tok/s ({slowest(rs, v, c, r)})"
                           + tail_requests(r, ceiling)
                           for v, r in tails) if tails else "") + ".")
    return out


# ---------------------------------------------------------------------------- router
def router_clock_lines(rs: RunSet) -> list[str]:
    """What the router's own histograms say per run (``router_timing``): its share of each
    stream's time to first byte, apart from the backend's, which the client's TTFT
    difference between two runs cannot separate from the backend's run-to-run noise."""
    out = []
    for c in rs.conc():
        added = rs.record_values("router", c, "router_timing", "added_p50_ms")
        mean = rs.record_values("router", c, "router_timing", "added_mean_ms")
        ttfb = rs.record_values("router", c, "router_timing", "backend_ttfb_p50_ms")
        if added and mean and ttfb:
            out.append(f"* c={c}, the router's own clock ({len(added)} runs, median (min-max) "
                       f"of each run's value): added before the first byte p50 "
                       f"{Spread.of(added).text('{:.3f}')} ms, mean "
                       f"{Spread.of(mean).text('{:.3f}')} ms; the backend's time to first "
                       f"byte p50 {Spread.of(ttfb).text('{:.1f}')} ms.")
    return out


def router_section(rs: RunSet, stats: Stats) -> list[str]:
    ev = router_events(rs.log_lines("router"))
    windows = [(r["started"], r["started"] + r["wall_s"], r) for (v, _), rr in rs.cells.items()
               if v == "router" for r in rr]

    def which_run(line: str) -> str:
        try:
            t = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC)
        except ValueError:
            return "?"
        hit = [r for lo, hi, r in windows if lo <= t.timestamp() <= hi + 1]
        return (f"c={hit[0]['concurrency']} rep {hit[0]['rep']}" if hit
                else "outside every router run")

    failed = [r for _, _, r in sorted(windows, key=lambda w: w[0]) if r["bench"].get("failed")]
    lines = [f"Run set `{rs.label}`: `specgw serve --backend engine=<vllm serve of the same "
             "set>` against that `vllm serve` directly; medians (min-max) over the paired "
             "repetitions.", ""]
    for c in rs.conc():
        if s := stats.get(("router", "vllm", c)):
            itl = [statistics.median(rs.values(v, c, "median_itl_ms")) for v in ("router", "vllm")]
            lines.append(f"* c={c}: router / direct output tok/s {s['ratio'].text('{:.2f}')}, "
                         f"TTFT p50 difference {s['ttft_add'].text('{:+.1f}')} ms; "
                         f"inter-token latency p50 through the router {itl[0]:.2f} ms, "
                         f"directly {itl[1]:.2f} ms.")
    lines += router_clock_lines(rs)
    lines.append("* Runs with failed requests: " + ("; ".join(
        f"c={r['concurrency']} rep {r['rep']}: {r['bench']['failed']} failed of "
        f"{r['bench']['failed'] + r['bench']['completed']}" for r in failed) or "none") + ".")
    lines.append(f"* The router's log: {len(ev['failover'])} `failover:` warnings, "
                 f"{len(ev['ejected'])} ejection(s); each placed in the router run it fell "
                 "in by its timestamp:")
    lines += [f"  * `{ln.strip()}` ({which_run(ln)})" for ln in ev["failover"] + ev["ejected"]]
    statuses = [ln.rsplit('" ', 1)[-1].split()[0] for ln in rs.log_lines("vllm")
                if "POST /v1/completions HTTP/1.1" in ln]
    if statuses:
        counts = {s: statuses.count(s) for s in sorted(set(statuses))}
        lines.append("* `vllm serve`'s own access log over the whole run set, POST "
                     "/v1/completions by status: " + ", ".join(f"{s}: {n}"
                                                                for s, n in counts.items()) + ".")
    return lines


def profile_section(rs: RunSet) -> list[str]:
    """Where each server's processes spend their CPU per engine step, from the py-spy
    samples of a ``--py-spy`` run set (nothing for the others)."""
    pr = Profiles.load(rs)
    if pr is None:
        return []
    vs = rs.variants()
    pairs = [(a, b) for a, b in (("specgw", "vllm"), ("specgw", "specgw-probes-off"),
                                 ("specgw-probes-off", "vllm")) if a in vs and b in vs]
    return ["### Where the servers' CPU goes, per engine step (py-spy)", "",
            *profile_lines(pr, vs, pairs, rs.conc()), ""]


# ------------------------------------------------------------------------------ plot
def plot(rs: RunSet, stats: Stats, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    cs = rs.conc()
    probes = [(a, b, w) for a, b, w in PAIRS if b == "specgw-probes-off"
              and any((a, b, c) in stats for c in cs)]
    n = len(METRICS) + 1 + bool(probes)
    fig, axes = plt.subplots(1, n, figsize=(5 * n, 4))
    vs = rs.variants()
    off = lambda i: (i - (len(vs) - 1) / 2) * 0.08  # noqa: E731  side by side, not on top
    for ax, (key, label, _) in zip(axes, METRICS, strict=False):
        for i, v in enumerate(vs):
            pts = [(j, Spread.of(x)) for j, c in enumerate(cs) if (x := rs.values(v, c, key))]
            ax.errorbar([j + off(i) for j, _ in pts], [s.median for _, s in pts],
                        yerr=[[s.median - s.lo for _, s in pts], [s.hi - s.median for _, s in pts]],
                        fmt="o-", capsize=3, label=v, color=COLOR[v])
        ax.set_title(f"{label}: median, min-max")
        if key == "output_throughput":
            ax.set_yscale("log")
    axes[0].legend(fontsize=8)

    def ratio_panel(ax, pairs, f, title: str, line: float, target: float | None) -> None:
        for i, (a, b, _) in enumerate(pairs):
            pts = [(j, Spread.of([f(x) for x in stats[(a, b, c)]["ratios"]]))
                   for j, c in enumerate(cs) if (a, b, c) in stats]
            ax.errorbar([j + off(i) for j, _ in pts], [s.median for _, s in pts],
                        yerr=[[s.median - s.lo for _, s in pts], [s.hi - s.median for _, s in pts]],
                        fmt="o-", capsize=3, label=f"{a} / {b}", color=COLOR[a])
        ax.axhline(line, color="grey", lw=0.5)
        if target is not None:
            ax.axhline(target, color="red", ls="--", lw=1, label="target")
        ax.set_title(title)
        ax.legend(fontsize=7)

    ratio_panel(axes[len(METRICS)], [p for p in PAIRS if p[1] == "vllm" and any(
        (p[0], p[1], c) in stats for c in cs)], lambda x: x,
        "paired ratio to vllm serve, tok/s (median, min-max)", 1.0, None)
    if probes:
        ratio_panel(axes[-1], probes, lambda x: 100 * (1 - x),
                    "probe overhead % (median, min-max)", 0.0, T_PROBES.threshold)
    for ax in axes:
        ax.set_xticks(range(len(cs)), [str(c) for c in cs])
        ax.set_xlabel("concurrency")
    fig.suptitle(f"{rs.label}: {rs.meta['device_name']}, vLLM {rs.meta['vllm']}, "
                 f"{rs.meta['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


# ---------------------------------------------------------------------------- document
def protocol_text(rs: RunSet) -> str:
    p = rs.meta["protocol"]
    return (f"`{rs.label}` (`{rs.src}`): {rs.meta['device_name']} ({rs.meta['device']}), "
            f"vLLM {rs.meta['vllm']}, torch {rs.meta['torch']}, servers up at "
            f"{rs.meta['date']}; servers {', '.join(f'`{v}`' for v in rs.variants())}; "
            f"{p['reps']} repetitions, concurrency {', '.join(map(str, p['concurrency']))}; "
            f"per run `vllm bench serve`, random dataset, input {p['input_len']} / output "
            f"{p['output_len']} tokens, `--ignore-eos`, greedy, max({p['min_prompts']}, "
            f"{p['prompts_per_client']} x concurrency) prompts after {p['num_warmups']} "
            "warm-up requests" + (f"; each server pinned to {p['pin']} CPUs of its own, the "
                                  "client to the rest" if p.get("pin") else "") + ".")


def not_measured(sets: list[RunSet]) -> list[str]:
    ran = {v for rs in sets for v in rs.variants()}
    lines = [f"* Servers `benchmarks/serve_compare.py` offers that no run set ran: "
             f"{', '.join(f'`{v}`' for v in ALL_VARIANTS if v not in ran) or 'none'}."]
    for a, b, what in PAIRS:
        if a in ran and b in ran and not any((a, b) == (va, vb) for rs in sets
                                             for va in rs.variants() for vb in rs.variants()):
            lines.append(f"* `{a}` / `{b}` ({what}): both ran, but in different run sets, so "
                         "no ratio is computed.")
    if not any("request_ttft_ms" in r["bench"] for rs in sets for rr in rs.cells.values()
               for r in rr):
        lines.append("* Per-request timings: these runs kept `vllm bench serve`'s summary "
                     "fields only, so which requests make up a TTFT tail (the first wave, or "
                     "a later one) is not in the data (`serve_compare.py` now keeps each "
                     "request's start and TTFT).")
    return lines


def document(sets: list[RunSet], out: Path, title: str) -> list[str]:
    stats = {rs.label: pair_stats(rs) for rs in sets}
    srcs = " ".join(f"--src {rs.src}" for rs in sets)
    lines = [f"# {title}", "",
             "<!-- Generated by benchmarks/serve_compare_report.py from the raw JSON; do not "
             "edit by hand. -->", "",
             f"`python -m benchmarks.serve_compare_report {srcs} --out {out}"
             + (f" --title {shlex.quote(title)}" if title != TITLE else "") + "`. Raw data: "
             "`runs/*.json` (one `vllm bench serve` run each), `servers.json` (argv, stated "
             "engine configuration), `logs/` (each server's log, gzipped; where kept) under "
             "each run set's directory. Protocol (`benchmarks/serve_compare.py`): the servers "
             "of a run set are started one after another and stay warm together; in every "
             "repetition each server runs each concurrency once, the server order rotated "
             "per repetition.", "",
             *(f"* {protocol_text(rs)}" for rs in sets), ""]
    if len(sets) > 1:
        lines += ["Each run set is its own set of server processes at its own time. Ratios "
                  "and verdicts only divide servers of the same run set; `vllm serve` "
                  "appears in several and is shown side by side under *Run-to-run noise*, "
                  "never used across sets.", ""]
    lines += ["## Against the targets of issue #14", "",
              "Met or not on the median over paired repetitions; the last column says how "
              "many single repetitions would meet it.", "",
              *md_table(["target", "run set", "concurrency", "measured: median (min-max)",
                         "met?", "repetitions meeting it"], targets(sets, stats)), "",
              *resolution(stats),
              "## Engine configuration", "",
              "Stated by the harness (`servers.json`, the same for every server of every "
              "run set):", "", *md_table(["setting", "value"],
                                         config_rows(sets[0].meta["engine_config"])), "",
              "What each engine logged (the router has no engine of its own):", "",
              *evidence_table(sets), ""]
    for rs in sets:
        png = (out.with_suffix(".png") if len(sets) == 1
               else out.with_name(f"{out.stem}_{rs.label}.png"))
        lines += [f"## Run set `{rs.label}`", "",
                  *([f"![error bars]({png.name})", ""] if plot(rs, stats[rs.label], png)
                    else []),
                  *main_table(rs), "",
                  "Ratios, each dividing two runs of the same repetition and concurrency; "
                  "median and min-max over the repetitions:", "",
                  *ratio_table(rs, stats[rs.label]), "",
                  *([*stages, ""] if (stages := ttft_stage_table(rs)) else []),
                  *([*cpu, ""] if (cpu := cpu_table(rs)) else []),
                  *profile_section(rs)]
    big = [c for c in (64, 128) if any(c in rs.conc() for rs in sets)]
    lines += ["## Run-to-run noise", "",
              "`vllm serve` with the same configuration in each run set (side by side, not "
              "divided):", "", *noise_table(sets), "",
              "Spread of output tok/s over the repetitions of each server: (max - min) / "
              "median (max / min):", "", *spread_table(sets), ""]
    if big:  # the swings issue #14 asks about are at c=64 (and 128)
        lines += [f"## The swings at c={' and c='.join(map(str, big))}", "",
                  *(ln for rs in sets for ln in [f"`{rs.label}`:", "", *rep_table(rs, big),
                                                 ""]),
                  "Reading:", "", *swing_summary(sets, big), "",
                  "Per run set and concurrency:", "", *swing_findings(sets, big), ""]
    routed = [rs for rs in sets if "router" in rs.variants()]
    if routed:
        lines += ["## Router", "", *(ln for rs in routed
                                     for ln in router_section(rs, stats[rs.label])), ""]
    lines += ["## Not measured", "", *not_measured(sets), "", "## Servers", "",
              *(f"* `{rs.label}` `{v}`: `{' '.join(s['argv'][2:])}`" for rs in sets
                for v, s in rs.meta["servers"].items())]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, action="append", required=True,
                    help="serve_compare.py --out dir (repeat for several run sets)")
    ap.add_argument("--out", type=Path, default=Path("docs/serve_compare.md"))
    ap.add_argument("--title", default=TITLE)
    a = ap.parse_args()
    sets = [RunSet.load(s) for s in a.src]
    labels = [rs.label for rs in sets]
    if len(set(labels)) != len(labels):
        ap.error(f"run set directories need distinct names, got {labels}")
    lines = document(sets, a.out, a.title)
    write(a.out, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
