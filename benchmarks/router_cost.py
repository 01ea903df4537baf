"""Router CPU cost per relayed SSE event: ``specgw serve --backend`` in front of a stock
``vllm serve`` (CPU engine, bundled EAGLE-3 pair) on 127.0.0.1, one router process per
relay client (``SPECGW_ROUTER_CLIENT``), driven by a streaming chat client at a fixed
concurrency. Per burst: router CPU seconds (``/proc/<pid>/stat`` utime+stime, children
excluded; the per-thread ``schedstat`` nanoseconds as a finer cross-check) over the SSE
events the client received, and output tok/s through each router vs straight to vLLM.

Variants alternate (each repetition rotates the order), >= 5 repetitions. Holds
``/tmp/specgw-engine.lock`` for the whole run (the machine runs one engine at a time).
Raw JSON under docs/router_cost/, report docs/router_cost.md (``--report`` regenerates
it from the JSON). Run: ``python -m benchmarks.router_cost`` from the repository root.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import fcntl
import json
import os
import statistics
import sys
import time
from pathlib import Path

import aiohttp

from benchmarks.harness import LOG_DIR, PROMPTS, ROOT, Server
from benchmarks.report import Spread
from benchmarks.serve_compare_report import T_ROUTER  # issue #14's router target

OUT_DIR = ROOT / "docs" / "router_cost"
REPORT = ROOT / "docs" / "router_cost.md"
LOCK = "/tmp/specgw-engine.lock"
SERVED = "tiny-code-llama"
ROUTERS = ("httpx", "aiohttp")  # old relay, new relay (the default)
CLK_TCK = os.sysconf("SC_CLK_TCK")


def vllm_args(max_num_seqs: int) -> list[str]:
    """Stock ``vllm serve`` with the bundled pair (no worker extension, no plugin)."""
    from engine_ext.settings import BUNDLED_DIR

    spec = {"method": "eagle3", "model": str(Path(BUNDLED_DIR) / "eagle3"),
            "num_speculative_tokens": 3}
    return [str(Path(BUNDLED_DIR) / "target"), "--served-model-name", SERVED,
            "--host", "127.0.0.1", "--port", "{port}", "--max-model-len", "2048",
            "--max-num-seqs", str(max_num_seqs), "--speculative-config", json.dumps(spec)]


def cpu_stat_s(pid: int) -> float:
    """utime + stime of the process itself (children excluded), in seconds."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2:].split()  # the command name may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of stat(5)


def cpu_sched_s(pid: int) -> float:
    """Time on CPU of all the process's threads, from schedstat (nanoseconds)."""
    tasks = Path(f"/proc/{pid}/task")
    return sum(int((t / "schedstat").read_text().split()[0]) for t in tasks.iterdir()) / 1e9


async def one(session: aiohttp.ClientSession, url: str, i: int, max_tokens: int
              ) -> tuple[int, int]:
    """One streamed chat completion: (SSE events received, completion tokens)."""
    body = {"model": SERVED, "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
            "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    events, last = 0, b""
    async with session.post(f"{url}/v1/chat/completions", json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {(await r.text())[:300]}")
        async for line in r.content:
            if line.startswith(b"data: "):
                events += 1
                if line.startswith(b"data: {"):
                    last = line
    if not last:
        raise RuntimeError("stream had no data events")
    final = json.loads(last[6:])
    if "error" in final:
        raise RuntimeError(f"stream ended with an error: {final}")
    return events, int(final["usage"]["completion_tokens"])


async def burst(url: str, n: int, concurrency: int, max_tokens: int) -> dict:
    sem = asyncio.Semaphore(concurrency)

    async def bounded(session: aiohttp.ClientSession, i: int) -> tuple[int, int]:
        async with sem:
            return await one(session, url, i, max_tokens)

    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn,
                                     timeout=aiohttp.ClientTimeout(total=900)) as session:
        t = time.perf_counter()
        res = await asyncio.gather(*(bounded(session, i) for i in range(n)))
        wall = time.perf_counter() - t
    events = sum(e for e, _ in res)
    tokens = sum(k for _, k in res)
    return {"wall_s": wall, "events": events, "tokens": tokens, "tok_s": tokens / wall}


def measure(variant: str, url: str, pid: int | None, a: argparse.Namespace) -> dict:
    before = (cpu_stat_s(pid), cpu_sched_s(pid)) if pid else None
    res = asyncio.run(burst(url, a.requests, a.concurrency, a.max_tokens))
    if pid and before:
        res["router_cpu_s"] = cpu_stat_s(pid) - before[0]
        res["router_sched_s"] = cpu_sched_s(pid) - before[1]
        res["us_per_event"] = 1e6 * res["router_cpu_s"] / res["events"]
        res["us_per_event_sched"] = 1e6 * res["router_sched_s"] / res["events"]
    res["variant"] = variant
    return res


def run(a: argparse.Namespace) -> Path:
    lock = open(LOCK, "w")  # noqa: SIM115  # held until the process exits
    print("waiting for the engine lock ...", flush=True)
    fcntl.flock(lock, fcntl.LOCK_EX)
    log_dir = LOG_DIR / "router_cost"
    servers: dict[str, Server] = {}
    try:
        from engine_ext.vllm_serve import serve_command

        vs = Server("vllm", vllm_args(max(16, a.concurrency)), cmd=serve_command(),
                    env={"VLLM_CPU_KVCACHE_SPACE": "1", "SPECGW_PROBES": "0"},
                    ready_path="/health", log_dir=log_dir)
        servers["direct"] = vs
        vs.wait_ready()
        for client in ROUTERS:
            r = Server(f"router-{client}", ["--log-format", "text", "--log-level", "warning",
                                            "--backend", f"engine={vs.url}",
                                            "--max-concurrency", "256"],
                       env={"SPECGW_ROUTER_CLIENT": client}, log_dir=log_dir)
            servers[client] = r
            r.wait_ready(120)
        variants = ["direct", *ROUTERS]
        for v in variants:  # warm-up: compile paths, open connections; not recorded
            asyncio.run(burst(servers[v].url, a.concurrency, a.concurrency, 16))
        runs = []
        for rep in range(a.reps):
            order = variants[rep % len(variants):] + variants[:rep % len(variants)]
            for v in order:
                pid = None if v == "direct" else servers[v].proc.pid
                res = {"rep": rep, **measure(v, servers[v].url, pid, a)}
                runs.append(res)
                print(json.dumps(res), flush=True)
        vllm_version = servers["direct"].tail(400)
    finally:
        for s in reversed(servers.values()):
            s.stop()
    stamp = dt.datetime.now(dt.UTC)
    data = {"date": stamp.isoformat(timespec="seconds"), "concurrency": a.concurrency,
            "requests_per_burst": a.requests, "max_tokens": a.max_tokens, "reps": a.reps,
            "cpus": os.cpu_count(), "clk_tck": CLK_TCK,
            "vllm_log_version": next((ln for ln in vllm_version.splitlines()
                                      if "vLLM API server version" in ln), None),
            "runs": runs}
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"run-{stamp:%Y%m%dT%H%M%S}.json"
    out.write_text(json.dumps(data, indent=1) + "\n")
    return out


HEADER = ("| path | bursts | output tok/s | tok/s vs direct (same rep) | events/request | "
          "router CPU us/event (stat) | router CPU us/event (schedstat) |\n"
          "|---|---|---|---|---|---|---|")


def report(path: Path) -> str:
    data = json.loads(path.read_text())
    runs = data["runs"]
    by = {v: [r for r in runs if r["variant"] == v] for v in ("direct", *ROUTERS)}
    direct = {r["rep"]: r["tok_s"] for r in by["direct"]}
    ratio = {v: [r["tok_s"] / direct[r["rep"]] for r in by[v]] for v in ROUTERS}
    rows = []
    for v in ("direct", *ROUTERS):
        rs = by[v]
        ev_req = [r["events"] / data["requests_per_burst"] for r in rs]

        def cell(key: str, rs: list[dict] = rs) -> str:
            return Spread.of([r[key] for r in rs]).text("{:.1f}")

        cpu = (cell("us_per_event"), cell("us_per_event_sched")) if v != "direct" \
            else ("-", "-")
        rat = Spread.of(ratio[v]).text("{:.3f}") if v != "direct" else "1"
        rows.append(f"| {v if v == 'direct' else 'router, ' + v} | {len(rs)} | "
                    f"{cell('tok_s')} | {rat} | {Spread.of(ev_req).text('{:.1f}')} | "
                    f"{cpu[0]} | {cpu[1]} |")
    old = [r["us_per_event_sched"] for r in by["httpx"]]
    new = [r["us_per_event_sched"] for r in by["aiohttp"]]
    paired = {r["rep"]: r["us_per_event_sched"] for r in by["httpx"]}
    per_rep = [r["us_per_event_sched"] / paired[r["rep"]] for r in by["aiohttp"]]
    cost_ratio = statistics.median(new) / statistics.median(old)
    lower_every_rep = all(x < 1 for x in per_rep)
    no_overlap = max(new) < min(old)
    verdicts = [
        f"- Router CPU per relayed event, aiohttp relay / httpx relay (medians, schedstat): "
        f"**{cost_ratio:.2f}x** ({statistics.median(old):.0f} -> "
        f"{statistics.median(new):.0f} us); per repetition "
        f"{', '.join(f'{x:.2f}' for x in per_rep)}.",
        f"- aiohttp cheaper in every repetition: **{'yes' if lower_every_rep else 'no'}**; "
        f"ranges disjoint (worst aiohttp < best httpx): **{'yes' if no_overlap else 'no'}**.",
    ]
    for v in ROUTERS:
        med = statistics.median(ratio[v])
        verdicts.append(f"- tok/s through the {v} router / direct: median {med:.3f} "
                        f"(range {min(ratio[v]):.3f}-{max(ratio[v]):.3f}); median >= "
                        f"{T_ROUTER.threshold:g}: **{'yes' if T_ROUTER.met(med) else 'no'}**, "
                        f"every repetition >= {T_ROUTER.threshold:g}: "
                        f"**{'yes' if T_ROUTER.met(min(ratio[v])) else 'no'}** (this machine).")
    return f"""# Router relay cost per SSE event (CPU)

Generated by `benchmarks/router_cost.py` from
[`{path.relative_to(ROOT / 'docs').as_posix()}`]({path.relative_to(ROOT / 'docs').as_posix()})
({data['date']}). One stock `vllm serve` (CPU engine, bundled tiny Llama + EAGLE-3 head,
k=3) on 127.0.0.1; two `specgw serve --backend` routers in front of it, one per relay
client (`SPECGW_ROUTER_CLIENT=httpx`, the original relay; `aiohttp`, the new default).
Each burst: {data['requests_per_burst']} streamed chat completions of {data['max_tokens']}
tokens (`ignore_eos`), {data['concurrency']} at a time, from an aiohttp client in the
benchmark process; {data['reps']} repetitions, the order of the three paths rotated each
repetition. Cells: median (min-max) over repetitions. Router CPU per event = the router
process's CPU time during the burst over the SSE events the client received (`stat`:
utime+stime, {data['clk_tck']} ticks/s; `schedstat`: all its threads, ns). The router's idle
health checks during the burst are included.

{HEADER}
{chr(10).join(rows)}

{chr(10).join(verdicts)}

This machine has {data['cpus']} CPU cores shared by the engine, the router and the client, so
the tok/s ratio here measures the router's CPU taken from the engine as much as its own
latency; it is not the H200 number of docs/benchmarks.md section 3, where the engine runs
on the GPU and, with the httpx relay, the router process set the rate (run3). The CPU per
event is the figure that carries over (scaled by the other host's per-core speed).
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--requests", type=int, default=96, help="requests per burst")
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--report", type=Path, help="only regenerate the report from this JSON")
    a = ap.parse_args()
    path = a.report.resolve() if a.report else run(a)
    REPORT.write_text(report(path))
    print(f"wrote {path} and {REPORT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
