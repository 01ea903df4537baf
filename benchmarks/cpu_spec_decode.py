"""CPU benchmark: the bundled pair served through the gateway with EAGLE-3 (k=3) and
without speculation, in one run. Writes ``docs/cpu_benchmark.md`` and the raw JSON.

Each configuration is a real ``specgw serve`` process on 127.0.0.1, driven by the
OpenAI SDK with greedy requests one at a time (batch 1); acceptance length comes from
vLLM's own ``vllm:spec_decode_*`` counters, tokens/s from ``usage`` token counts over
wall time. These machines are noisy: read the ratio, not the absolute figures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import time
from pathlib import Path

from tqdm import tqdm

from benchmarks.harness import MODEL, PROMPTS, ROOT, Server, acceptance, scrape
from benchmarks.report import md_table


def run_config(name: str, args: list[str], max_tokens: int, rounds: int) -> dict:
    from openai import OpenAI

    srv = Server(f"bench-{name}", ["--log-format", "text", *args])
    try:
        srv.wait_ready()
        c = OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0, timeout=600)
        c.completions.create(model=MODEL, prompt="def warmup():", max_tokens=16)  # warm-up
        before = scrape(srv.url)
        tokens, t0 = 0, time.perf_counter()
        for _ in range(rounds):
            for p in tqdm(PROMPTS, desc=name, unit="req", leave=False):
                r = c.completions.create(model=MODEL, prompt=p, max_tokens=max_tokens,
                                         temperature=0, extra_body={"ignore_eos": True})
                tokens += r.usage.completion_tokens
        wall = time.perf_counter() - t0
        acc = acceptance(before, scrape(srv.url), k=3)
        return {
            "config": name, "args": args, "requests": rounds * len(PROMPTS),
            "completion_tokens": tokens, "wall_s": round(wall, 3),
            "tokens_per_s": round(tokens / wall, 2),
            **acc,
        }
    finally:
        srv.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    a = ap.parse_args()
    results = [
        run_config("no-speculation", ["--method", "none"], a.max_tokens, a.rounds),
        run_config("eagle3-k3", ["--method", "eagle3", "-k", "3"], a.max_tokens, a.rounds),
    ]
    base = results[0]["tokens_per_s"]
    meta = {"date": dt.date.today().isoformat(), "machine": platform.machine(),
            "cpus": __import__("os").cpu_count(), "python": platform.python_version(),
            "vllm": __import__("vllm").__version__, "max_tokens": a.max_tokens,
            "batch": 1, "greedy": True}
    a.out.mkdir(exist_ok=True)
    (a.out / "cpu_benchmark.json").write_text(json.dumps({"meta": meta, "results": results},
                                                         indent=2) + "\n")
    lines = [
        "# CPU benchmark: bundled pair, EAGLE-3 vs no speculation (same run)",
        "",
        f"Date {meta['date']}, vLLM {meta['vllm']}, {meta['cpus']} CPU cores "
        f"({meta['machine']}), batch 1, greedy, {a.max_tokens} tokens per request, "
        f"{results[0]['requests']} requests per configuration. Produced by "
        "`python -m benchmarks.cpu_spec_decode`; raw numbers in `cpu_benchmark.json`.",
        "",
        *md_table(["configuration", "output tokens/s", "ratio vs no speculation",
                   "acceptance length (k=3)", "accepted per position"],
                  [[r["config"], f"{r['tokens_per_s']:.1f}", f"{r['tokens_per_s'] / base:.2f}x",
                    r["acceptance_length"],
                    " / ".join(f"{x:.2f}" for x in r["acceptance_per_position"]) or None]
                   for r in results]),
    ]
    lines += ["", "Acceptance length = 1 + accepted / drafts from vLLM's "
              "`vllm:spec_decode_*` counters (the bonus token included). CPU runs no CUDA "
              "graphs; the draft head runs eager here by design."]
    (a.out / "cpu_benchmark.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
