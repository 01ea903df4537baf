"""``bench_*.json`` from ``gpu_bench.py`` -> ``docs/benchmarks.md`` (tables with ratios
against baselines measured in the same run)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

CONFIG_ORDER = ["no-spec", "v1-eager-draft", "v1-piecewise", "v2-default"]


def load(src: Path) -> dict[tuple[str, str, int], dict]:
    runs = {}
    for f in sorted(src.glob("bench_*.json")):
        r = json.loads(f.read_text())
        runs[(r["mode"], r["config"], r["k"])] = r
    return runs


def draft_hit(row: dict) -> str:
    vals = [p["hit_rate"] for k, p in row["probes"].items()
            if k.startswith("draft/") and p["hit_rate"] is not None]
    return f"{min(vals):.3f}" if vals else "-"


def by_batch(run: dict | None) -> dict[int, dict]:
    return {r["batch"]: r for r in run["batches"]} if run else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--src", type=Path, default=Path("docs/gpu"))
    ap.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    ap.add_argument("--header", default="")
    a = ap.parse_args()
    runs = load(a.src)
    base = by_batch(runs.get(("direct", "no-spec", 0)))
    lines = [a.header, "", "## Engine direct (in-process `AsyncLLM`)", "",
             "| configuration | k | batch | output tok/s | vs no-spec | vs eager drafter | "
             "TPOT p50 ms | TTFT p50 / p99 ms | acceptance length | drafter graph hit (min "
             "over phases) |", "|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted((k for k in runs if k[0] == "direct"),
                  key=lambda k: (k[2], CONFIG_ORDER.index(k[1])))
    for mode, config, k in keys:
        eager = by_batch(runs.get(("direct", "v1-eager-draft", k)))
        for b, r in by_batch(runs[(mode, config, k)]).items():
            tps = r["output_tokens_per_s"]
            vs_base = f"{tps / base[b]['output_tokens_per_s']:.2f}x" if b in base else "-"
            vs_eager = (f"{tps / eager[b]['output_tokens_per_s']:.2f}x"
                        if b in eager and config != "no-spec" else "-")
            lines.append(
                f"| {config} | {k or '-'} | {b} | {tps:.0f} | {vs_base} | {vs_eager} | "
                f"{r['tpot_ms_p50']} | {r['ttft_ms_p50']} / {r['ttft_ms_p99']} | "
                f"{r['acceptance_length'] or '-'} | {draft_hit(r)} |")
    lines += ["", "## Through the gateway (HTTP, SSE streaming) vs engine direct", "",
              "| configuration | k | batch | direct tok/s | gateway tok/s | gateway / direct | "
              "direct TTFT p50 ms | gateway TTFT p50 ms |", "|---|---|---|---|---|---|---|---|"]
    lat_lines = ["", "Per-request latency, batch 1, sequential requests "
                 "(p50 of end-to-end time, same token count):", "",
                 "| configuration | k | direct p50 ms | gateway p50 ms | added by gateway ms |",
                 "|---|---|---|---|---|"]
    for (mode, config, k), g in sorted(runs.items()):
        if mode != "gateway" or ("direct", config, k) not in runs:
            continue
        d = runs[("direct", config, k)]
        db, gb = by_batch(d), by_batch(g)
        for b in sorted(set(db) & set(gb)):
            lines.append(
                f"| {config} | {k or '-'} | {b} | {db[b]['output_tokens_per_s']:.0f} | "
                f"{gb[b]['output_tokens_per_s']:.0f} | "
                f"{gb[b]['output_tokens_per_s'] / db[b]['output_tokens_per_s']:.3f} | "
                f"{db[b]['ttft_ms_p50']} | {gb[b]['ttft_ms_p50']} |")
        dl, gl = d["latency_b1_ms"]["p50"], g["latency_b1_ms"]["p50"]
        lat_lines.append(f"| {config} | {k or '-'} | {dl} | {gl} | {gl - dl:+.2f} |")
    a.out.write_text("\n".join(lines + lat_lines) + "\n")
    print("\n".join(lines + lat_lines))


if __name__ == "__main__":
    main()
