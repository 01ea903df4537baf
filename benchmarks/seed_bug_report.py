"""docs/seed_bug.md from the seed-bug runs (``benchmarks/seed_bug_gpu.py``): a table per
runner, a plot of the drafter's silent-eager counter and graph hit ratio over time, and
verdicts computed here from the raw scrapes.

Usage: ``python benchmarks/seed_bug_report.py --runs docs/seed_bug --out docs/seed_bug.md``
(``--plot`` defaults to the .md path with .png). ``alert_check.json`` in the runs folder
(from ``benchmarks/seed_bug_alert.py``) adds the alert verdicts.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
from pathlib import Path

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
        "silent_growth": silent_growth(scrapes),
        "captures": captures,
        "tokens_per_s": tps,
        "tokens_per_s_median": statistics.median(tps) if tps else None,
        "window_s": round(scrapes[-1]["t"] - scrapes[0]["t"], 2),
        "scrapes": len(scrapes),
    }


# ------------------------------------------------------------------ verdicts
def same_speed(a: dict, b: dict) -> bool:
    ta, tb = a["tokens_per_s"], b["tokens_per_s"]
    if not ta or not tb:
        return False
    overlap = min(ta) <= max(tb) and min(tb) <= max(ta)
    close = abs(statistics.median(tb) / statistics.median(ta) - 1) <= NOISE
    return overlap or close


def verdicts(runner: str, s: dict[str, dict], alerts: dict) -> list[tuple[str, bool]]:
    """(claim, holds) for one runner's cases a/b/c (those that ran)."""
    out: list[tuple[str, bool]] = []
    a, b, c = s.get("a"), s.get("b"), s.get("c")
    if a:
        out.append(("(a) normal: drafter piece coverage 1.000",
                    a["draft"]["piece_coverage"] == 1.0))
        out.append(("(a) normal: silent eager 0", a["draft"]["silent_eager"] == 0))
        out.append(("(a) normal: no self-check warning", not a["self_check_warnings"]))
    if b:
        out.append(("(b) bug, fix off: self-check warning at start-up",
                    bool(b["self_check_warnings"])))
        g = b["silent_growth"]
        if runner == "v1":
            out.append(("(b) bug, fix off: silent eager grew in every interval the drafter "
                        "ran", g["active_intervals"] > 0
                        and g["silent_grew_intervals"] == g["active_intervals"]))
            out.append(("(b) bug, fix off: drafter hit ratio 0",
                        b["draft"]["hit_ratio"] == 0))
        else:
            fp, st = b["draft_by_phase"]["first_pass"], b["draft_by_phase"]["draft_step"]
            out.append(("(b) bug, fix off: silent eager > 0, all in first passes "
                        "(mixed batches dispatched PIECEWISE)",
                        b["draft"]["silent_eager"] > 0
                        and fp["silent_eager"] == b["draft"]["silent_eager"]))
            out.append(("(b) bug, fix off: draft steps still FULL graphs (hit ratio 1)",
                        st["hit_ratio"] == 1.0))
        alert = alerts.get(f"{runner}_b")
        if alert is not None:
            out.append(("(b) bug, fix off: SpecgwDrafterEagerFallback fires in Prometheus "
                        "(promtool) within one evaluation interval", bool(alert.get("ok"))))
    if a and b and runner == "v1":
        out.append(("(b) slower than (a)",
                    (b["tokens_per_s_median"] or 0) < (a["tokens_per_s_median"] or 0)
                    and not same_speed(a, b)))
    if c:
        out.append(("(c) bug, fix on: piece coverage 1.000, silent eager 0",
                    c["draft"]["piece_coverage"] == 1.0 and c["draft"]["silent_eager"] == 0))
        if a:
            out.append(("(c) bug, fix on: tokens/s back to (a) within noise", same_speed(a, c)))
    return out


# ------------------------------------------------------------------ rendering
def fmt(x, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float) and not x.is_integer():
        return f"{x:.{digits}f}"
    return f"{int(x)}" if isinstance(x, float) else str(x)


def table(runs: dict[str, dict]) -> list[str]:
    lines = ["| run | self-check | drafter forwards graph / partial / eager / unknown "
             "(first pass; steps) | silent eager | hit ratio | piece coverage | captures "
             "(target / draft / unknown) | tok/s median (rounds) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, run in runs.items():
        s = run.get("summary")
        if not s or "error" in s:
            lines.append(f"| {name} ({run.get('title')}) | run failed: "
                         f"{run.get('error') or s.get('error')} | | | | | | |")
            continue
        by = s["draft_by_phase"]
        fw = "; ".join(
            " / ".join(fmt(by[ph][k]) for k in ("graph", "partial", "eager", "unknown"))
            for ph in PHASES)
        warn = "<br>".join(s["self_check_warnings"]) or "no warning"
        cap = " / ".join(str(s["captures"].get(r, 0)) for r in ("target", "draft", "unknown"))
        tps = ", ".join(f"{t:.0f}" for t in s["tokens_per_s"])
        lines.append(
            f"| {name} ({run.get('title')}) | {warn} | {fw} | {fmt(s['draft']['silent_eager'])}"
            f" | {fmt(s['draft']['hit_ratio'])} | {fmt(s['draft']['piece_coverage'])} | {cap}"
            f" | {fmt(s['tokens_per_s_median'], 0)} ({tps}) |")
    return lines


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
    runs = {}
    for f in sorted(folder.glob("v*_*.json")):
        run = json.loads(f.read_text())
        if run.get("ok") and "summary" not in run:
            run["summary"] = summarize_run(run)
        runs[run["run"]] = run
    return runs


def render(runs: dict[str, dict], alerts: dict, plot_name: str) -> str:
    any_run = next(iter(runs.values()), {})
    out = ["# The seed bug, measured: piece coverage, silent eager, self-check, alert", "",
           "Generated by `benchmarks/seed_bug_report.py` from the raw runs of "
           "`benchmarks/seed_bug_gpu.py` (JSON next to this file). Workload per run: "
           f"{any_run.get('concurrency')} concurrent greedy completions x "
           f"{any_run.get('max_tokens')} tokens (`ignore_eos`, starts staggered by "
           f"{any_run.get('stagger_s')} s so prefills join running decodes), k="
           f"{any_run.get('k')}, `max_num_seqs` {any_run.get('max_num_seqs')}; one warm-up "
           "round, then the measured rounds. Counts are deltas from the first to the last "
           "/metrics scrape of the workload (warm-up included); tokens/s per round from "
           "the engine's token counter.", "",
           "Cases: (a) vLLM's compiled drafter; (b) `SPECGW_SEED_BUG=1` (a drafter class "
           "without `@support_torch_compile`, the state before vLLM PR #25109) with our "
           "fix off (`SPECGW_COMPILED_DRAFTERS=0`); (c) the same bug with our fix on.", ""]
    device = {r.get("self_check", {}).get("device") for r in runs.values()}
    out += [f"Device reported by the self-check: {', '.join(sorted(map(str, device)))}.", ""]
    for runner in sorted({r["runner"] for r in runs.values()}):
        rs = {k: v for k, v in runs.items() if v["runner"] == runner}
        out += [f"## Runner {runner}", "", *table(rs), ""]
        summ = {v["case"]: v["summary"] for v in rs.values()
                if v.get("summary") and "error" not in v["summary"]}
        for claim, ok in verdicts(runner, summ, alerts):
            out.append(f"- {'PASS' if ok else 'FAIL'}: {claim}")
        a, b = summ.get("a"), summ.get("b")
        if a and b and a["tokens_per_s_median"] and b["tokens_per_s_median"]:
            out.append(f"- tokens/s (b)/(a): "
                       f"{b['tokens_per_s_median'] / a['tokens_per_s_median']:.2f}x")
        out.append("")
    if alerts:
        out += ["## Alert check (promtool test rules on the recorded series)", ""]
        for name, res in sorted(alerts.items()):
            out.append(f"- {name}: {res.get('summary')}")
        out.append("")
    out += [f"![silent eager and hit ratio over time]({plot_name})", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", required=True, help="folder with <runner>_<case>.json")
    p.add_argument("--out", required=True, help="markdown file to write")
    p.add_argument("--plot", help="PNG (default: --out with .png)")
    a = p.parse_args(argv)
    runs = load_runs(Path(a.runs))
    if not runs:
        raise SystemExit(f"no runs in {a.runs}")
    alert_file = Path(a.runs) / "alert_check.json"
    alerts = json.loads(alert_file.read_text()) if alert_file.exists() else {}
    out = Path(a.out)
    png = Path(a.plot) if a.plot else out.with_suffix(".png")
    plot(runs, png)
    out.write_text(render(runs, alerts, png.name) + "\n")
    print(f"wrote {out} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
