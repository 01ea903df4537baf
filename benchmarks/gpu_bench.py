"""GPU benchmark sweep: no speculation vs EAGLE-3 with an eager drafter, piecewise drafter
graphs (runner V1) and runner V2, for k in {2, 3, 4} and batch 1, 8, 32, 64, each measured
both directly against the engine and through the gateway over HTTP, on the same engine.

One process per ``CONFIG:K`` job. It starts one ``SpecEngine`` and serves the gateway app
on it with the same uvicorn server ``specgw serve`` runs, in the same process. Then it
measures the two paths in alternating order on that one engine:

* ``direct``  B concurrent ``AsyncLLM.generate`` calls in-process;
* ``gateway`` B concurrent streaming ``/v1/completions`` requests from
  ``sse_client.py``, a separate process (so the client costs the gateway nothing).

Because both paths share the engine, its compile and its GPU state, gateway/direct is a
ratio measured in one run, not across two engine starts. Every (path, batch) cell is
repeated ``--reps`` times after one discarded warm-up pass; tokens/s is the median rep,
latency percentiles pool all reps. Per cell: output tokens/s, TPOT and TTFT percentiles,
acceptance length (engine counters), target and drafter CUDA-graph hit rates (worker
probes, counter deltas), and the serving process's CPU time per output token. Then
``--latency-pairs`` sequential single requests alternate direct/gateway for the added
per-request latency.

Results: ``bench_<config>_k<k>.json``; ``gpu_bench_report.py`` builds docs/gpu_bench.md.
Usage (device): ``benchmarks/gpu_session.sh job benchmarks/gpu_bench.py --pair DIR --jobs
no-spec:0,v1-piecewise:3,...``. Here: ``python -m benchmarks.gpu_bench``; it also runs on
the CPU engine (``--batches 1,4 --max-tokens 32``), which is how it was checked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

from benchmarks.harness import (
    CONFIGS,
    PROMPTS,
    acceptance,
    forwards,
    free_port,
    hit_rates,
    parse_metrics,
    pct,
)

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JOBS = ("no-spec:0,v1-piecewise:3,v1-eager-draft:3,v2-default:3,v1-piecewise:2,"
                "v1-eager-draft:2,v2-default:2,v1-piecewise:4,v1-eager-draft:4,v2-default:4")

# (ttft_s, e2e_s, tokens) per request, and the wall time of the whole batch
Batch = tuple[list[tuple[float, float, int]], float]


def overrides(config: str, k: int, max_num_seqs: int) -> dict:
    o = dict(CONFIGS[config], max_num_seqs=max_num_seqs)
    if config != "no-spec":
        o["num_speculative_tokens"] = k
    return o


class DirectPath:
    """B concurrent in-process ``generate`` calls: what the engine delivers unwrapped."""

    name = "direct"

    def __init__(self, engine, prompt_ids: list[list[int]]):
        from vllm import SamplingParams

        self.engine, self.ids, self.sp = engine, prompt_ids, SamplingParams
        self.n = 0

    async def _one(self, i: int, max_tokens: int) -> tuple[float, float, int]:
        sp = self.sp(max_tokens=max_tokens, temperature=0, ignore_eos=True)
        self.n += 1
        t = time.perf_counter()
        first, got = None, 0
        async for out in self.engine.generate({"prompt_token_ids": self.ids[i % len(self.ids)]},
                                              sp, request_id=f"direct-{self.n}"):
            if first is None and out.outputs[0].token_ids:
                first = time.perf_counter() - t
            got = len(out.outputs[0].token_ids)
        e2e = time.perf_counter() - t
        return first if first is not None else e2e, e2e, got

    async def batch(self, b: int, max_tokens: int, offset: int = 0) -> Batch:
        t = time.perf_counter()
        reqs = await asyncio.gather(*(self._one(offset + i, max_tokens) for i in range(b)))
        return list(reqs), time.perf_counter() - t

    async def close(self) -> None:
        pass


class GatewayPath:
    """B concurrent streaming requests from ``sse_client.py`` (its own process)."""

    name = "gateway"

    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc = proc

    @classmethod
    async def start(cls, url: str, model: str) -> GatewayPath:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.sse_client", "--url", url, "--model", model,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT)
        return cls(proc)

    async def batch(self, b: int, max_tokens: int, offset: int = 0) -> Batch:
        assert self.proc.stdin and self.proc.stdout
        cmd = {"batch": b, "max_tokens": max_tokens, "offset": offset}
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        await self.proc.stdin.drain()
        res = json.loads(await self.proc.stdout.readline())
        if "error" in res:
            raise RuntimeError(f"gateway client: {res['error']}")
        return [tuple(r) for r in res["requests"]], res["wall_s"]

    async def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(b'{"batch": 0}\n')
        await self.proc.stdin.drain()
        await asyncio.wait_for(self.proc.wait(), 30)


def summarize(samples: list[dict]) -> dict:
    """One (path, batch) cell from its repetitions."""
    reqs = [r for s in samples for r in s["requests"]]
    tpots = [(e2e - ttft) / max(1, n - 1) for ttft, e2e, n in reqs]
    ttfts = [r[0] for r in reqs]
    tps = [s["tokens"] / s["wall_s"] for s in samples]
    acc, drafts = sum(s["accepted"] for s in samples), sum(s["drafts"] for s in samples)
    return {
        "output_tokens_per_s": round(statistics.median(tps), 1),
        "output_tokens_per_s_reps": [round(x, 1) for x in tps],
        "tpot_ms_p50": round(1000 * statistics.median(tpots), 3),
        "tpot_ms_p90": round(1000 * pct(tpots, 0.9), 3),
        "ttft_ms_p50": round(1000 * statistics.median(ttfts), 2),
        "ttft_ms_p99": round(1000 * pct(ttfts, 0.99), 2),
        "acceptance_length": round(1 + acc / drafts, 3) if drafts else None,
        "cpu_us_per_token": round(1e6 * sum(s["cpu_s"] for s in samples)
                                  / max(1, sum(s["tokens"] for s in samples)), 1),
        "tokens_short": sum(s["short"] for s in samples),
        # Summed forward-counter deltas of every repetition, rated once.
        "probes": hit_rates({}, sum((Counter(s["forwards"]) for s in samples), Counter())),
    }


async def run_job(config: str, k: int, a: argparse.Namespace) -> dict:  # noqa: C901  (one GPU job, start to report; owned by benchmarks)
    import uvicorn
    from prometheus_client import REGISTRY, generate_latest

    from engine_ext.engine import SpecEngine
    from engine_ext.settings import EngineSettings
    from gateway.app import GatewayConfig, create_app
    from gateway.cli import make_server

    pair = a.pair
    settings = EngineSettings.from_env(
        model=str(pair / "target"), draft_model=str(pair / "eagle3"),
        served_model_name="bench", **overrides(config, k, max(a.batches)))
    engine = SpecEngine(settings, poll_interval_s=3600)  # snapshots are taken per cell
    app = create_app(engine, GatewayConfig(max_concurrency=1024, max_queue=1024))
    port = free_port()
    server: uvicorn.Server = make_server(app, "127.0.0.1", port, "warning")
    t0 = time.monotonic()
    serving = asyncio.create_task(server.serve())
    while not engine.ready:
        if engine.start_error or serving.done():
            raise RuntimeError(f"engine did not start: {engine.start_error}")
        await asyncio.sleep(0.2)
    start_s = time.monotonic() - t0
    ids = [engine.engine.get_tokenizer().encode(p, add_special_tokens=False) for p in PROMPTS]
    paths = [DirectPath(engine.engine, ids),
             await GatewayPath.start(f"http://127.0.0.1:{port}", "bench")]

    def metrics() -> dict:  # vLLM's counters live in this process's registry
        return parse_metrics(generate_latest(REGISTRY).decode())

    async def snapshot() -> dict:
        return forwards(await engine.collective_rpc("specgw_probe_snapshot"))

    async def sample(run: Callable[[], Awaitable[Batch]], max_tokens: int) -> dict:
        s0, m0, c0 = await snapshot(), metrics(), time.process_time()
        reqs, wall = await run()
        c1, m1, s1 = time.process_time(), metrics(), await snapshot()
        acc = acceptance(m0, m1)
        return {"requests": reqs, "wall_s": wall, "tokens": sum(r[2] for r in reqs),
                "short": sum(max_tokens - r[2] for r in reqs),
                "accepted": acc["accepted"], "drafts": acc["drafts"],
                "cpu_s": c1 - c0,
                "forwards": {key: s1.get(key, 0) - s0.get(key, 0) for key in s0.keys() | s1}}

    samples: dict[tuple[str, int], list[dict]] = {}
    try:
        for b in a.batches:  # warm-up pass over every shape on both paths, discarded
            for p in paths:
                await p.batch(b, a.max_tokens)
        for rep in range(a.reps):
            order = paths if rep % 2 == 0 else paths[::-1]  # alternate: cancels drift
            for b in a.batches:
                for p in order:
                    s = await sample(lambda p=p, b=b: p.batch(b, a.max_tokens), a.max_tokens)
                    samples.setdefault((p.name, b), []).append(s)
        latency: dict[str, list[float]] = {p.name: [] for p in paths}
        for i in range(a.latency_pairs):
            for p in paths if i % 2 == 0 else paths[::-1]:
                reqs, _ = await p.batch(1, a.latency_tokens, offset=i)
                latency[p.name].append(reqs[0][1])
        final = await engine.collective_rpc("specgw_probe_snapshot")
    finally:
        for p in paths:
            await p.close()
        server.should_exit = True
        await serving
    diffs = [g - d for d, g in zip(latency["direct"], latency["gateway"], strict=True)]
    cells = {name: {str(b): summarize(samples[(name, b)]) for b in a.batches}
             for name in ("direct", "gateway")}
    return {
        "config": config, "k": k, "settings": overrides(config, k, max(a.batches)),
        "engine_start_s": round(start_s, 1), "meta": meta(pair),
        "self_check_warnings": (engine.self_check or {}).get("warnings"),
        "max_tokens": a.max_tokens, "reps": a.reps, "cells": cells,
        "latency_b1_ms": {
            "tokens": a.latency_tokens, "pairs": a.latency_pairs,
            "direct_p50": round(1000 * statistics.median(latency["direct"]), 3),
            "gateway_p50": round(1000 * statistics.median(latency["gateway"]), 3),
            "added_p50_of_paired_diffs": round(1000 * statistics.median(diffs), 3),
            "added_p90_of_paired_diffs": round(1000 * pct(diffs, 0.9), 3),
        },
        "ranks": len(final),
        "unattributed_replays": sum(s.get("unattributed_replays", 0) or 0 for s in final),
    }


def meta(pair: Path) -> dict:
    import torch
    import vllm

    info = pair / "build_info.json"
    return {
        "date": time.strftime("%Y-%m-%d"), "vllm": vllm.__version__, "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "pair": json.loads(info.read_text()) if info.exists() else str(pair),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "docs/gpu")))
    ap.add_argument("--pair", type=Path, default=ROOT / "models" / "tiny-code-llama",
                    help="model pair dir with target/ and eagle3/ (build_pair.py output)")
    ap.add_argument("--job", help="CONFIG:K, run one job in this process")
    ap.add_argument("--jobs", default=DEFAULT_JOBS)
    ap.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")],
                    default=[1, 8, 32, 64])
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--latency-pairs", type=int, default=30)
    ap.add_argument("--latency-tokens", type=int, default=64)
    ap.add_argument("--timeout", type=int, default=300, help="per job, seconds")
    ap.add_argument("--deadline", type=float, default=0,
                    help="unix time after which no new job starts (0: none)")
    ap.add_argument("--archive", type=Path,
                    help="after every job, pack --out into this .tgz (the device returns "
                         "few files, and a call cut off at its limit keeps what it has)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.job:
        config, k = a.job.split(":")
        res = asyncio.run(run_job(config, int(k), a))
        (a.out / f"bench_{config}_k{k}.json").write_text(json.dumps(res, indent=2))
        print("RESULT", json.dumps({
            "job": a.job, "start_s": res["engine_start_s"], "latency": res["latency_b1_ms"],
            **{path: {b: (c["output_tokens_per_s"], c["acceptance_length"],
                          {p: x["hit_rate"] for p, x in c["probes"].items()})
                      for b, c in cells.items()} for path, cells in res["cells"].items()}}))
        return
    passthrough = ["--out", str(a.out), "--pair", str(a.pair), "--max-tokens",
                   str(a.max_tokens), "--reps", str(a.reps), "--batches",
                   ",".join(map(str, a.batches)), "--latency-pairs", str(a.latency_pairs),
                   "--latency-tokens", str(a.latency_tokens)]
    for job in a.jobs.split(","):
        config, k = job.split(":")
        if (a.out / f"bench_{config}_k{k}.json").exists():
            print(f"== {job} done earlier", flush=True)
            continue
        if a.deadline and time.time() > a.deadline:
            print(f"== {job} skipped: deadline", flush=True)
            continue
        t = time.time()
        log = a.out / f"bench_{config}_k{k}.log"
        with log.open("w") as f:
            # Own process group: a timed-out job takes its engine-core process with it
            # (it would keep holding GPU memory otherwise).
            proc = subprocess.Popen([sys.executable, "-m", "benchmarks.gpu_bench", "--job", job,
                                     *passthrough],
                                    stdout=f, stderr=subprocess.STDOUT, cwd=ROOT,
                                    start_new_session=True)
            try:
                rc = proc.wait(a.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc = "timeout"
            except KeyboardInterrupt:  # the device script's time limit: free the GPU
                os.killpg(proc.pid, signal.SIGKILL)
                raise
        text = log.read_text(errors="replace")
        lines = [ln for ln in text.splitlines() if ln.startswith("RESULT")]
        print(f"== {job} rc={rc} {time.time() - t:.0f}s",
              lines[-1] if lines else "\n".join(text.splitlines()[-12:]), flush=True)
        if a.archive:
            with tarfile.open(a.archive, "w:gz") as tar:
                tar.add(a.out, arcname=".")


if __name__ == "__main__":
    main()
