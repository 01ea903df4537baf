"""``vllm_serve_<config>.json`` (from ``vllm_serve_plugin_gpu.py``) -> docs/vllm_serve_plugin.md,
with the verdicts computed here from the raw numbers: on CUDA the piecewise drafter's
reported hit rate must be >= 0.99 and the ``speculative_config.enforce_eager`` drafter's
must be 0; acceptance counts on our histogram must equal vLLM's draft counts."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TARGETS = {"piecewise": (">=", 0.99), "enforce_eager": ("==", 0.0)}


def verdict(run: dict) -> tuple[bool | None, str]:
    op, bound = TARGETS[run["config"]]
    hit = run["drafter"]["hit_ratio"]
    if run["device"] != "cuda":
        return None, f"not applicable on {run['device']} (no CUDA graphs)"
    if hit is None:
        return False, "no drafter forwards counted"
    ok = hit >= bound if op == ">=" else hit == bound
    return ok, f"{hit:.4f} {op} {bound}: {'PASS' if ok else 'FAIL'}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--src", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path("docs/vllm_serve_plugin.md"))
    a = ap.parse_args()
    runs = [json.loads((a.src / f"vllm_serve_{c}.json").read_text()) for c in TARGETS
            if (a.src / f"vllm_serve_{c}.json").exists()]
    assert runs, f"no vllm_serve_*.json under {a.src}"
    failed = [r for r in runs if "error" in r]
    runs = [r for r in runs if "error" not in r]
    assert runs, f"every run failed: {[(r['config'], r['error']) for r in failed]}"
    first = runs[0]
    lines = [
        "# specgw metrics inside a stock `vllm serve`",
        "",
        f"vLLM {first['vllm_version']} on {first['device']}, produced by "
        "`benchmarks/vllm_serve_plugin_gpu.py` (raw JSON and server logs next to the "
        f"JSON in `{a.src}`) and `benchmarks/vllm_serve_plugin_report.py`. vLLM's own "
        "OpenAI server, started with the plugin flags from the README:",
        "",
        "```",
        " ".join(f"{k}={v}" for k, v in first["env"].items()) + " \\",
        "  vllm serve " + " ".join(_quote(x) for x in first["serve_args"]),
        "```",
        "",
        "The `enforce_eager` run adds `\"enforce_eager\": true` to `--speculative-config`. "
        f"Workload per configuration: {first['workload']['requests']} completions, "
        f"{first['workload']['completion_tokens']} tokens, concurrency "
        f"{first['workload']['concurrency']}, greedy. Hit ratio = replayed drafter forwards "
        "/ all drafter forwards over the workload, from the plugin's counters on vLLM's "
        "/metrics (`specgw_cudagraph_replayed_forwards_total{role=\"draft\"}` / "
        "`specgw_model_forwards_total{role=\"draft\"}`), summed over every rank.",
        "",
        "| configuration | drafter forwards | graph replays | silent eager | hit ratio | "
        "target | reported gauge (first pass / draft step) | ranks | coverage | self-check "
        "warnings | start s | drafts: vLLM / our histogram | acceptance length |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for r in runs:
        d, acc = r["drafter"], r["acceptance"]
        ok, text = verdict(r)
        verdicts.append((r["config"], ok, text))
        rep = r["reported_hit_ratio"]
        lines.append(
            f"| {r['config']} | {d['forwards']:.0f} | {d['graph']:.0f} | "
            f"{d['silent_eager']:.0f} | {_f(d['hit_ratio'])} | {text} | "
            f"{_f(rep.get('draft/first_pass'))} / {_f(rep.get('draft/draft_step'))} | "
            f"{r['probe_ranks']:.0f} | {r['coverage']} | {r['startup_warnings']:.0f} | "
            f"{r['start_s']:.0f} | {acc['vllm_drafts']:.0f} / "
            f"{acc['specgw_histogram_count']:.0f} | {_f(acc['acceptance_length'])} |")
    lines += ["", "## Verdicts", ""]
    for r in failed:
        lines.append(f"* {r['config']}: FAIL, the server did not run: {r['error']}")
    for name, _ok, text in verdicts:
        lines.append(f"* {name}: {text}")
    for r in runs:
        acc = r["acceptance"]
        same = acc["vllm_drafts"] == acc["specgw_histogram_count"]
        lines.append(f"* {r['config']}: acceptance histogram count equals vLLM's "
                     f"`spec_decode_num_drafts` delta: {'PASS' if same else 'FAIL'}")
    lines += ["", "## Start-up self-check (first rank), as served on /v1/engine/self_check", ""]
    for r in runs:
        sc = r["self_check"]
        rank = (sc.get("ranks") or [{}])[0]
        exp = (sc.get("reports") or [{}])[0].get("expected")
        lines.append(f"* {r['config']}: runner={rank.get('runner')} cudagraph_mode="
                     f"{rank.get('cudagraph_mode')} drafter={rank.get('drafter_model_class')} "
                     f"compiled={rank.get('drafter_compiled')} expected={json.dumps(exp)} "
                     f"warnings={sc.get('warnings')}")
    a.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {a.out}")


def _f(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def _quote(s: str) -> str:
    return f"'{s}'" if any(c in s for c in " {}\"") else s


if __name__ == "__main__":
    main()
