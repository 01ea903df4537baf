"""Probe cost step by step inside one engine: the probes in on one engine step and out on
its neighbour, thousands of times (#14, target 2).

Why: the windowed A/B of ``probe_toggle.py`` compares seconds of load with seconds of
load, and on the H200's host two windows of the same server, both with the probes out,
differ by 67-73 points (docs/benchmarks.md, section 2): the host's own swings, far above
the 1% the probes are held to. Two neighbouring engine steps of a steady batch do the same
work a few milliseconds apart, so whatever slows the host for seconds slows both.
``POST /v1/engine/probes/alternate`` (``engine_ext.probes.alternate``) makes the worker
switch its probes before every engine step, in pairs of steps whose order a seeded coin
draws, and record when each step started and the tokens and requests the scheduler gave
it. A step lasts from its start to the next step's start: all the engine loop did for it.

Protocol, per concurrency ``c``: ``c`` closed-loop clients (``probe_toggle.Load``:
greedy completions of ``--output-len`` tokens with ``ignore_eos``) through the whole
cell; ``--warmup-s``; then ``--blocks`` alternations of ``--steps`` steps each, ``ab``
(probes in / out) and ``aa`` (the control: probes in on both sides, the same switching
call every step) in turn, the first mode rotated per concurrency. The workers' probe
poller reads the ledgers every ``--poll-s`` seconds meanwhile (1 s: the shortest
interval, so that there are many reads to price).

Analysis (``probe_alternate_data.py``): a pair counts when both steps had the same
scheduled tokens and requests (the same work) and no RPC of ours fell into either.
Overhead = sum of the 'in' steps / sum of the 'out' steps - 1 over the counted pairs (what
throughput sees), with a bootstrap 95% interval over pairs; the median of the paired
ratios beside it. A probe read's cost is the excess of the step it fell into over the
median of its neighbours; at a poll interval P it adds (mean cost / P). The control
(``aa``) must read zero within its interval.

Device: ``JOB_SECONDS=... bash benchmarks/gpu_session.sh job benchmarks/probe_alternate.py``
(defaults: the bundled pair, serve_compare's engine configuration, c = 1,16,64,128).
Here: ``flock /tmp/specgw-engine.lock python -m benchmarks.probe_alternate --out DIR
--concurrency 1,4 --steps 200 --blocks 2``. ``--report-only`` rewrites the report.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

import aiohttp
import httpx

from benchmarks.harness import Server
from benchmarks.probe_alternate_data import report
from benchmarks.probe_toggle import Load, add_load_args, run_and_report, run_meta

MODES = ("ab", "aa")


async def alternation(http: httpx.AsyncClient, url: str, steps: int, mode: str, seed: int,
                      timeout_s: float) -> dict:
    """One alternation on every rank, waited for; its records, one per rank."""
    r = await http.post(f"{url}/v1/engine/probes/alternate",
                        json={"steps": steps, "mode": mode, "seed": seed}, timeout=60)
    r.raise_for_status()
    t_end = time.monotonic() + timeout_s
    while True:
        # Sparse reads: each one is an RPC into the engine's loop (recorded, left out).
        await asyncio.sleep(1.0)
        r = await http.get(f"{url}/v1/engine/probes/alternate", timeout=60)
        r.raise_for_status()
        got = r.json()
        if got["done"]:
            return {"mode": mode, "seed": seed, "ranks": got["ranks"]}
        if time.monotonic() > t_end:
            raise TimeoutError(f"alternation of {steps} steps not done in {timeout_s:g} s: "
                               f"{got}")


async def cell(a: argparse.Namespace, url: str, c: int, first: int) -> dict:
    conn = aiohttp.TCPConnector(limit=c, keepalive_timeout=2.0)  # as probe_toggle's
    async with (aiohttp.ClientSession(connector=conn,
                                      timeout=aiohttp.ClientTimeout(total=600)) as load_http,
                httpx.AsyncClient(timeout=600, limits=httpx.Limits(keepalive_expiry=2.0)
                                  ) as http):
        r = await http.post(f"{url}/v1/engine/probes",
                            json={"enabled": True, "poll_interval_s": a.poll_s}, timeout=60)
        r.raise_for_status()
        load = Load(url, a.model_name, c, a.prompt_words, a.output_len, a.seed + c)
        load.start(load_http)
        await asyncio.sleep(a.warmup_s)
        blocks = []
        try:
            for b in range(a.blocks):
                mode = MODES[(first + b) % len(MODES)]
                blk = await alternation(http, url, a.steps, mode, a.seed + 1000 * c + b,
                                        a.block_timeout_s)
                blocks.append(blk)
                rec = blk["ranks"][0]["record"]
                span = (rec["t_ns"][-1] - rec["t_ns"][0]) / 1e9
                print(f"c={c} block {b} ({mode}): {a.steps} steps in {span:.1f} s",
                      flush=True)
        finally:
            await load.stop()
    return {"concurrency": c, "blocks": blocks, "requests_done": load.done,
            "errors": load.errors}


def run(a: argparse.Namespace) -> dict:
    from benchmarks.serve_compare import BUNDLED, SERVED, engine_config, specgw_flags

    a.pair, a.method, a.k, a.max_num_seqs, a.max_model_len = (
        a.pair or BUNDLED, "eagle3", 3, 128, 2048)
    a.model_name = SERVED
    meta = run_meta("probe_alternate", a.argv)
    meta.update(concurrency=a.concurrency, steps=a.steps, blocks=a.blocks, poll_s=a.poll_s,
                warmup_s=a.warmup_s, prompt_words=a.prompt_words, output_len=a.output_len,
                load_client="aiohttp")
    data = {"meta": meta, "cells": []}
    cfg = engine_config(a, meta["device"])
    flags, env = specgw_flags(cfg, True, max(a.concurrency))
    srv = Server("specgw-alternate", flags, env=env, log_dir=a.out / "logs")
    try:
        t = time.monotonic()
        srv.wait_ready(a.start_timeout)
        print(f"== specgw serve ready in {time.monotonic() - t:.0f}s", flush=True)
        data["config"] = cfg
        for i, c in enumerate(a.concurrency):
            data["cells"].append(asyncio.run(cell(a, srv.url, c, first=i)))
            (a.out / "probe_alternate.json").write_text(json.dumps(data))
    finally:
        srv.stop()
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "probe_alternate")))
    ap.add_argument("--pair", type=Path, default=None, help="default: the bundled pair")
    ap.add_argument("--concurrency", type=ints, default=[1, 16, 64, 128])
    ap.add_argument("--steps", type=int, default=2000, help="engine steps per alternation")
    ap.add_argument("--blocks", type=int, default=4, help="alternations per concurrency")
    ap.add_argument("--warmup-s", type=float, default=3.0)
    ap.add_argument("--poll-s", type=float, default=1.0)
    ap.add_argument("--block-timeout-s", type=float, default=300)
    add_load_args(ap)
    run_and_report(ap.parse_args(), "probe_alternate", run, report)


if __name__ == "__main__":
    main()
