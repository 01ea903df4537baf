"""Reliability soak: the router in front of real backends serving the bundled pair on the
vLLM CPU engine, each pinned to its own core: by default backend a is ``specgw serve``
and backend b a stock ``vllm serve`` with the specgw plugin (``--backends``), a seeded
mixed workload for a fixed duration, faults on a schedule, every request in a ledger.

Workload (``benchmarks/soak_workload.py``): chat and completions, streamed and not,
``n=2``, clients that leave mid-stream (right after the headers, after 1 or 3 events),
slow SSE readers, bad input (must be a 4xx), a rate-limited API key and bursts beyond the
router's slots + queue (429s). Faults, alternating between the backends: a stall (the
backend's process group SIGSTOPped for longer than the router's backend timeout, then
SIGCONT) and a kill (SIGKILL, restarted on the same port). Every few seconds: RSS and
open fds of the router and of each backend's process tree, the router's in-flight
gauges, backend health, failovers and ejections from its ``/metrics``, and its asyncio
task count (``specgw_event_loop_tasks``). ``vllm serve`` is a process tree (API server +
engine core): faults signal its whole process group, samples sum the whole tree, and a
kill checks that no process of the old tree survived.

    flock /tmp/specgw-engine.lock python -m benchmarks.soak --out /tmp/soak
    gzip -c /tmp/soak/soak.json > docs/soak/soak.json.gz
    python -m benchmarks.soak_report docs/soak/soak.json.gz   # docs/soak.md + docs/soak.png

Writes ``<out>/soak.json`` (raw: config, faults, ledger, windows, samples, counters).
Exit status 1 when a request was lost or the ledger does not add up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import math
import os
import random
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import psutil

from benchmarks.harness import LOG_DIR, Server, metric_sum, parse_metrics, pct
from benchmarks.soak_workload import (
    API_KEY,
    BURST,
    LIMITED_KEY,
    LIMITED_RPM,
    Entry,
    draw_kind,
    judge,
    make_request,
    send,
)
from engine_ext.vllm_serve import plugin_serve_args, plugin_serve_env, serve_command

FAULT_CYCLE = "stall:b,kill:a,stall:a,kill:b"
BACKEND_KINDS = ("specgw", "vllm")  # specgw serve | vllm serve + the specgw plugin
BACKEND_NAMES = "abcd"
MAX_NUM_SEQS = 8
SPECGW_FLAGS = ["--log-format", "text", "--max-num-seqs", str(MAX_NUM_SEQS),
                "--poll-interval", "5"]


@dataclass
class Config:
    duration_s: float = 1200.0
    seed: int = 0
    clients: int = 5
    warmup_s: float = 120.0
    first_fault_s: float | None = None  # default: at the end of the warm-up
    fault_every_s: float = 180.0
    stall_s: float = 30.0
    backend_timeout_s: float = 15.0  # the router's read timeout on a backend (BackendSpec)
    max_concurrency: int = 4
    max_queue: int = 2
    sample_s: float = 5.0
    window_s: float = 60.0
    deadline_s: float = 120.0  # a request with no end after this is hung (lost)
    idle_s: float = 4.0  # quiet time before the idle samples
    # Backends a, b, ... in order. Two engines on two cores: a third would share a core
    # (OpenMP threads of two engines on one core starve each other).
    backends: str = "specgw,vllm"
    faults: str = FAULT_CYCLE  # kind:backend, repeated in this order

    def backend_kinds(self) -> dict[str, str]:
        kinds = self.backends.split(",")
        bad = [k for k in kinds if k not in BACKEND_KINDS]
        if bad or not 1 <= len(kinds) <= len(BACKEND_NAMES):
            raise ValueError(f"--backends: kinds from {BACKEND_KINDS}, got {self.backends!r}")
        return dict(zip(BACKEND_NAMES, kinds, strict=False))

    def fault_cycle(self) -> list[tuple[str, str]]:
        cycle = [tuple(f.split(":")) for f in self.faults.split(",")]
        names = self.backend_kinds()
        if any(len(f) != 2 or f[0] not in ("stall", "kill") or f[1] not in names
               for f in cycle):
            raise ValueError(f"--faults: stall|kill:<backend in {list(names)}>, "
                             f"got {self.faults!r}")
        return cycle  # type: ignore[return-value]

    def schedule(self) -> list[tuple[float, str, str]]:
        """(t, kind, backend) of every fault; none so late that it outlives the run."""
        t = self.warmup_s if self.first_fault_s is None else self.first_fault_s
        cycle = self.fault_cycle()
        out = []
        for i in range(10_000):
            if t + self.stall_s + 5 > self.duration_s:
                break
            kind, backend = cycle[i % len(cycle)]
            out.append((t, kind, backend))
            t += self.fault_every_s
        return out


# --------------------------------------------------------------------------- cluster
class Cluster:
    """The backends (a, b, ...) and the router (``specgw serve``) on 127.0.0.1."""

    def __init__(self, cfg: Config, work: Path, log_dir: Path):
        self.cfg, self.work, self.log_dir = cfg, work, log_dir
        self.kinds = cfg.backend_kinds()
        self.backends: dict[str, Server] = {}
        self.restarts = dict.fromkeys(self.kinds, 0)
        self.stalled: set[str] = set()
        self.router: Server | None = None

    def _backend(self, name: str, port: int | None = None) -> Server:
        k = self.restarts[name]
        label = f"soak-backend-{name}-{self.kinds[name]}" + (f"-r{k}" if k else "")
        # Each engine on its own core (two engines' OpenMP threads on one core starve
        # each other); with more backends than cores, they share round-robin.
        core = str(BACKEND_NAMES.index(name) % (os.cpu_count() or 1))
        if self.kinds[name] == "specgw":
            return Server(label, SPECGW_FLAGS, env={"VLLM_CPU_OMP_THREADS_BIND": core},
                          log_dir=self.log_dir, port=port)
        # vllm serve wants the model first, so the port goes last (as tests/conftest.py).
        return Server(label, [*plugin_serve_args(max_num_seqs=MAX_NUM_SEQS), "--port", "{port}"],
                      env={**plugin_serve_env(), "VLLM_CPU_OMP_THREADS_BIND": core},
                      cmd=serve_command(), ready_path="/health", log_dir=self.log_dir,
                      port=port)

    def start(self) -> None:
        self.backends = {n: self._backend(n) for n in self.kinds}
        threads = [threading.Thread(target=s.wait_ready) for s in self.backends.values()]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        for s in self.backends.values():  # wait_ready raised in its thread: check here
            s.wait_ready(5)
        specs = [{"name": n, "url": s.url, "timeout_s": self.cfg.backend_timeout_s}
                 for n, s in self.backends.items()]
        (self.work / "backends.json").write_text(json.dumps({"backends": specs}))
        (self.work / "keys.json").write_text(json.dumps(
            {"keys": {API_KEY: {}, LIMITED_KEY: {"rpm": LIMITED_RPM}}}))
        self.router = Server("soak-router", [
            "--log-format", "text", "--backends-file", str(self.work / "backends.json"),
            "--api-keys-file", str(self.work / "keys.json"),
            "--max-concurrency", str(self.cfg.max_concurrency),
            "--max-queue", str(self.cfg.max_queue)], log_dir=self.log_dir)
        self.router.wait_ready(120)

    async def kill_and_restart(self, name: str) -> dict:
        """SIGKILL the backend's process group; restart it on its port. Returns how many
        processes the tree had, which of them outlived the kill (then killed one by one,
        so the restart gets its port and core back) and the time to be ready again."""
        old = self.backends[name]
        tree = _tree(old.proc.pid)
        os.killpg(old.proc.pid, signal.SIGKILL)
        old.proc.wait()
        old.stop()  # closes its log
        survivors = await asyncio.to_thread(_survivors, tree)
        t = time.monotonic()
        self.restarts[name] += 1
        new = self._backend(name, port=old.port)
        self.backends[name] = new
        await asyncio.to_thread(new.wait_ready)
        return {"killed_procs": len(tree), "survivors": survivors,
                "restart_s": round(time.monotonic() - t, 2)}

    async def stall(self, name: str, seconds: float) -> None:
        pgid = self.backends[name].proc.pid
        os.killpg(pgid, signal.SIGSTOP)
        self.stalled.add(name)
        try:
            await asyncio.sleep(seconds)
        finally:
            os.killpg(pgid, signal.SIGCONT)
            self.stalled.discard(name)

    def stop(self) -> None:
        for s in [self.router, *self.backends.values()]:
            if s is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(s.proc.pid, signal.SIGCONT)
                s.stop()


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _survivors(tree: list[psutil.Process], wait_s: float = 5.0) -> list[str]:
    """Processes of a killed tree still alive after ``wait_s`` (a child in another
    process group would escape the group's SIGKILL); each is killed here."""
    _, alive = psutil.wait_procs(tree, timeout=wait_s)
    out = []
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            out.append(f"{p.pid} {p.name()}")
            p.kill()
    return out


# ------------------------------------------------------------------------- sampling
def proc_tree(pid: int) -> dict | None:
    """RSS and open fds of a process and all its children, summed and per process (vllm
    serve: the API server, its engine core and vLLM's helpers)."""
    procs = _tree(pid)
    if not procs:
        return None
    rss = fds = 0
    each = []
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            r, f = p.memory_info().rss, p.num_fds()
            rss, fds = rss + r, fds + f
            each.append([p.pid, p.name(), round(r / 2**20, 1), f])
    return {"pid": pid, "rss_mib": round(rss / 2**20, 1), "fds": fds, "procs": len(each),
            "each": each}


ROUTER_GAUGES = ("specgw_requests_in_flight", "specgw_event_loop_tasks",
                 "specgw_requests_total", "specgw_rate_limited_requests_total",
                 "specgw_backend_failovers_total")


def router_view(text: str, names: list[str]) -> dict:
    s = parse_metrics(text)
    out = {name: metric_sum(s, name) for name in ROUTER_GAUGES}
    for b in names:
        out[f"up_{b}"] = metric_sum(s, "specgw_backend_up", backend=b)
        out[f"in_flight_{b}"] = metric_sum(s, "specgw_backend_requests_in_flight", backend=b)
        out[f"ejections_{b}"] = metric_sum(s, "specgw_backend_ejections_total", backend=b)
        out[f"requests_{b}"] = metric_sum(s, "specgw_backend_requests_total", backend=b)
    return out


async def scrape_view(http: httpx.AsyncClient, url: str, names: list[str]) -> dict | None:
    try:
        r = await http.get(f"{url}/metrics", timeout=10)
        r.raise_for_status()
        return router_view(r.text, names)
    except httpx.HTTPError:
        return None


def _present(samples: dict, name: str) -> float | None:
    """The series' sum, or None when the backend does not export it (never a made-up 0)
    or exports NaN (vllm serve renders /metrics off its event loop, so the plugin's
    task gauge has no loop to count)."""
    if not any(k[0] == name for k in samples):
        return None
    v = metric_sum(samples, name)
    return None if math.isnan(v) else v


class Run:
    """One soak run: clients, faults and sampler on one event loop."""

    def __init__(self, cfg: Config, cluster: Cluster):
        self.cfg, self.cluster = cfg, cluster
        self.t0 = 0.0
        self.entries: list[Entry] = []
        self.faults: list[dict] = []
        self.samples: list[dict] = []
        self.stop = asyncio.Event()

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def sample(self, http: httpx.AsyncClient) -> dict:
        c = self.cluster
        procs = {"router": proc_tree(c.router.proc.pid)}
        for n, s in c.backends.items():
            procs[n] = proc_tree(s.proc.pid)
        return {"t": round(self.now(), 2), "procs": procs,
                "router": await scrape_view(http, c.router.url, list(c.kinds)),
                "stalled": sorted(c.stalled)}

    async def backend_idle(self, http: httpx.AsyncClient) -> dict:
        """Each backend's own in-flight gauge and task count (only when idle: a scrape
        of a backend refreshes its worker probes, which costs its core). ``vllm serve``
        exports the same two through the plugin (requests and tasks of its API server)
        and its engine's running + waiting requests as ``vllm:num_requests_*``."""
        out = {}
        for n, s in self.cluster.backends.items():
            try:
                text = (await http.get(f"{s.url}/metrics", timeout=30)).text
                ps = parse_metrics(text)
                out[n] = {"in_flight": _present(ps, "specgw_requests_in_flight"),
                          "tasks": _present(ps, "specgw_event_loop_tasks")}
                if self.cluster.kinds[n] == "vllm":
                    queues = [_present(ps, f"vllm:num_requests_{q}")
                              for q in ("running", "waiting")]
                    out[n]["engine_requests"] = (None if None in queues
                                                 else sum(queues))  # type: ignore[arg-type]
            except httpx.HTTPError as exc:
                out[n] = {"error": type(exc).__name__}
        return out

    async def sampler(self, http: httpx.AsyncClient) -> None:
        while not self.stop.is_set():
            self.samples.append(await self.sample(http))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop.wait(), self.cfg.sample_s)

    async def faults_task(self) -> None:
        for t, kind, backend in self.cfg.schedule():
            await asyncio.sleep(max(0.0, t - self.now()))
            f = {"kind": kind, "backend": backend, "t_start": round(self.now(), 2),
                 "t_end": None}
            self.faults.append(f)
            print(f"[soak {self.now():7.1f}s] fault: {kind} {backend}", flush=True)
            f["backend_kind"] = self.cluster.kinds[backend]
            if kind == "kill":
                f.update(await self.cluster.kill_and_restart(backend))
            else:
                await self.cluster.stall(backend, self.cfg.stall_s)
            f["t_end"] = round(self.now(), 2)
            print(f"[soak {self.now():7.1f}s] fault over: {kind} {backend}", flush=True)

    async def client(self, i: int, http: httpx.AsyncClient) -> None:
        rng = random.Random(f"{self.cfg.seed}-{i}")
        k = 0
        while self.now() < self.cfg.duration_s:
            kind = draw_kind(rng)
            reqs = [make_request(kind, rng) for _ in range(BURST if kind == "burst" else 1)]
            batch = []
            for req in reqs:
                e = Entry(f"soak-{self.cfg.seed}-{i}-{k}", kind, round(self.now(), 3))
                k += 1
                self.entries.append(e)
                batch.append(send(http, req, e, self.cfg.deadline_s))
            await asyncio.gather(*batch)
            await asyncio.sleep(rng.uniform(0.0, 0.3))

    async def run(self) -> dict:
        cfg = self.cfg
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=16)
        async with httpx.AsyncClient(base_url=self.cluster.router.url, limits=limits,
                                     timeout=httpx.Timeout(cfg.deadline_s)) as http:
            self.t0 = time.monotonic()
            idle_start = {"router": await self.sample(http),
                          "backends": await self.backend_idle(http)}
            sampler = asyncio.create_task(self.sampler(http))
            faults = asyncio.create_task(self.faults_task())
            await asyncio.gather(*(self.client(i, http) for i in range(cfg.clients)))
            load_end = self.now()
            await faults  # a restart still under way finishes before the idle check
            await asyncio.sleep(cfg.idle_s)
            self.stop.set()
            await sampler
        async with httpx.AsyncClient() as fresh:  # the clients' connections are closed now
            idle_end = {"router": await self.sample(fresh),
                        "backends": await self.backend_idle(fresh)}
        return {"idle": {"start": idle_start, "end": idle_end},
                "load_end_s": round(load_end, 2), "end_s": round(self.now(), 2)}


# ------------------------------------------------------------------------- results
def windows(entries: list[Entry], window_s: float, end_s: float) -> list[dict]:
    out = []
    n = max(1, int(end_s // window_s + (1 if end_s % window_s else 0)))
    for w in range(n):
        lo, hi = w * window_s, min((w + 1) * window_s, end_s)  # the last may be short
        span = hi - lo
        es = [e for e in entries if lo <= e.t < hi]
        ok = [e for e in es if e.verdict == "succeeded"]
        ttft = [e.ttft for e in ok if e.ttft is not None]
        lat = [e.dur for e in ok]
        out.append({
            "t0": lo, "t1": hi, "sent": len(es),
            "verdicts": {v: sum(e.verdict == v for e in es)
                         for v in ("succeeded", "failed_expected", "aborted", "lost")},
            "ok_per_s": round(len(ok) / span, 3),
            "tokens_per_s": round(sum(e.tokens for e in ok) / span, 2),
            "latency_p50_s": _r(pct(lat, 0.5)), "latency_p99_s": _r(pct(lat, 0.99)),
            "ttft_p50_s": _r(pct(ttft, 0.5)), "ttft_p99_s": _r(pct(ttft, 0.99)),
        })
    return out


def _r(x: float) -> float | None:
    return None if x != x else round(x, 4)  # NaN (no data) -> None


def totals(entries: list[Entry]) -> dict:
    t: dict = {"sent": len(entries), "by_verdict": {}, "by_kind": {}, "errors": {}}
    for e in entries:
        t["by_verdict"][e.verdict] = t["by_verdict"].get(e.verdict, 0) + 1
        k = t["by_kind"].setdefault(e.kind, {})
        k[e.verdict] = k.get(e.verdict, 0) + 1
        if e.outcome == "error":
            key = f"{e.status} {e.err_type}/{e.err_code}" + (" (in stream)" if e.mid_stream
                                                             else "")
            t["errors"][key] = t["errors"].get(key, 0) + 1
    return t


def router_accounting(idle: dict, entries: list[Entry]) -> dict:
    """The router's own counters must account for every request the clients delivered:
    each ends in specgw_requests_total, or in the per-key rate limiter before routing. A
    request the client abandoned before it was fully written may or may not have reached
    the router, so the count lies between the delivered and the sent requests, and only
    a client abort may be undelivered."""
    before, after = idle["start"]["router"]["router"], idle["end"]["router"]["router"]
    if before is None or after is None:
        return {"ok": False, "why": "router /metrics not scraped"}
    counted = int(sum(after[k] - before[k] for k in ("specgw_requests_total",
                                                     "specgw_rate_limited_requests_total")))
    delivered = sum(e.delivered for e in entries)
    undelivered_not_aborted = sum(not e.delivered and e.outcome != "aborted" for e in entries)
    return {"ok": delivered <= counted <= len(entries) and undelivered_not_aborted == 0,
            "router_counted": counted, "sent": len(entries), "delivered": delivered,
            "undelivered_not_aborted": undelivered_not_aborted}


def result(cfg: Config, run: Run, info: dict, started: str) -> dict:
    for e in run.entries:
        judge(e, run.faults)
    return {
        "config": asdict(cfg), "backends": cfg.backend_kinds(), "started_utc": started,
        "host_cpus": os.cpu_count(),
        "load_s": info["load_end_s"], "end_s": info["end_s"], "faults": run.faults,
        "totals": totals(run.entries), "idle": info["idle"],
        "router_accounting": router_accounting(info["idle"], run.entries),
        # Requests are sent until duration_s; the last ones end a little later.
        "windows": windows(run.entries, cfg.window_s, min(cfg.duration_s, info["load_end_s"])),
        "samples": run.samples,
        "ledger": {"fields": list(Entry.FIELDS), "rows": [e.row() for e in run.entries]},
    }


def soak(cfg: Config, out: Path, log_dir: Path = LOG_DIR / "soak") -> dict:
    """Start the cluster, run, stop everything; returns (and writes) the raw result."""
    out.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    cluster = Cluster(cfg, out, log_dir)
    try:
        cluster.start()
        run = Run(cfg, cluster)
        info = asyncio.run(run.run())
    finally:
        cluster.stop()
    res = result(cfg, run, info, started)
    (out / "soak.json").write_text(json.dumps(res, separators=(",", ":")))
    return res


def parse_args(argv: list[str] | None = None) -> tuple[Config, argparse.Namespace]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in asdict(Config()).items():
        flag = "--" + name.replace("_", "-")
        kind = type(default) if isinstance(default, int | str) else float
        ap.add_argument(flag, type=kind, default=default)
    ap.add_argument("--out", type=Path, required=True, help="dir for soak.json")
    ap.add_argument("--log-dir", type=Path, default=LOG_DIR / "soak")
    a = ap.parse_args(argv)
    cfg = Config(**{k: getattr(a, k) for k in asdict(Config())})
    return cfg, a


def main(argv: list[str] | None = None) -> int:
    from benchmarks.soak_report import verdicts

    cfg, a = parse_args(argv)
    res = soak(cfg, a.out, a.log_dir)
    checks = verdicts(res)
    for c in checks:
        print(f"{'PASS' if c['ok'] else 'FAIL'}  {c['what']}: {c['value']}")
    return 0 if all(c["ok"] for c in checks if c["gate"]) else 1


if __name__ == "__main__":
    sys.exit(main())
