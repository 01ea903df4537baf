"""Bounded load test: the same fixed set of requests sent to one backend directly and
through the specgw router in front of it, on 127.0.0.1. Reports throughput and
p50/p99 latency for both, the latency the router adds, and accounts for every request
(succeeded, or failed with an error body; none lost or hung). Writes
``docs/loadtest.md`` + JSON (``python -m benchmarks.load_test``). Exit status 1 if any
request is unaccounted for.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path

import httpx
from tqdm import tqdm

from benchmarks.harness import MODEL, ROOT, Server, pct
from benchmarks.report import md_table


async def load(url: str, n: int, concurrency: int, max_tokens: int, deadline_s: float,
               label: str) -> dict:
    sem = asyncio.Semaphore(concurrency)
    results: list[dict] = []
    bar = tqdm(total=n, desc=label, unit="req")

    async def one(c: httpx.AsyncClient, i: int) -> None:
        async with sem:
            body = {"model": MODEL, "prompt": f"def task_{i % 16}(x):\n", "temperature": 0,
                    "max_tokens": max_tokens, "ignore_eos": True}
            t = time.perf_counter()
            try:
                r = await c.post("/v1/completions", json=body)
                ok = r.status_code == 200
                toks = r.json()["usage"]["completion_tokens"] if ok else 0
                err = None if ok else r.json().get("error", {}).get("message", r.text[:200])
            except httpx.HTTPError as exc:
                ok, toks, err = False, 0, type(exc).__name__
            results.append({"i": i, "ok": ok, "tokens": toks, "error": err,
                            "latency_s": time.perf_counter() - t})
            bar.update()

    t0 = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=deadline_s) as c:
        await asyncio.wait_for(asyncio.gather(*(one(c, i) for i in range(n))), deadline_s)
    wall = time.perf_counter() - t0
    bar.close()
    lat = [r["latency_s"] for r in results if r["ok"]]
    return {
        "label": label, "sent": n, "succeeded": sum(r["ok"] for r in results),
        "failed_with_error": sum(not r["ok"] and r["error"] is not None for r in results),
        "unaccounted": n - len(results), "wall_s": round(wall, 2),
        "requests_per_s": round(len(lat) / wall, 3),
        "tokens_per_s": round(sum(r["tokens"] for r in results) / wall, 1),
        "latency_p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
        "latency_p99_ms": round(1000 * pct(lat, 0.99), 1) if lat else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--deadline", type=float, default=600)
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    a = ap.parse_args()
    backend = Server("load-backend", ["--log-format", "text"])
    router = None
    try:
        backend.wait_ready()
        router = Server("load-router", ["--log-format", "text", "--backend",
                                        f"only={backend.url}"])
        router.wait_ready(60)
        args = (a.requests, a.concurrency, a.max_tokens, a.deadline)
        # Interleave to share the machine's drift: direct, router, direct, router.
        runs = [asyncio.run(load(backend.url, *args, "direct-1")),
                asyncio.run(load(router.url, *args, "router-1")),
                asyncio.run(load(backend.url, *args, "direct-2")),
                asyncio.run(load(router.url, *args, "router-2"))]
    finally:
        for s in (router, backend):
            if s is not None:
                s.stop()
    direct = [r for r in runs if r["label"].startswith("direct")]
    routed = [r for r in runs if r["label"].startswith("router")]

    def mean(rows: list[dict], key: str) -> float:
        return statistics.mean(r[key] for r in rows)

    summary = {
        "throughput_ratio_router_vs_direct": round(
            mean(routed, "tokens_per_s") / mean(direct, "tokens_per_s"), 3),
        "added_p50_ms": round(mean(routed, "latency_p50_ms") - mean(direct, "latency_p50_ms"),
                              1),
        "added_p99_ms": round(mean(routed, "latency_p99_ms") - mean(direct, "latency_p99_ms"),
                              1),
    }
    a.out.mkdir(exist_ok=True)
    meta = {"date": dt.date.today().isoformat(), **{k: v for k, v in vars(a).items()
                                                    if k != "out"}}
    (a.out / "loadtest.json").write_text(json.dumps(
        {"meta": meta, "runs": runs, "summary": summary}, indent=2) + "\n")
    lines = [
        "# Load test: specgw router in front of one backend vs the backend directly",
        "",
        f"Date {meta['date']}; `python -m benchmarks.load_test` on the 2-core CPU machine: "
        f"backend = `specgw serve` (bundled pair, vLLM CPU engine), router = `specgw serve "
        f"--backend only=<backend>`, both on 127.0.0.1. {a.requests} non-streaming "
        f"completions per run ({a.max_tokens} tokens, greedy), {a.concurrency} in flight, "
        "runs interleaved direct/router/direct/router. Client, router and engine share the "
        "same 2 cores, so the router's cost shows up larger here than on a real host.",
        "",
        *md_table(["run", "sent", "succeeded", "failed with error", "unaccounted", "req/s",
                   "tokens/s", "p50 ms", "p99 ms"],
                  [[r[k] for k in ("label", "sent", "succeeded", "failed_with_error",
                                   "unaccounted", "requests_per_s", "tokens_per_s",
                                   "latency_p50_ms", "latency_p99_ms")] for r in runs]),
    ]
    lines += ["", f"Router / direct throughput: **{summary['throughput_ratio_router_vs_direct']}**;"
              f" latency added by the router: p50 **{summary['added_p50_ms']} ms**, p99 "
              f"{summary['added_p99_ms']} ms (means of the two runs each)."]
    (a.out / "loadtest.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r["unaccounted"] == 0 and r["succeeded"] + r["failed_with_error"] ==
                    r["sent"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
