"""Turn the ``gpu_<config>.json`` files from ``gpu_probes.py`` into ``docs/gpu_probes.md``:
one table, configuration x batch, ratios against the same run's baselines."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ORDER = ["no-spec", "v1-eager-draft", "v1-piecewise", "v2-default"]


def hit(r: dict, key: str) -> str:
    p = r["probes"].get(key)
    if not p or p["hit_rate"] is None:
        return "-"
    return f"{p['hit_rate']:.3f} ({p['graph']}/{p['graph'] + p['eager']})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--src", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path("docs/gpu_probes.md"))
    ap.add_argument("--header", default="")
    a = ap.parse_args()
    runs = {}
    for name in ORDER:
        f = a.src / f"gpu_{name}.json"
        if f.exists():
            runs[name] = json.loads(f.read_text())
    tps = {(n, r["batch"]): r["output_tokens_per_s"] for n, run in runs.items()
           for r in run["results"]}
    lines = [a.header, "",
             "| configuration | batch | output tok/s | vs no-spec | vs eager drafter | "
             "TPOT p50 ms | TTFT p50 ms | acceptance length | drafter first pass hit | "
             "drafter steps hit | target hit | silent eager (draft) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, run in runs.items():
        for r in run["results"]:
            b = r["batch"]
            base = tps.get(("no-spec", b))
            eager = tps.get(("v1-eager-draft", b))
            silent = sum(p["silent_eager"] for k, p in r["probes"].items()
                         if k.startswith("draft/"))
            vs_base = f"{r['output_tokens_per_s'] / base:.2f}x" if base else "-"
            vs_eager = (f"{r['output_tokens_per_s'] / eager:.2f}x"
                        if eager and name != "no-spec" else "-")
            lines.append(
                f"| {name} | {b} | {r['output_tokens_per_s']:.0f} | {vs_base} | {vs_eager} | "
                + (f"{r['tpot_ms_p50']} | {r['ttft_ms_p50']} | "
                          f"{r['acceptance_length'] or '-'} | {hit(r, 'draft/first_pass')} | "
                          f"{hit(r, 'draft/draft_step')} | {hit(r, 'target/forward')} | "
                          f"{silent if name != 'no-spec' else '-'} |"))
    lines += ["", "Start-up self-check per configuration (runner, resolved cudagraph mode, "
              "drafter compiled, captured graphs by role, warnings):", ""]
    for name, run in runs.items():
        sc = run.get("self_check") or {}
        rank = (sc.get("ranks") or [{}])[0]
        lines.append(
            f"* `{name}`: runner {rank.get('runner')}, {rank.get('cudagraph_mode')}, "
            f"max capture {rank.get('max_cudagraph_capture_size')}, drafter "
            f"{rank.get('drafter_model_class')} compiled={rank.get('drafter_compiled')}, "
            f"captures {run.get('captures')}, engine start {run.get('engine_start_s')} s, "
            f"warnings: {sc.get('warnings') or 'none'}")
    a.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
