"""docs/seed_bug.md from the seed-bug runs (``benchmarks/seed_bug_gpu.py``): a table per
runner, a plot of the drafter's silent-eager counter and graph hit ratio over time, and
verdicts computed here from the raw scrapes.

Usage: ``python -m benchmarks.seed_bug_report --runs docs/seed_bug --out docs/seed_bug.md``
(``--plot`` defaults to the .md path with .png). ``alert_check.json`` in the runs folder
(from ``benchmarks/seed_bug_alert.py``) adds the alert verdicts; ``discarded_*/``
subfolders (archived attempts) are named with what disqualifies them, never used.
Summaries are always recomputed here from the scrapes (a stored ``summary`` may come
from older code).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
from pathlib import Path

from benchmarks import seed_bug_provenance as prov
from benchmarks.report import Spread, md_table

_SERIES = re.compile(r'^([^{]+)\{(.*)\}$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
KINDS = (("graph", "specgw_cudagraph_replayed_forwards_total"),
         ("partial", "specgw_partial_graph_forwards_total"),
         ("eager", "specgw_eager_forwards_total"),
         ("unknown", "specgw_unknown_forwards_total"))
PHASES = ("first_pass", "draft_step")
NOISE = 0.05  # tokens/s medians within 5% (or overlapping per-round ranges) = same


def parse_series(sid: str) -> tuple[str, dict[str, str]]:
    m = _SERIES.match(sid)
    if not m:
        return sid, {}
    return m.group(1), dict(_LABEL.findall(m.group(2)))


def total(values: dict[str, float], name: str, **labels: str) -> float:
    out = 0.0
    for sid, v in values.items():
        n, ls = parse_series(sid)
        if n == name and all(ls.get(k) == want for k, want in labels.items()):
            out += v
    return out


def delta(first: dict, last: dict, name: str, **labels: str) -> float:
    return total(last, name, **labels) - total(first, name, **labels)


def ratio(num: float, den: float) -> float | None:
    return round(num / den, 4) if den else None


def role_counts(first: dict, last: dict, role: str = "draft", **labels: str) -> dict:
    """One role's forwards over the window: by executed kind, silent eager, pieces."""
    sel = {"role": role, **labels}
    c = {kind: delta(first, last, name, **sel) for kind, name in KINDS}
    c["all"] = delta(first, last, "specgw_model_forwards_total", **sel)
    c["silent_eager"] = delta(first, last, "specgw_silent_eager_forwards_total", **sel)
    c["pieces_replayed"] = delta(first, last, "specgw_cudagraph_pieces_replayed_total", **sel)
    c["pieces_expected"] = delta(first, last, "specgw_cudagraph_pieces_expected_total", **sel)
    c["hit_ratio"] = ratio(c["graph"], c["all"])
    c["piece_coverage"] = ratio(c["pieces_replayed"], c["pieces_expected"])
    return c


def silent_growth(scrapes: list[dict]) -> dict:
    """Scrape intervals in which the drafter ran, and in how many of them the silent-eager
    counter grew too ("growing with every decode step", at scrape resolution)."""
    active = grew = 0
    for prev, cur in itertools.pairwise(scrapes):
        if delta(prev["values"], cur["values"], "specgw_model_forwards_total", role="draft"):
            active += 1
            if delta(prev["values"], cur["values"], "specgw_silent_eager_forwards_total",
                     role="draft"):
                grew += 1
    return {"active_intervals": active, "silent_grew_intervals": grew}


def summarize_run(run: dict) -> dict:
    scrapes = run.get("scrapes") or []
    if len(scrapes) < 2:
        return {"error": "fewer than two scrapes"}
    first, last = scrapes[0]["values"], scrapes[-1]["values"]
    tps = [r["tokens_per_s"] for r in run.get("rounds", []) if not r.get("warmup")]
    sc = run.get("self_check") or {}
    captures: dict[str, int] = {}
    for snap in run.get("probes") or []:
        for role, n in snap.get("captures", {}).items():
            captures[role] = captures.get(role, 0) + n
    return {
        "self_check_warnings": sc.get("warnings", []),
        "self_check_notes": [n for r in sc.get("reports", []) for n in r.get("notes", [])],
        "expected": (sc.get("reports") or [{}])[0].get("expected"),
        "draft": role_counts(first, last),
        "draft_by_phase": {ph: role_counts(first, last, phase=ph) for ph in PHASES},
        "target": role_counts(first, last, role="target"),
        # Mixed batches (prefill + decode) are dispatched PIECEWISE on the target: on V2
        # these are the steps whose drafter first pass is PIECEWISE too.
        "target_piecewise": delta(first, last, "specgw_cudagraph_replayed_forwards_total",
                                  role="target", mode="piecewise"),
        "silent_growth": silent_growth(scrapes),
        "captures": captures,
        "tokens_per_s": tps,
        "tokens_per_s_median": statistics.median(tps) if tps else None,
        "window_s": round(scrapes[-1]["t"] - scrapes[0]["t"], 2),
        "scrapes": len(scrapes),
    }


# ------------------------------------------------------------------ verdicts
def same_speed(a: dict, b: dict) -> tuple[bool, str]:
    """Same tokens/s within noise: per-round ranges overlap or medians within NOISE; the
    detail says which held, so a pass on overlap alone is visible as such."""
    ta, tb = a["tokens_per_s"], b["tokens_per_s"]
    if not ta or not tb:
        return False, "no rounds"
    sa, sb = Spread.of(ta), Spread.of(tb)
    overlap = sa.lo <= sb.hi and sb.lo <= sa.hi
    rel = sb.median / sa.median - 1
    close = abs(rel) <= NOISE
    basis = ("medians within 5% and ranges overlap" if close and overlap else
             "medians within 5%" if close else
             f"ranges overlap only; medians differ by {rel:+.0%}" if overlap else
             f"ranges apart, medians differ by {rel:+.0%}")
    return overlap or close, f"{sa.text()} vs {sb.text()} tok/s: {basis}"


def verdicts(runner: str, s: dict[str, dict], alerts: dict) -> list[tuple[str, bool, str]]:
    """(claim, holds, detail from the data) for one runner's cases a/b/c (those that ran)."""
    out: list[tuple[str, bool, str]] = []
    a, b, c = s.get("a"), s.get("b"), s.get("c")

    def alert_quiet(case: str) -> None:
        res = alerts.get(f"{runner}_{case}")
        if res is not None:
            out.append((f"({case}) SpecgwDrafterEagerFallback stays quiet (promtool)",
                        bool(res.get("ok")) and res.get("fires") is False,
                        res.get("summary", "")))

    if a:
        d = a["draft"]
        out.append(("(a) normal: drafter piece coverage 1.000", d["piece_coverage"] == 1.0,
                    f"{fmt(d['pieces_replayed'])} / {fmt(d['pieces_expected'])} pieces"))
        out.append(("(a) normal: silent eager 0", d["silent_eager"] == 0,
                    f"{fmt(d['silent_eager'])} of {fmt(d['all'])} drafter forwards"))
        out.append(("(a) normal: no self-check warning", not a["self_check_warnings"],
                    f"{len(a['self_check_warnings'])} warnings"))
        alert_quiet("a")
    if b:
        out.append(("(b) bug, fix off: self-check warning at start-up",
                    bool(b["self_check_warnings"]), f"{len(b['self_check_warnings'])} warnings"))
        g = b["silent_growth"]
        if runner == "v1":
            out.append(("(b) bug, fix off: silent eager grew in every scrape interval the "
                        "drafter ran", g["active_intervals"] > 0
                        and g["silent_grew_intervals"] == g["active_intervals"],
                        f"{g['silent_grew_intervals']} of {g['active_intervals']} intervals"))
            out.append(("(b) bug, fix off: drafter hit ratio 0", b["draft"]["hit_ratio"] == 0,
                        f"{fmt(b['draft']['graph'])} graph of {fmt(b['draft']['all'])}"))
        else:
            fp, st = b["draft_by_phase"]["first_pass"], b["draft_by_phase"]["draft_step"]
            out.append(("(b) bug, fix off: silent eager > 0, all in first passes "
                        "(mixed batches dispatched PIECEWISE)",
                        b["draft"]["silent_eager"] > 0
                        and fp["silent_eager"] == b["draft"]["silent_eager"],
                        f"{fmt(fp['silent_eager'])} of {fmt(fp['all'])} first passes, "
                        f"{fmt(b['draft']['silent_eager'] - fp['silent_eager'])} elsewhere; "
                        f"target PIECEWISE (mixed-batch) forwards in the window: "
                        f"{fmt(b.get('target_piecewise'))}"))
            out.append(("(b) bug, fix off: draft steps still FULL graphs (hit ratio 1)",
                        st["hit_ratio"] == 1.0,
                        f"{fmt(st['graph'])} graph of {fmt(st['all'])} draft steps"))
        res = alerts.get(f"{runner}_b")
        if res is not None:
            out.append(("(b) bug, fix off: SpecgwDrafterEagerFallback fires (promtool), one "
                        "evaluation interval after the first evaluation that sees the "
                        "counter grow, not before", bool(res.get("ok")) and bool(res.get("fires")),
                        res.get("summary", "")))
    if a and b and runner == "v1":
        same, detail = same_speed(a, b)
        out.append(("(b) slower than (a)",
                    (b["tokens_per_s_median"] or 0) < (a["tokens_per_s_median"] or 0)
                    and not same, detail))
    if c:
        d = c["draft"]
        out.append(("(c) bug, fix on: piece coverage 1.000, silent eager 0",
                    d["piece_coverage"] == 1.0 and d["silent_eager"] == 0,
                    f"{fmt(d['pieces_replayed'])} / {fmt(d['pieces_expected'])} pieces, "
                    f"{fmt(d['silent_eager'])} silent"))
        alert_quiet("c")
        if a:
            same, detail = same_speed(a, c)
            out.append(("(c) bug, fix on: tokens/s back to (a) within noise", same, detail))
    return out


# ------------------------------------------------------------------ rendering
def fmt(x, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float) and not x.is_integer():
        return f"{x:.{digits}f}"
    return f"{int(x)}" if isinstance(x, float) else str(x)


def fratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def table(runs: dict[str, dict]) -> list[str]:
    rows = []
    for name, run in runs.items():
        s = run.get("summary")
        if not s or "error" in s:
            why = run.get("error") or (s or {}).get("error")
            rows.append([f"{name} ({run.get('title')})", f"run failed: {why}",
                         *[""] * 6])
            continue
        by = s["draft_by_phase"]
        fw = "; ".join(
            " / ".join(fmt(by[ph][k]) for k in ("graph", "partial", "eager", "unknown"))
            for ph in PHASES)
        warn = "<br>".join(s["self_check_warnings"]) or "no warning"
        cap = " / ".join(str(s["captures"].get(r, 0)) for r in ("target", "draft", "unknown"))
        tps = ", ".join(f"{t:.0f}" for t in s["tokens_per_s"])
        rows.append([f"{name} ({run.get('title')})", warn, fw, fmt(s["draft"]["silent_eager"]),
                     fratio(s["draft"]["hit_ratio"]), fratio(s["draft"]["piece_coverage"]),
                     cap, f"{fmt(s['tokens_per_s_median'], 0)} ({tps})"])
    return md_table(["run", "self-check", "drafter forwards graph / partial / eager / "
                     "unknown (first pass; steps)", "silent eager", "hit ratio",
                     "piece coverage", "captures (target / draft / unknown)",
                     "tok/s median (measured rounds)"], rows)


def drafter_table(runs: dict[str, dict]) -> list[str]:
    """What each server was running, as its self-check reported it (rank 0)."""
    rows = []
    for name, run in runs.items():
        r = ((run.get("self_check") or {}).get("ranks") or [{}])[0]
        if not r:
            continue
        rows.append([name, f"`{r.get('runner_class')}`", r.get("cudagraph_mode"),
                     r.get("drafter_model_class"), r.get("drafter_compiled"),
                     r.get("drafter_compiled_by_specgw"),
                     ", ".join(f"{k}={v}" for k, v in sorted(run.get("env", {}).items()))
                     or "-"])
    return md_table(["run", "model runner", "cudagraph_mode", "drafter class",
                     "drafter compiled", "compiled by specgw", "env"], rows)


def round_rows(run: dict) -> list[dict]:
    """Per round: the work done (from the scrapes taken at its start and end) and time."""
    at = {s["t"]: s["values"] for s in run.get("scrapes") or []}
    out = []
    for i, r in enumerate(run.get("rounds") or []):
        a, b = at.get(r["t0"]), at.get(r["t1"])
        row = {"round": f"{i} (warm-up)" if r.get("warmup") else str(i),
               "warmup": bool(r.get("warmup")), "wall_s": r["wall_s"],
               "tokens": r["engine_tokens"], "tokens_per_s": r["tokens_per_s"]}
        if a is not None and b is not None:
            steps = delta(a, b, "specgw_model_forwards_total", role="target")
            row.update(
                steps=steps,
                mixed=delta(a, b, "specgw_cudagraph_replayed_forwards_total", role="target",
                            mode="piecewise"),
                drafts=delta(a, b, "vllm:spec_decode_num_drafts_total"),
                accepted=delta(a, b, "vllm:spec_decode_num_accepted_tokens_total"),
                silent=delta(a, b, "specgw_silent_eager_forwards_total", role="draft"),
                ms_per_step=1000 * r["wall_s"] / steps if steps else None)
        out.append(row)
    return out


def rounds_section(runs: dict[str, dict]) -> list[str]:
    rows, work, steps = [], set(), []
    for name, run in runs.items():
        for r in round_rows(run):
            rows.append([name, r["round"], f"{r['wall_s']:.3f}", fmt(r["tokens"]),
                         f"{r['tokens_per_s']:.0f}", fmt(r.get("steps")), fmt(r.get("mixed")),
                         fmt(r.get("drafts")), fmt(r.get("accepted")), fmt(r.get("silent")),
                         fmt(r.get("ms_per_step"), 2)])
            if not r["warmup"]:
                work.add((r["tokens"], r.get("drafts"), r.get("accepted")))
                steps += [r["steps"]] if r.get("steps") is not None else []
    out = ["## Rounds", "",
           "Per round, from the scrapes taken right before its first request and right "
           "after its last response: target forwards (engine steps), of them PIECEWISE "
           "(mixed prefill + decode batches), drafts and accepted draft tokens "
           "(`vllm:spec_decode_*`), drafter silent-eager forwards.", "",
           *md_table(["run", "round", "wall s", "tokens", "tok/s", "target steps",
                      "mixed steps", "drafts", "accepted", "silent eager", "ms / step"],
                     rows), ""]
    walls = [r["wall_s"] for run in runs.values() for r in round_rows(run) if not r["warmup"]]
    if len(work) == 1:
        tok, dr, acc = next(iter(work))
        out.append(f"Every measured round of every run did the same speculative work "
                   f"({fmt(tok)} tokens, {fmt(dr)} drafts, {fmt(acc)} accepted draft "
                   f"tokens) in {fmt(min(steps))}-{fmt(max(steps))} target steps: tokens/s "
                   f"differences between rounds and runs come from the time per step, not "
                   f"from acceptance. Measured rounds lasted "
                   f"{min(walls):.2f}-{max(walls):.2f} s.")
    elif work:
        out.append(f"The work per measured round differed ({len(work)} distinct "
                   "(tokens, drafts, accepted) triples): compare tokens/s with care.")
    return [*out, ""]


def series_over_time(run: dict) -> tuple[list[float], list[float], list[float | None]]:
    scrapes = run.get("scrapes") or []
    if not scrapes:
        return [], [], []
    t0, v0 = scrapes[0]["t"], scrapes[0]["values"]
    ts, silent, hit = [], [], []
    for s in scrapes:
        c = role_counts(v0, s["values"])
        ts.append(s["t"] - t0)
        silent.append(c["silent_eager"])
        hit.append(c["hit_ratio"])
    return ts, silent, hit


def plot(runs: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runners = sorted({r["runner"] for r in runs.values()})
    fig, axes = plt.subplots(len(runners), 2, figsize=(11, 3.6 * len(runners)),
                             squeeze=False)
    for row, runner in enumerate(runners):
        for run in runs.values():
            if run["runner"] != runner:
                continue
            ts, silent, hit = series_over_time(run)
            label = f"({run['case']}) {run.get('title')}"
            axes[row][0].plot(ts, silent, marker=".", label=label)
            axes[row][1].plot(ts, [h if h is not None else float("nan") for h in hit],
                              marker=".", label=label)
        axes[row][0].set_title(f"runner {runner}: drafter silent-eager forwards (cumulative)")
        axes[row][1].set_title(f"runner {runner}: drafter graph hit ratio (since first scrape)")
        axes[row][1].set_ylim(-0.05, 1.05)
        for ax in axes[row]:
            ax.set_xlabel("seconds since first scrape")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def load_runs(folder: Path) -> dict[str, dict]:
    runs = prov.read_runs(folder)
    for run in runs.values():
        run.pop("summary", None)
        if run.get("ok"):
            run["summary"] = summarize_run(run)
    return runs


def protocol(runs: dict[str, dict]) -> list[str]:
    any_run = next(iter(runs.values()), {})
    measured = sorted({sum(not r.get("warmup") for r in run.get("rounds") or [])
                       for run in runs.values() if run.get("ok")})
    order = sorted((w[0], n, w) for n, run in runs.items() if (w := prov.window(run)))
    windows = ", ".join(f"{n} {prov.hhmmss(w[0])}-{prov.hhmmss(w[1])}" for _, n, w in order)
    clash = prov.overlaps(runs)
    out = ["## Protocol", "",
           ("- One server at a time: " if not clash else "- ")
           + "`seed_bug_gpu.py` runs the cases one after another in one process, each in "
           "its own `specgw serve`, which it stops, waiting until its process group (engine "
           "core included) is gone before the next starts. Workload windows (first to last "
           f"/metrics scrape, UTC), in the order they ran: {windows}. "
           + (f"**Overlapping windows: {', '.join(f'{a} & {b}' for a, b in clash)}: "
              "those runs shared the GPU (more than one batch ran at once).**" if clash
              else "No two windows overlap."),
           f"- Per run: one warm-up round, then {'/'.join(map(str, measured))} measured "
           f"rounds; a round is {any_run.get('concurrency')} greedy completions of "
           f"{any_run.get('max_tokens')} tokens (`ignore_eos`), started "
           f"{any_run.get('stagger_s')} s apart so prefills join running decodes (mixed "
           f"batches); k={any_run.get('k')}, `max_num_seqs` {any_run.get('max_num_seqs')}.",
           "- tokens/s of a round: tokens generated as the engine counts them "
           "(`specgw_generation_tokens_total`, scraped right before the round's first request "
           "and right after its last response) divided by the round's wall time on the "
           "client (first request sent to last response received). Tables give the median "
           "of the measured rounds, every round in brackets; the warm-up round is left out.",
           "- Forward counts, silent eager, hit ratio and piece coverage are deltas from the "
           "first to the last /metrics scrape of the run (warm-up included).", ""]
    return out


def environment(folder: Path, runs: dict[str, dict]) -> list[str]:
    env = prov.environment(folder, runs)
    names = {"gpu": "GPU", "vllm": "vLLM", "torch": "torch", "python": "Python",
             "pair": "model pair", "date": "date (UTC)"}
    out = ["## Hardware and versions", ""]
    for key, label in names.items():
        if key in env:
            value, source = env[key]
            out.append(f"- {label}: {value} (from {source})")
        elif key in ("gpu", "vllm", "torch"):
            out.append(f"- {label}: not recorded by these runs")
    return [*out, ""]


def discarded(folder: Path) -> list[str]:
    """One line per archived attempt: why its numbers are not used (computed)."""
    out = []
    for sub in sorted(p for p in folder.glob("discarded_*") if p.is_dir()):
        runs = prov.read_runs(sub)
        if not runs:
            continue
        why = []
        clash = prov.overlaps(runs)
        if clash:
            why.append(f"its runs overlapped in time ({', '.join(f'{a} & {b}' for a, b in clash)}"
                       "), so servers shared the GPU and its tokens/s were measured under "
                       "contention")
        failed = {n: prov.failure_line(r) for n, r in runs.items() if not r.get("ok")}
        why += [f"{n} failed: {line}" for n, line in failed.items()]
        text = "; ".join(why).rstrip(".") or "it was superseded"
        out.append(f"- `{sub.name}/` (an earlier attempt, {len(runs)} runs, kept as archive): "
                   f"not used in any table or verdict here because {text}.")
    return ["## Discarded data", "", *out, ""] if out else []


def noise_reading(runner: str, summ: dict[str, dict], spread: dict[str, float]) -> list[str]:
    """Say so when a 'same speed' verdict rests on overlapping ranges alone."""
    a, c = summ.get("a"), summ.get("c")
    if not (a and c and a["tokens_per_s"] and c["tokens_per_s"]):
        return []
    rel = statistics.median(c["tokens_per_s"]) / statistics.median(a["tokens_per_s"]) - 1
    if abs(rel) <= NOISE or not same_speed(a, c)[0]:
        return []
    b = summ.get("b")
    ba = (f" ((b)/(a) {b['tokens_per_s_median'] / a['tokens_per_s_median']:.2f}x)"
          if b and b["tokens_per_s_median"] and a["tokens_per_s_median"] else "")
    return [f"Reading: on runner {runner} \"within noise\" rests on overlapping per-round "
            f"ranges only; the medians of (c) and (a) differ by {rel:+.0%}, while the "
            f"measured rounds of one run spread by {min(spread.values()):.0%}-"
            f"{max(spread.values()):.0%} of its median with the same speculative work in "
            "every round (see Rounds). This workload does not resolve throughput differences "
            f"of that size on runner {runner}: it shows neither a slowdown from the bug{ba} "
            "nor a gain from the fix; the runner's verdicts on the bug rest on the probe "
            "counts.", ""]


def render(runs: dict[str, dict], alerts: dict, plot_name: str,
           folder: Path = Path(".")) -> str:
    out = ["# The seed bug, measured: piece coverage, silent eager, self-check, alert", "",
           "Generated by `benchmarks/seed_bug_report.py` from the raw runs of "
           "`benchmarks/seed_bug_gpu.py` (JSON and gzipped server logs in "
           f"`{folder.name}/`); every number and verdict below is computed from them.", "",
           "Cases: (a) vLLM's compiled drafter; (b) `SPECGW_SEED_BUG=1` (a drafter class "
           "without `@support_torch_compile`, the state before vLLM PR #25109) with our "
           "fix off (`SPECGW_COMPILED_DRAFTERS=0`); (c) the same bug with our fix on.", "",
           *environment(folder, runs), *protocol(runs),
           "What each server ran (its start-up self-check, rank 0):", "",
           *drafter_table(runs), ""]
    for runner in sorted({r["runner"] for r in runs.values()}):
        rs = {k: v for k, v in runs.items() if v["runner"] == runner}
        out += [f"## Runner {runner}", "", *table(rs), ""]
        summ = {v["case"]: v["summary"] for v in rs.values()
                if v.get("summary") and "error" not in v["summary"]}
        for v in rs.values():
            if v["case"] not in summ:  # a run that failed has no verdicts: say so
                out.append(f"- FAIL: ({v['case']}) {v.get('title')}: the run failed "
                           f"({v.get('error') or (v.get('summary') or {}).get('error')})")
        for claim, ok, detail in verdicts(runner, summ, alerts):
            out.append(f"- {'PASS' if ok else 'FAIL'}: {claim}"
                       + (f" ({detail})" if detail else ""))
        a = summ.get("a")
        for case in ("b", "c"):
            x = summ.get(case)
            if a and x and a["tokens_per_s_median"] and x["tokens_per_s_median"]:
                out.append(f"- tokens/s median ({case})/(a): "
                           f"{x['tokens_per_s_median'] / a['tokens_per_s_median']:.2f}x")
        spread = {v["run"]: (max(t) - min(t)) / statistics.median(t)
                  for v in rs.values() if (t := (v.get("summary") or {}).get("tokens_per_s"))}
        if spread:
            out.append("- tokens/s spread of the measured rounds, (max - min) / median: "
                       + ", ".join(f"{n} {x:.0%}" for n, x in spread.items()))
        out += ["", *noise_reading(runner, summ, spread)]
    if alerts:
        out += ["## Alert check (promtool test rules on the recorded series)", "",
                "`benchmarks/seed_bug_alert.py` replays each run's recorded series (one "
                "sample a second, held between scrapes) through `promtool test rules` with "
                "`monitoring/alerts.yml`. Scraping and Alertmanager delivery are not part of "
                "it.", ""]
        for name, res in sorted(alerts.items()):
            end = (runs.get(name, {}).get("summary") or {}).get("window_s")
            line = f"- {name}: {res.get('summary')}"
            if res.get("fires") and end is not None and res.get("fires_at_s", 0) > end:
                line += (f"; the recorded series end at {end:g} s, so it fires from the "
                         "samples still inside `increase()`'s 1 m range, as it would in a "
                         "Prometheus that keeps scraping the (then flat) counter")
            out.append(line)
        out.append("")
    out += [*rounds_section(runs), *discarded(folder),
            f"![silent eager and hit ratio over time]({plot_name})", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", required=True, help="folder with <runner>_<case>.json")
    p.add_argument("--out", required=True, help="markdown file to write")
    p.add_argument("--plot", help="PNG (default: --out with .png)")
    a = p.parse_args(argv)
    folder = Path(a.runs)
    runs = load_runs(folder)
    if not runs:
        raise SystemExit(f"no runs in {a.runs}")
    alert_file = folder / "alert_check.json"
    alerts = json.loads(alert_file.read_text()) if alert_file.exists() else {}
    out = Path(a.out)
    png = Path(a.plot) if a.plot else out.with_suffix(".png")
    plot(runs, png)
    out.write_text(render(runs, alerts, png.name, folder) + "\n")
    print(f"wrote {out} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
