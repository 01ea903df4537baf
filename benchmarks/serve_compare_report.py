"""``serve_compare.py`` output -> a markdown report (default ``docs/serve_compare.md``) and
an error-bar plot next to it: per concurrency and server the median and min-max over the
repetitions of output tok/s, TPOT p50 and TTFT p50; per pair of servers the ratio, paired
by repetition (the two runs of one repetition ran minutes apart at most); the targets of
issue #14 checked in code.

``python -m benchmarks.serve_compare_report --src DIR --out docs/serve_compare.md``
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Iterable
from pathlib import Path

from benchmarks.report import Spread, Target, md_table, num, verdict, write

METRICS = (("output_throughput", "output tok/s", "{:.0f}"),
           ("median_tpot_ms", "TPOT p50 ms", "{:.2f}"),
           ("median_ttft_ms", "TTFT p50 ms", "{:.1f}"))
# (numerator, denominator, what the ratio measures)
PAIRS = (("specgw", "vllm", "specgw serve vs vllm serve, same engine configuration"),
         ("specgw-defaults", "vllm-defaults", "each server's defaults"),
         ("specgw", "specgw-probes-off", "probes on (poll 5 s) vs off"),
         ("specgw-poll-1s", "specgw-probes-off", "probes on (poll 1 s) vs off"),
         ("router", "vllm", "specgw router in front of vllm serve vs vllm serve directly"))
T_PROBES = Target("probe overhead, % of output tok/s", "<=", 1.0)
T_ROUTER = Target("router / direct output tok/s at c=64", ">=", 0.98)
T_ROUTER_TTFT = Target("added TTFT p50 ms through the router", "<", 1.0)

Cells = dict[tuple[str, int], list[dict]]


def load(src: Path) -> tuple[dict, Cells]:
    meta = json.loads((src / "servers.json").read_text())
    cells: Cells = {}
    for f in sorted((src / "runs").glob("*.json")):
        r = json.loads(f.read_text())
        cells.setdefault((r["variant"], r["concurrency"]), []).append(r)
    for runs in cells.values():
        runs.sort(key=lambda r: r["rep"])
    return meta, cells


def values(runs: list[dict], key: str) -> list[float]:
    return [r["bench"][key] for r in runs if r["bench"].get(key) is not None]


def paired(cells: Cells, a: str, b: str, c: int, key: str) -> list[tuple[float, float]]:
    """(a, b) values of the repetitions both ran."""
    rb = {r["rep"]: r["bench"].get(key) for r in cells.get((b, c), [])}
    return [(r["bench"][key], rb[r["rep"]]) for r in cells.get((a, c), [])
            if r["bench"].get(key) is not None and rb.get(r["rep"]) is not None]


def conc(cells: Cells) -> list[int]:
    return sorted({c for _, c in cells})


def variants(cells: Cells, meta: dict) -> list[str]:
    order = meta["protocol"]["variants"]
    return [v for v in order if any(vv == v for vv, _ in cells)]


def main_table(cells: Cells, meta: dict) -> list[str]:
    rows = []
    for c in conc(cells):
        for v in variants(cells, meta):
            runs = cells.get((v, c), [])
            if not runs:
                continue
            acc = [r["server_acceptance"]["acceptance_length"] for r in runs
                   if r["server_acceptance"]["acceptance_length"]]
            rows.append([c, v, len(runs),
                         *(Spread.of(values(runs, k)).text(f) if values(runs, k) else None
                           for k, _, f in METRICS),
                         num(statistics.median(acc), "{:.2f}") if acc else None,
                         sum(r["bench"].get("failed") or 0 for r in runs)])
    return md_table(["concurrency", "server", "reps",
                     *(f"{label} median (min-max)" for _, label, _ in METRICS),
                     "acceptance length (server counters)", "failed requests"], rows)


def ratio_table(cells: Cells) -> tuple[list[str], dict]:
    """Ratios per pair and concurrency; returns the table and {(a, b, c): stats}."""
    rows, stats = [], {}
    for a, b, what in PAIRS:
        for c in conc(cells):
            tp = paired(cells, a, b, c, "output_throughput")
            if not tp:
                continue
            r = [x / y for x, y in tp]
            dt = [x - y for x, y in paired(cells, a, b, c, "median_ttft_ms")]
            dtp = [x / y for x, y in paired(cells, a, b, c, "median_tpot_ms") if y]
            s = stats[(a, b, c)] = {"ratio": Spread.of(r),
                                    "ttft_add": Spread.of(dt) if dt else None,
                                    "tpot_ratio": Spread.of(dtp) if dtp else None}
            rows.append([f"{a} / {b}", what, c, len(r), s["ratio"].text("{:.3f}"),
                         s["tpot_ratio"] and s["tpot_ratio"].text("{:.3f}"),
                         s["ttft_add"] and s["ttft_add"].text("{:+.2f}")])
    return md_table(["pair", "measures", "concurrency", "paired reps",
                     "output tok/s ratio median (min-max)", "TPOT p50 ratio",
                     "TTFT p50 difference ms"], rows), stats


def target_rows(stats: dict, cs: list[int]) -> list[list[object]]:
    rows: list[list[object]] = []
    for a in ("specgw", "specgw-poll-1s"):
        per_c = {c: stats.get((a, "specgw-probes-off", c)) for c in cs}
        per_c = {c: s for c, s in per_c.items() if s}
        if not per_c:
            continue
        # Overhead = 1 - on/off; the error bar is the range over paired repetitions.
        med = {c: 100 * (1 - s["ratio"].median) for c, s in per_c.items()}
        worst = {c: 100 * (1 - s["ratio"].lo) for c, s in per_c.items()}
        text = "; ".join(f"c={c}: {med[c]:+.2f}% (worst rep {worst[c]:+.2f}%)" for c in per_c)
        rows.append([f"{T_PROBES} ({a}), median at every concurrency", text,
                     verdict(T_PROBES.met(x) for x in med.values())])
        rows.append([f"{T_PROBES} ({a}), every repetition at every concurrency", text,
                     verdict(T_PROBES.met(x) for x in worst.values())])
    s = stats.get(("router", "vllm", 64))
    rows.append([str(T_ROUTER) + " (median of paired ratios)",
                 s["ratio"].text("{:.3f}") if s else "no c=64 data",
                 verdict(T_ROUTER.met(s["ratio"].median) if s else None)])
    add = s["ttft_add"] if s else None
    rows.append([str(T_ROUTER_TTFT) + " at c=64 (median of paired differences)",
                 add.text("{:+.2f}") if add else "no c=64 data",
                 verdict(T_ROUTER_TTFT.met(add.median) if add else None)])
    return rows


def plot(cells: Cells, meta: dict, stats: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    cs = conc(cells)
    fig, axes = plt.subplots(1, len(METRICS) + 1, figsize=(5 * (len(METRICS) + 1), 4))
    for ax, (key, label, _) in zip(axes, METRICS, strict=False):
        for i, v in enumerate(variants(cells, meta)):
            xs, med, lo, hi = [], [], [], []
            for j, c in enumerate(cs):
                vals = values(cells.get((v, c), []), key)
                if vals:
                    s = Spread.of(vals)
                    xs.append(j + (i - 1.5) * 0.08)  # side by side, not on top
                    med.append(s.median)
                    lo.append(s.median - s.lo)
                    hi.append(s.hi - s.median)
            ax.errorbar(xs, med, yerr=[lo, hi], fmt="o-", capsize=3, label=v)
        ax.set_xticks(range(len(cs)), [str(c) for c in cs])
        ax.set_xlabel("concurrency")
        ax.set_title(f"{label}: median, min-max")
        if key == "output_throughput":
            ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    ax = axes[-1]  # probe overhead, the paired per-repetition spread as error bars
    for a, b, what in PAIRS:
        if b != "specgw-probes-off":
            continue
        pts = [(j, stats[(a, b, c)]["ratio"]) for j, c in enumerate(cs) if (a, b, c) in stats]
        if pts:
            med = [100 * (1 - r.median) for _, r in pts]
            ax.errorbar([j for j, _ in pts], med,
                        yerr=[[m - 100 * (1 - r.hi) for m, (_, r) in zip(med, pts, strict=True)],
                              [100 * (1 - r.lo) - m for m, (_, r) in zip(med, pts, strict=True)]],
                        fmt="o-", capsize=3, label=what)
    ax.axhline(T_PROBES.threshold, color="red", ls="--", lw=1, label="target")
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xticks(range(len(cs)), [str(c) for c in cs])
    ax.set_xlabel("concurrency")
    ax.set_title("probe overhead % (median, min-max)")
    ax.legend(fontsize=7)
    fig.suptitle(f"{meta['device_name']}, vLLM {meta['vllm']}")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def config_rows(cfg: dict) -> Iterable[list[object]]:
    for k, v in cfg.items():
        yield [k, f"`{json.dumps(v)}`" if isinstance(v, dict | list) else v]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, required=True, help="serve_compare.py --out dir")
    ap.add_argument("--out", type=Path, default=Path("docs/serve_compare.md"))
    ap.add_argument("--title", default="specgw serve vs vllm serve under vllm bench serve")
    a = ap.parse_args()
    meta, cells = load(a.src)
    p = meta["protocol"]
    png = a.out.with_suffix(".png")
    ratios, stats = ratio_table(cells)
    has_plot = plot(cells, meta, stats, png)
    lines = [
        f"# {a.title}", "",
        "<!-- Generated by benchmarks/serve_compare_report.py from the raw JSON; do not "
        "edit by hand. -->", "",
        f"{meta['device_name']} ({meta['device']}), vLLM {meta['vllm']}, torch "
        f"{meta['torch']}, {meta['date']}. Raw data: `{a.src}` (`runs/*.json`, one file per "
        "`vllm bench serve` run; `servers.json`: argv and each engine's own configuration "
        "log line). Protocol (`benchmarks/serve_compare.py`): all servers warm at once, "
        f"started one after another; {p['reps']} repetitions, the server order rotated per "
        f"repetition; per run `vllm bench serve` with the random dataset, input "
        f"{p['input_len']} / output {p['output_len']} tokens, `--ignore-eos`, greedy, "
        f"max(`{p['min_prompts']}`, {p['prompts_per_client']} x concurrency) prompts after "
        f"{p['num_warmups']} warm-up requests.", "",
        "## Engine configuration (the same for every server unless its name ends in "
        "`-defaults`)", "", *md_table(["setting", "value"], config_rows(meta["engine_config"])),
        "", "## Results", "",
        *([f"![error bars]({png.name})", ""] if has_plot else []),
        *main_table(cells, meta), "",
        "## Ratios, paired by repetition", "",
        "Each ratio divides two runs of the same repetition and concurrency; median and "
        "min-max over the repetitions.", "", *ratios, "",
        "## Against the targets of issue #14", "",
        *md_table(["target", "measured", "met?"], target_rows(stats, conc(cells))), "",
        "## Servers", "",
        *(f"* `{v}`: `{' '.join(s['argv'][2:])}`" for v, s in meta["servers"].items())]
    write(a.out, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
