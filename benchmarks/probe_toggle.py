"""Probe cost inside one server: the probes switched in and out, seconds apart (#14, target 2).

Why not two servers: ``serve_compare.py`` measures ``specgw`` against
``specgw-probes-off``, two processes. Each process has its own start-to-start offset (its
graphs, memory layout, CPU placement), and on the H200 that offset is larger than the
probes can cost: the same comparison read -6% at c=16 in one run set and +14% in the next.
Here one ``specgw serve`` switches its workers' probes with ``POST /v1/engine/probes``
(``engine_ext.internals.install.set_enabled``: the wrappers leave vLLM's classes, the
poller stops) between windows of steady load, so both sides of every ratio are the same
process, seconds apart.

Protocol, per concurrency ``c``: ``c`` closed-loop clients (each sends its next request
when the previous one is answered: completions, ``--prompt-words`` random words,
``--output-len`` tokens with ``ignore_eos``, greedy, not streamed, so the client's own
per-token work stays off the machine's cores) run through the whole cell; ``--warmup-s``
first. Then ``--groups`` groups; a group runs each state once, in an order rotated per
group:

* ``off``: probes out, nothing polled (vLLM as if specgw's probes were absent);
* ``on``: probes in, polled every ``--poll-s`` (the default 5 s);
* ``on-poll-1s``: probes in, polled every second (the shortest interval accepted).

A window: switch, ``--settle-s``, read ``vllm:generation_tokens_total`` from ``/metrics``,
``--window-s``, read it again: the engine's own token count over the window's own
measured duration. Overhead per group = 1 - (state's tok/s / ``off``'s tok/s), in %.
A scrape refreshes the probes only while they are in, so it counts against ``on``.

Device: ``JOB_SECONDS=... bash benchmarks/gpu_session.sh job benchmarks/probe_toggle.py``
(defaults: the bundled pair, the serve_compare engine configuration, c = 1,16,64,128).
Here: ``flock /tmp/specgw-engine.lock python -m benchmarks.probe_toggle --out DIR
--concurrency 1,4 --groups 5``. ``--report-only`` rewrites ``DIR/probe_toggle.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import httpx

from benchmarks.harness import Server, metric_sum, parse_metrics, scrape
from benchmarks.report import Spread, Target, md_table, verdict, write
from benchmarks.serve_compare_report import T_PROBES

STATES = ("off", "on", "on-poll-1s")
T_OVERHEAD = Target("probe overhead, % of probes-off output tok/s, inside one server "
                    "(median of paired windows)", "<=", T_PROBES.threshold)
TOKENS = "vllm:generation_tokens_total"


class Load:
    """``c`` closed-loop clients against one server until ``stop()``."""

    def __init__(self, url: str, model: str, c: int, words: int, out_len: int, seed: int):
        rng = random.Random(seed)
        vocab = [f"w{i}" for i in range(2000)]
        self.prompts = [" ".join(rng.choices(vocab, k=words)) for _ in range(256)]
        self.url, self.model, self.c, self.out_len = url, model, c, out_len
        self.errors: dict[str, int] = {}
        self.done = 0
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    async def _client(self, i: int, http: aiohttp.ClientSession) -> None:
        n = i
        while not self._stop.is_set():
            body = {"model": self.model, "prompt": self.prompts[n % len(self.prompts)],
                    "max_tokens": self.out_len, "temperature": 0, "ignore_eos": True}
            n += self.c
            try:
                async with http.post(f"{self.url}/v1/completions", json=body) as r:
                    await r.read()
                    ok, what = r.status == 200, str(r.status)
            except (aiohttp.ClientError, TimeoutError) as exc:
                ok, what = False, type(exc).__name__
            if ok:
                self.done += 1
            else:
                self.errors[what] = self.errors.get(what, 0) + 1

    def start(self, http: aiohttp.ClientSession) -> None:
        self._tasks = [asyncio.create_task(self._client(i, http)) for i in range(self.c)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def switch(http: httpx.AsyncClient, url: str, state: str, poll_s: float) -> None:
    body = ({"enabled": False} if state == "off" else
            {"enabled": True, "poll_interval_s": 1.0 if state == "on-poll-1s" else poll_s})
    r = await http.post(f"{url}/v1/engine/probes", json=body, timeout=60)
    r.raise_for_status()


async def tokens(http: httpx.AsyncClient, url: str) -> tuple[float, float]:
    r = await http.get(f"{url}/metrics", timeout=60)
    return time.monotonic(), metric_sum(parse_metrics(r.text), TOKENS)


async def cell(a: argparse.Namespace, url: str, c: int) -> dict:
    # The load on aiohttp, as vllm bench serve's: the first device run's httpx pool at
    # c=128 lost requests (ReadError) and did not hold the load. Idle connections expire
    # before the server's 5 s keep-alive, so none is reused while the server closes it.
    conn = aiohttp.TCPConnector(limit=c, keepalive_timeout=2.0)
    async with (aiohttp.ClientSession(connector=conn,
                                      timeout=aiohttp.ClientTimeout(total=600)) as load_http,
                httpx.AsyncClient(timeout=600, limits=httpx.Limits(keepalive_expiry=2.0)
                                  ) as http):
        load = Load(url, a.model_name, c, a.prompt_words, a.output_len, a.seed + c)
        load.start(load_http)
        await switch(http, url, "on", a.poll_s)
        await asyncio.sleep(a.warmup_s)
        windows = []
        for g in range(a.groups):
            order = STATES[g % len(STATES):] + STATES[:g % len(STATES)]
            for pos, state in enumerate(order):
                await switch(http, url, state, a.poll_s)
                await asyncio.sleep(a.settle_s)
                t0, n0 = await tokens(http, url)
                await asyncio.sleep(a.window_s)
                t1, n1 = await tokens(http, url)
                windows.append({"group": g, "position": pos, "state": state,
                                "seconds": round(t1 - t0, 4), "tokens": n1 - n0,
                                "tok_s": round((n1 - n0) / (t1 - t0), 2)})
            w = {x["state"]: x["tok_s"] for x in windows[-len(STATES):]}
            print(f"c={c} group {g}: " + ", ".join(f"{s} {w[s]:.0f}" for s in STATES) +
                  " tok/s", flush=True)
        await switch(http, url, "on", a.poll_s)
        await load.stop()
    return {"concurrency": c, "windows": windows, "requests_done": load.done,
            "errors": load.errors}


def overheads(cell_data: dict, state: str) -> list[float]:
    """Per group: 100 * (1 - state / off), the probes' cost in % of throughput."""
    by_group: dict[int, dict[str, float]] = {}
    for w in cell_data["windows"]:
        by_group.setdefault(w["group"], {})[w["state"]] = w["tok_s"]
    return [100 * (1 - g[state] / g["off"]) for g in by_group.values()
            if g.get("off") and state in g]


def null_overheads(cell_data: dict) -> list[float]:
    """An A/A reading of the instrument: each group's ``off`` window against the next
    group's, in % as ``overheads``. Nothing changed between the two, so this spread is what
    the windows alone produce; an overhead narrower than it cannot be resolved."""
    offs = [w["tok_s"] for w in sorted(cell_data["windows"], key=lambda w: w["group"])
            if w["state"] == "off"]
    return [100 * (1 - b / a) for a, b in itertools.pairwise(offs) if a]


def null_spreads(data: dict) -> dict[int, Spread]:
    """{c: the A/A reading's median and min-max} for the valid cells."""
    return {cd["concurrency"]: Spread.of(o) for cd in data["cells"]
            if not invalid(cd) and (o := null_overheads(cd))}


def null_lines(data: dict) -> list[str]:
    rows = [[c, s.n, s.text("{:+.2f}"), f"{s.hi - s.lo:.1f}"]
            for c, s in null_spreads(data).items()]
    if not rows:
        return []
    return ["The windows' own noise: the probes out in both windows, each group's 'off' "
            "against the next group's (an A/A comparison, same process). Two 'off' windows "
            "are two to five windows apart where an 'on' / 'off' pair is one or two, and "
            "neighbouring pairs share a window, so this is a rough, somewhat wide reading of "
            "what the windows alone produce:", "",
            *md_table(["concurrency", "pairs", "'overhead' % median (min to max)",
                       "error bar width, points"], rows)]


def invalid(cd: dict) -> str | None:
    """Why a cell measures the client rather than the server, or None. A failed request
    means the load was not held at ``c`` for the whole cell."""
    if n := sum(cd["errors"].values()):
        return (f"{n} of the load generator's requests failed "
                f"({', '.join(sorted(cd['errors']))}): the load was not held at c="
                f"{cd['concurrency']}")
    return None


def overhead_spreads(data: dict, state: str) -> dict[int, Spread]:
    """{c: overhead of ``state`` in %, median and min-max over the groups}, valid cells."""
    return {cd["concurrency"]: Spread.of(o) for cd in data["cells"]
            if not invalid(cd) and (o := overheads(cd, state))}


def toggle_table(data: dict) -> list[str]:
    rows = []
    for cd in data["cells"]:
        offs = [w["tok_s"] for w in cd["windows"] if w["state"] == "off"]
        for state in STATES[1:]:
            o = overheads(cd, state)
            if not (o and offs):
                continue
            off, s = Spread.of(offs), Spread.of(o)
            bad = invalid(cd)
            rows.append([cd["concurrency"], state, s.n, off.text("{:.0f}"), s.text("{:+.2f}"),
                         f"{s.hi - s.lo:.1f}",
                         f"{sum(x <= T_OVERHEAD.threshold for x in o)} of {s.n}",
                         "not valid" if bad else verdict(T_OVERHEAD.met(s.median)),
                         sum(cd["errors"].values())])
    notes = [f"* c={cd['concurrency']} is not valid: {why}; it is left out of every verdict."
             for cd in data["cells"] if (why := invalid(cd))]
    return [*md_table(["concurrency", "state", "groups", "off: output tok/s median (min-max)",
                       "overhead % median (min to max)", "error bar width, points",
                       f"groups within {T_OVERHEAD.threshold:g}%",
                       f"median <= {T_OVERHEAD.threshold:g}%?", "failed requests"], rows),
            *(["", *notes] if notes else [])]


def verdict_text(data: dict, state: str = "on") -> str:
    over = overhead_spreads(data, state)
    if not over:
        return "no data (no valid concurrency)"
    ok = [c for c, s in over.items() if T_OVERHEAD.met(s.median)]
    widths = [s.hi - s.lo for s in over.values()]
    left_out = [cd["concurrency"] for cd in data["cells"] if invalid(cd)]
    return (f"{verdict(len(ok) == len(over) and not left_out)} ({len(ok)} of {len(over)} "
            f"valid concurrencies; error bars {min(widths):.0f}-{max(widths):.0f} points wide"
            + (f"; c={', '.join(map(str, left_out))} not valid" if left_out else "") + ")")


def protocol_text(data: dict) -> str:
    m = data["meta"]
    # The first device run predates the field: its load ran on httpx.
    client = m.get("load_client", "httpx")
    return (f"`{m['command']}`, {m['date']}, {m['device_name']}, vLLM {m['vllm']}, load "
            f"generator on {client}. One "
            "`specgw serve` (the bundled pair, serve_compare's engine configuration); "
            f"{m['groups']} groups per concurrency, each one window per state in rotated "
            f"order; windows of {m['window_s']} s after {m['settle_s']} s of settling; tok/s "
            "from the engine's own `vllm:generation_tokens_total`, read by a `/metrics` "
            "scrape at each end of a window (a scrape also refreshes the probes while they "
            "are in, so 'on' carries two probe reads per window besides its poll). "
            "Overhead = 1 - state / off of the same group, in % (positive: the probes "
            "cost throughput).")


def report(data: dict) -> list[str]:
    m = data["meta"]
    return [f"# Probe cost inside one server: switched in and out ({m['device_name']}, "
            f"vLLM {m['vllm']})", "",
            "<!-- Generated by benchmarks/probe_toggle.py from probe_toggle.json; do not edit "
            "by hand. -->", "", protocol_text(data) + " Protocol: this script's docstring.",
            "", *toggle_table(data), "", *null_lines(data), "",
            f"Target 2 (probes in, default poll interval): {verdict_text(data)}; with a 1 s "
            f"poll: {verdict_text(data, 'on-poll-1s')}."]


def run_meta(bench: str, argv: list[str]) -> dict:
    """Where and when a probe-cost run ran, and the command that ran it."""
    import torch
    import vllm

    from engine_ext.engine import detect_device

    dev = detect_device()
    return {"device": dev, "device_name": (torch.cuda.get_device_name() if dev == "cuda"
                                           else f"{os.cpu_count()} CPU cores"),
            "vllm": vllm.__version__, "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": f"python -m benchmarks.{bench} " + " ".join(argv)}


def meta(a: argparse.Namespace) -> dict:
    return {**run_meta("probe_toggle", a.argv), "load_client": "aiohttp",
            "groups": a.groups, "window_s": a.window_s, "settle_s": a.settle_s,
            "poll_s": a.poll_s, "prompt_words": a.prompt_words, "output_len": a.output_len}


def run(a: argparse.Namespace) -> dict:
    from benchmarks.serve_compare import BUNDLED, SERVED, engine_config, specgw_flags

    a.pair, a.method, a.k, a.max_num_seqs, a.max_model_len = (
        a.pair or BUNDLED, "eagle3", 3, 128, 2048)
    a.model_name = SERVED
    data = {"meta": meta(a), "cells": []}
    cfg = engine_config(a, data["meta"]["device"])
    flags, env = specgw_flags(cfg, True, max(a.concurrency))
    srv = Server("specgw-toggle", [*flags, "--poll-interval", str(a.poll_s)], env=env,
                 log_dir=a.out / "logs")
    try:
        t = time.monotonic()
        srv.wait_ready(a.start_timeout)
        print(f"== specgw serve ready in {time.monotonic() - t:.0f}s", flush=True)
        data["config"] = cfg
        for c in a.concurrency:
            data["cells"].append(asyncio.run(cell(a, srv.url, c)))
            (a.out / "probe_toggle.json").write_text(json.dumps(data, indent=1))
        data["final_probes"] = scrape_probes(srv.url)
    finally:
        srv.stop()
    return data


def scrape_probes(url: str) -> dict:
    """What the probes counted over the whole run (they were in for part of it)."""
    s = scrape(url)
    return {"model_forwards": metric_sum(s, "specgw_model_forwards_total"),
            "replayed_forwards": metric_sum(s, "specgw_cudagraph_replayed_forwards_total")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "probe_toggle")))
    ap.add_argument("--pair", type=Path, default=None, help="default: the bundled pair")
    ap.add_argument("--concurrency", type=ints, default=[1, 16, 64, 128])
    ap.add_argument("--groups", type=int, default=6)
    ap.add_argument("--window-s", type=float, default=3.0)
    ap.add_argument("--settle-s", type=float, default=0.5)
    ap.add_argument("--warmup-s", type=float, default=5.0)
    ap.add_argument("--poll-s", type=float, default=5.0)
    add_load_args(ap)
    run_and_report(ap.parse_args(), "probe_toggle", run, report, indent=1)


def add_load_args(ap: argparse.ArgumentParser) -> None:
    """The load, the server and the resume flags both in-server probe benchmarks take."""
    ap.add_argument("--prompt-words", type=int, default=100)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gpu-share", type=float, default=0.3)
    ap.add_argument("--start-timeout", type=float, default=420)
    ap.add_argument("--report-only", action="store_true", help="rewrite the report only")


def run_and_report(a: argparse.Namespace, name: str, run: Callable[[argparse.Namespace], dict],
                   report: Callable[[dict], list[str]], indent: int | None = None) -> None:
    """Run (or, with --report-only, reread) OUT/<name>.json and write OUT/<name>.md."""
    a.argv = sys.argv[1:]
    a.out.mkdir(parents=True, exist_ok=True)
    raw = a.out / f"{name}.json"
    data = json.loads(raw.read_text()) if a.report_only else run(a)
    raw.write_text(json.dumps(data, indent=indent))
    lines = report(data)
    write(a.out / f"{name}.md", lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
