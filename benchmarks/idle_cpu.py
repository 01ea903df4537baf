"""CPU an idle server's processes use, by probe poll interval (CPU engine).

Why: each probe read is a ``collective_rpc``, after which vLLM's CPU worker spins on its
shared-memory queue for a second (``SpinCondition`` in vLLM's ``shm_broadcast``) before
it sleeps again, so an idle engine polled every few seconds keeps part of a core busy.
The test suite's session servers stay up idle for most of the run (``tests/conftest.py``
IDLE_POLL_S); this prices what that costs, per server kind and interval.

Protocol: one server at a time (``specgw serve`` with ``--poll-interval P``, or stock
``vllm serve`` with the plugin and ``SPECGW_POLL_INTERVAL=P``), ready, ``--settle-s``
untouched, then every process of its tree read from ``/proc`` (user + system CPU
seconds) at the start and end of ``--seconds`` with no request sent. Share = CPU seconds
/ wall seconds (1.0 = one core).

    flock /tmp/specgw-engine.lock python -m benchmarks.idle_cpu --out docs/idle_cpu
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import psutil

from benchmarks.harness import Server
from benchmarks.probe_toggle import run_meta
from benchmarks.report import md_table


def server(kind: str, poll_s: float, log_dir: Path) -> Server:
    if kind == "specgw":
        return Server(f"idle-specgw-{poll_s:g}", ["--log-format", "text", "--poll-interval",
                                                  f"{poll_s:g}"], log_dir=log_dir)
    from engine_ext.vllm_serve import plugin_serve_args, plugin_serve_env, serve_command

    return Server(f"idle-vllm-{poll_s:g}", [*plugin_serve_args(), "--port", "{port}"],
                  {**plugin_serve_env(), "SPECGW_POLL_INTERVAL": f"{poll_s:g}"},
                  cmd=serve_command(), ready_path="/health", log_dir=log_dir)


def cpu_seconds(procs: list[psutil.Process]) -> dict[str, float]:
    out = {}
    for p in procs:
        try:
            t = p.cpu_times()
            out[f"{p.pid} {p.name()}"] = t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return out


def measure(kind: str, poll_s: float, seconds: float, settle_s: float, log_dir: Path) -> dict:
    srv = server(kind, poll_s, log_dir)
    try:
        srv.wait_ready()
        time.sleep(settle_s)
        root = psutil.Process(srv.proc.pid)
        procs = [root, *root.children(recursive=True)]
        t0, before = time.monotonic(), cpu_seconds(procs)
        time.sleep(seconds)
        wall, after = time.monotonic() - t0, cpu_seconds(procs)
    finally:
        srv.stop()
    return {"server": kind, "poll_s": poll_s, "wall_s": wall,
            "cpu_s": {k: after[k] - before[k] for k in before if k in after}}


def report(data: dict) -> list[str]:
    m = data["meta"]
    rows = []
    for c in data["cells"]:
        busiest = max(c["cpu_s"], key=c["cpu_s"].get)
        rows.append([c["server"], f"{c['poll_s']:g}", f"{c['wall_s']:.1f}",
                     f"{sum(c['cpu_s'].values()) / c['wall_s']:.3f}",
                     f"{busiest.split(' ', 1)[1]} {c['cpu_s'][busiest] / c['wall_s']:.3f}"])
    return ["# CPU of an idle server by probe poll interval", "",
            f"`{m['command']}`, {m['date']}, {m['device_name']}, vLLM {m['vllm']}. "
            f"Each server alone, ready, {m['settle_s']:g} s untouched, then the CPU seconds of "
            "every process of its tree over the window, no request sent (`benchmarks/"
            "idle_cpu.py`; raw: `idle_cpu.json`). Share: CPU seconds per wall second, 1.0 = "
            "one core.", "",
            *md_table(["server", "poll s", "window s", "CPU share, all processes",
                       "busiest process, its share"], rows)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("docs/idle_cpu"))
    ap.add_argument("--cells", default="specgw:5,specgw:60,vllm:5",
                    help="server:poll_s pairs, comma-separated (server: specgw or vllm)")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--settle-s", type=float, default=10.0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    argv = [f"--cells {a.cells}", f"--seconds {a.seconds:g}", f"--settle-s {a.settle_s:g}"]
    data = {"meta": {**run_meta("idle_cpu", argv), "settle_s": a.settle_s}, "cells": []}
    for cell in a.cells.split(","):
        kind, poll = cell.split(":")
        print(f"== {kind} serve, poll every {poll} s", flush=True)
        data["cells"].append(measure(kind, float(poll), a.seconds, a.settle_s,
                                     a.out / "logs"))
        (a.out / "idle_cpu.json").write_text(json.dumps(data, indent=1))
    lines = report(data)
    (a.out / "idle_cpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
