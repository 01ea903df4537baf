"""H200 benchmark sweep: no speculation vs EAGLE-3 with eager / piecewise drafter (runner
V1) vs runner V2, for k in {2, 3, 4} and batch 1, 8, 32, 64, directly against the
engine and, for two configurations, through the gateway over HTTP.

Each job runs in its own process: ``--job MODE:CONFIG:K`` with MODE ``direct`` (the
in-process ``SpecEngine``) or ``gateway`` (``specgw serve`` + an asyncio httpx client
streaming SSE). Both modes send the same requests: B concurrent greedy completions of
the bundled pair's prompts with ``ignore_eos`` and a fixed length, then 20 sequential
requests for the per-request latency. Results: ``bench_<mode>_<config>_k<k>.json``;
``benchmarks/gpu_bench_report.py`` builds the table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_probes import CONFIGS, PROMPTS, forwards, hit_rates, pct

ROOT = Path(__file__).resolve().parent.parent
BATCHES = (1, 8, 32, 64)
LATENCY_REQUESTS = 20
LATENCY_TOKENS = 64

# (ttft_s, e2e_s, tokens) for request i with n tokens
Request = Callable[[int, int], Awaitable[tuple[float, float, int]]]


async def measure(request: Request, snapshot: Callable[[], Awaitable[dict]],
                  acceptance: Callable[[], Awaitable[tuple[float, float]]],
                  max_tokens: int) -> dict:
    await asyncio.gather(*(request(i, 16) for i in range(4)))  # warm-up
    rows = []
    for b in BATCHES:
        s0, a0 = await snapshot(), await acceptance()
        t = time.perf_counter()
        reqs = await asyncio.gather(*(request(i, max_tokens) for i in range(b)))
        wall = time.perf_counter() - t
        s1, a1 = await snapshot(), await acceptance()
        tpots = [(e2e - ttft) / max(1, n - 1) for ttft, e2e, n in reqs]
        drafts = a1[1] - a0[1]
        rows.append({
            "batch": b,
            "output_tokens_per_s": round(sum(n for _, _, n in reqs) / wall, 1),
            "tpot_ms_p50": round(1000 * statistics.median(tpots), 3),
            "tpot_ms_p90": round(1000 * pct(tpots, 0.9), 3),
            "ttft_ms_p50": round(1000 * statistics.median(r[0] for r in reqs), 2),
            "ttft_ms_p99": round(1000 * pct([r[0] for r in reqs], 0.99), 2),
            "acceptance_length": round(1 + (a1[0] - a0[0]) / drafts, 3) if drafts else None,
            "probes": hit_rates(s0, s1),
        })
    lat = []
    for i in range(LATENCY_REQUESTS):
        _, e2e, _ = await request(i, LATENCY_TOKENS)
        lat.append(e2e)
    return {"batches": rows, "latency_b1_ms": {
        "p50": round(1000 * statistics.median(lat), 3), "p90": round(1000 * pct(lat, 0.9), 3),
        "tokens": LATENCY_TOKENS, "requests": LATENCY_REQUESTS}}


def overrides(config: str, k: int) -> dict:
    o = dict(CONFIGS[config], max_num_seqs=max(BATCHES))
    if config != "no-spec":
        o["num_speculative_tokens"] = k
    return o


async def run_direct(config: str, k: int, max_tokens: int) -> dict:
    from prometheus_client import REGISTRY
    from vllm import SamplingParams

    from engine_ext.engine import SpecEngine
    from engine_ext.settings import EngineSettings

    eng = SpecEngine(EngineSettings.from_env(**overrides(config, k)), poll_interval_s=3600)
    t0 = time.monotonic()
    await eng.start()
    start_s = time.monotonic() - t0
    tok = eng.engine.get_tokenizer()
    ids = [tok.encode(p, add_special_tokens=False) for p in PROMPTS]
    counter = iter(range(10**9))

    async def request(i: int, n: int) -> tuple[float, float, int]:
        sp = SamplingParams(max_tokens=n, temperature=0, ignore_eos=True)
        t = time.perf_counter()
        first, got = None, 0
        async for out in eng.engine.generate({"prompt_token_ids": ids[i % len(ids)]}, sp,
                                             request_id=f"r{next(counter)}"):
            if first is None and out.outputs[0].token_ids:
                first = time.perf_counter() - t
            got = len(out.outputs[0].token_ids)
        return first or 0.0, time.perf_counter() - t, got

    async def snapshot() -> dict:
        return forwards(await eng.collective_rpc("specgw_probe_snapshot"))

    async def acceptance() -> tuple[float, float]:
        lbl = {"model": eng.model_name}
        return (REGISTRY.get_sample_value(
                    "specgw_spec_decode_accepted_tokens_per_draft_sum", lbl) or 0.0,
                REGISTRY.get_sample_value(
                    "specgw_spec_decode_accepted_tokens_per_draft_count", lbl) or 0.0)

    res = await measure(request, snapshot, acceptance, max_tokens)
    await eng.shutdown()
    return {"engine_start_s": round(start_s, 1), **res}


def cli_flags(config: str, k: int) -> list[str]:
    o = overrides(config, k)
    flags = ["--runner", o["runner"], "--max-num-seqs", str(o["max_num_seqs"])]
    if o.get("method") == "none":
        flags += ["--method", "none"]
    else:
        flags += ["-k", str(k)]
    if o.get("draft_enforce_eager"):
        flags.append("--draft-enforce-eager")
    return flags


async def run_gateway(config: str, k: int, max_tokens: int, out: Path) -> dict:
    import httpx

    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import MODEL, Server, metric_sum, scrape

    srv = Server(f"bench-gw-{config}-k{k}", ["--log-format", "text", "--max-concurrency",
                                             "256", "--poll-interval", "3600",
                                             *cli_flags(config, k)])
    t0 = time.monotonic()
    try:
        srv.wait_ready(600)
        start_s = time.monotonic() - t0
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
        async with httpx.AsyncClient(base_url=srv.url, timeout=600, limits=limits) as c:
            async def request(i: int, n: int) -> tuple[float, float, int]:
                body = {"model": MODEL, "prompt": PROMPTS[i % len(PROMPTS)],
                        "max_tokens": n, "temperature": 0, "ignore_eos": True,
                        "stream": True, "stream_options": {"include_usage": True}}
                t = time.perf_counter()
                first, got = None, 0
                async with c.stream("POST", "/v1/completions", json=body) as r:
                    async for line in r.aiter_lines():
                        if not line.startswith("data: ") or line == "data: [DONE]":
                            continue
                        chunk = json.loads(line[6:])
                        if first is None and chunk.get("choices"):
                            first = time.perf_counter() - t
                        if chunk.get("usage"):
                            got = chunk["usage"]["completion_tokens"]
                return first or 0.0, time.perf_counter() - t, got

            async def snapshot() -> dict:
                return forwards((await c.get("/v1/engine/probes")).json())

            async def acceptance() -> tuple[float, float]:
                s = await asyncio.to_thread(scrape, srv.url)
                return (metric_sum(s, "vllm:spec_decode_num_accepted_tokens_total"),
                        metric_sum(s, "vllm:spec_decode_num_drafts_total"))

            res = await measure(request, snapshot, acceptance, max_tokens)
        return {"engine_start_s": round(start_s, 1), **res}
    finally:
        srv.stop()
        (out / f"{srv.log_path.stem}.log").write_text(srv.log_path.read_text(errors="replace"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "docs/gpu")))
    ap.add_argument("--job", help="MODE:CONFIG:K, run one job in this process")
    ap.add_argument("--jobs", default="direct:no-spec:0,gateway:no-spec:0,"
                    "direct:v1-piecewise:3,gateway:v1-piecewise:3,direct:v1-eager-draft:3,"
                    "direct:v2-default:3")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--timeout", type=int, default=200)
    ap.add_argument("--logs", type=Path, help="where job logs go (default: --out)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    logs = a.logs or a.out
    logs.mkdir(parents=True, exist_ok=True)
    if a.job:
        mode, config, k = a.job.split(":")
        runner = run_direct(config, int(k), a.max_tokens) if mode == "direct" else \
            run_gateway(config, int(k), a.max_tokens, a.logs or a.out)
        res = {"mode": mode, "config": config, "k": int(k), **asyncio.run(runner)}
        (a.out / f"bench_{mode}_{config}_k{k}.json").write_text(json.dumps(res, indent=2))
        print("RESULT", json.dumps({
            "job": a.job, "latency_b1_ms": res["latency_b1_ms"],
            "tps": {r["batch"]: r["output_tokens_per_s"] for r in res["batches"]},
            "al": res["batches"][0]["acceptance_length"],
            "draft_hit": {r["batch"]: {p: x["hit_rate"] for p, x in r["probes"].items()
                                       if p.startswith("draft")} for r in res["batches"]}}))
        return
    for job in a.jobs.split(","):
        t = time.time()
        log = logs / f"bench_{job.replace(':', '_')}.log"
        with log.open("w") as f:
            try:
                rc = subprocess.run([sys.executable, __file__, "--job", job, "--out",
                                     str(a.out), "--max-tokens", str(a.max_tokens)],
                                    stdout=f, stderr=subprocess.STDOUT, timeout=a.timeout,
                                    cwd=ROOT).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        text = log.read_text(errors="replace")
        lines = [ln for ln in text.splitlines() if ln.startswith("RESULT")]
        print(f"== {job} rc={rc} {time.time() - t:.0f}s",
              lines[-1] if lines else "\n".join(text.splitlines()[-12:]), flush=True)


if __name__ == "__main__":
    main()
