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

``--groups replay,propose,...`` adds, per concurrency, ``ab`` alternations that switch
one kind of wrapper alone (``engine_ext.internals.install.GROUPS``; the others stay out
through them): where the cost comes from. The blocks cycle through ``ab``, ``aa`` and one
``ab`` per group. ``--py-spy RATE`` samples the engine's processes for ``--py-spy-s``
seconds with the probes in, then as long with them out, after each concurrency's blocks
under the same load (``OUT/profiles/``): what the engine core's thread runs in each.

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

from benchmarks.harness import Server, metric_sum, scrape
from benchmarks.probe_alternate_data import ITERATIONS, profile_reading, profile_stem, report
from benchmarks.probe_toggle import Load, add_load_args, run_and_report, run_meta


def group_names(text: str) -> list[str]:
    from engine_ext.internals.install import GROUPS

    names = [g for g in text.split(",") if g]
    if bad := [g for g in names if g not in GROUPS]:
        raise argparse.ArgumentTypeError(f"not among {GROUPS}: {bad}")
    return names


def variants(groups: list[str]) -> list[tuple[str, list[str] | None]]:
    """What the blocks cycle through: (mode, groups switched; None: all)."""
    return [("ab", None), ("aa", None), *(("ab", [g]) for g in groups)]


async def alternation(http: httpx.AsyncClient, url: str, steps: int, mode: str, seed: int,
                      timeout_s: float, groups: list[str] | None = None) -> dict:
    """One alternation on every rank, waited for; its records, one per rank."""
    body = {"steps": steps, "mode": mode, "seed": seed}
    if groups is not None:
        body["groups"] = groups
    r = await http.post(f"{url}/v1/engine/probes/alternate", json=body, timeout=60)
    r.raise_for_status()
    t_end = time.monotonic() + timeout_s
    while True:
        # Sparse reads: each one is an RPC into the engine's loop (recorded, left out).
        await asyncio.sleep(1.0)
        r = await http.get(f"{url}/v1/engine/probes/alternate", timeout=60)
        r.raise_for_status()
        got = r.json()
        if got["done"]:
            return {"mode": mode, "seed": seed, "groups": groups, "ranks": got["ranks"]}
        if time.monotonic() > t_end:
            raise TimeoutError(f"alternation of {steps} steps not done in {timeout_s:g} s: "
                               f"{got}")


async def profiles(a: argparse.Namespace, http: httpx.AsyncClient, srv: Server, c: int
                   ) -> dict[str, dict[str, str]]:
    """py-spy over ``--py-spy-s`` with the probes in, then out (put back in after), each
    process's gzipped raw profile under ``OUT/profiles/``; per window its stem, wall time
    and the engine steps vLLM counted in it."""
    from benchmarks import py_spy
    from benchmarks.serve_compare import process_names

    procs = process_names(srv)
    out: dict[str, dict] = {}
    try:
        for window, enabled in (("in", True), ("out", False)):
            r = await http.post(f"{srv.url}/v1/engine/probes", json={"enabled": enabled},
                                timeout=60)
            r.raise_for_status()
            stem = profile_stem(window, c)
            before = await asyncio.to_thread(scrape, srv.url)
            t0 = time.monotonic()
            with py_spy.recording(procs, a.out / "profiles", stem, a.py_spy):
                await asyncio.sleep(a.py_spy_s)
            wall = time.monotonic() - t0
            after = await asyncio.to_thread(scrape, srv.url)
            out[window] = {"stem": stem, "wall_s": round(wall, 3), "rate": a.py_spy,
                           "iterations": metric_sum(after, ITERATIONS)
                           - metric_sum(before, ITERATIONS)}
            print(f"c={c} py-spy, probes {window}: {wall:.1f} s, "
                  f"{out[window]['iterations']:.0f} engine steps", flush=True)
    finally:
        r = await http.post(f"{srv.url}/v1/engine/probes", json={"enabled": True}, timeout=60)
        r.raise_for_status()
    return out


async def cell(a: argparse.Namespace, srv: Server, c: int, first: int) -> dict:
    url = srv.url
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
        blocks, prof = [], None
        cycle = variants(a.groups)
        try:
            for b in range(a.blocks):
                mode, groups = cycle[(first + b) % len(cycle)]
                blk = await alternation(http, url, a.steps, mode, a.seed + 1000 * c + b,
                                        a.block_timeout_s, groups)
                blocks.append(blk)
                rec = blk["ranks"][0]["record"]
                span = (rec["t_ns"][-1] - rec["t_ns"][0]) / 1e9
                print(f"c={c} block {b} ({mode}{'' if groups is None else ' ' + groups[0]}): "
                      f"{a.steps} steps in {span:.1f} s", flush=True)
            if a.py_spy:
                prof = await profiles(a, http, srv, c)
        finally:
            await load.stop()
        # What the probes counted by the cell's end (the ungrouped 'in' steps and the
        # windows with the probes in), kept beside the measurement: never the cell's loss.
        try:
            r = await http.get(f"{url}/v1/engine/probes", timeout=60)
            ledger = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            print(f"c={c}: ledger not read: {exc}", flush=True)
            ledger = None
    out = {"concurrency": c, "blocks": blocks, "requests_done": load.done,
           "errors": load.errors, "ledger": ledger}
    if prof is not None:
        out["profiles"] = prof
        try:
            out["profile_reading"] = profile_reading(a.out, out)
        except Exception as exc:  # the raw profiles are kept; read them again here
            out["profile_reading"] = None
            print(f"c={c}: profiles not read: {type(exc).__name__}: {exc}", flush=True)
    return out


def run(a: argparse.Namespace) -> dict:
    from benchmarks.serve_compare import BUNDLED, SERVED, engine_config, specgw_flags

    a.pair, a.method, a.k, a.max_num_seqs, a.max_model_len = (
        a.pair or BUNDLED, "eagle3", 3, 128, 2048)
    a.model_name = SERVED
    meta = run_meta("probe_alternate", a.argv)
    from engine_ext.probes.ledger import COUNTING

    meta.update(probe_counting=COUNTING, concurrency=a.concurrency, steps=a.steps,
                blocks=a.blocks, poll_s=a.poll_s,
                warmup_s=a.warmup_s, prompt_words=a.prompt_words, output_len=a.output_len,
                load_client="aiohttp", groups=a.groups, py_spy=a.py_spy, py_spy_s=a.py_spy_s)
    data = {"meta": meta, "cells": []}
    if a.py_spy:
        from benchmarks import py_spy

        if py_spy.binary() is None:  # before the engine starts, not after c=1's blocks
            raise SystemExit("--py-spy: py-spy not found (pip install py-spy)")
    cfg = engine_config(a, meta["device"])
    flags, env = specgw_flags(cfg, True, max(a.concurrency))
    srv = Server("specgw-alternate", flags, env=env, log_dir=a.out / "logs")
    try:
        t = time.monotonic()
        srv.wait_ready(a.start_timeout)
        print(f"== specgw serve ready in {time.monotonic() - t:.0f}s", flush=True)
        data["config"] = cfg
        for i, c in enumerate(a.concurrency):
            data["cells"].append(asyncio.run(cell(a, srv, c, first=i)))
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
    ap.add_argument("--groups", type=group_names, default=[],
                    help="kinds of wrapper also priced alone (install.GROUPS), comma-separated")
    ap.add_argument("--py-spy", type=int, default=0, metavar="RATE",
                    help="samples/s of the probes-in and probes-out profiles (0: none)")
    ap.add_argument("--py-spy-s", type=float, default=20.0)
    add_load_args(ap)
    run_and_report(ap.parse_args(), "probe_alternate", run, report)


if __name__ == "__main__":
    main()
