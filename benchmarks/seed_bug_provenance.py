"""Where and how the seed-bug runs were measured, read from what the runs left behind
(``benchmarks/seed_bug_gpu.py``'s JSON, the servers' logs, the job's stdout), so the
report states hardware, versions and protocol from the data, never by hand.

Older runs carry no ``versions`` in their JSON: the vLLM version then comes from the
engine's own start-up line in each server log, the GPU from the ``nvidia-smi`` line the
device job prints first (``job_stdout.log[.gz]`` next to the runs).
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
from datetime import UTC, datetime
from pathlib import Path

_VLLM = re.compile(r"LLM engine \(v([\w.+-]+)\)")
_PAIR = re.compile(r"engine starting: model=(\S+) draft=(\S+)")
_EXC = re.compile(r"\b\w+Error: ")
_PROC_PREFIX = re.compile(r"^\([^)]*\)\s*")  # "(EngineCore pid=1) "
_GPU_LINE = re.compile(r"^(NVIDIA [^,]+), (\d+) MiB$")  # nvidia-smi name,memory.used csv


def read_text(path: Path) -> str:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", errors="replace") as f:
        return f.read()


def read_runs(folder: Path) -> dict[str, dict]:
    """``v*_*.json`` and ``v*_*.json.gz`` of one folder, by run name."""
    runs = {}
    for f in sorted([*folder.glob("v*_*.json"), *folder.glob("v*_*.json.gz")]):
        run = json.loads(read_text(f))
        runs[run["run"]] = run
    return runs


def _log(folder: Path, name: str) -> str:
    for p in (folder / f"{name}.log", folder / f"{name}.log.gz"):
        if p.exists():
            return read_text(p)
    return ""


def _gpu_from_job_stdout(folder: Path) -> tuple[str | None, int | None]:
    for p in (folder / "job_stdout.log", folder / "job_stdout.log.gz"):
        if p.exists():
            for line in read_text(p).splitlines()[:5]:
                m = _GPU_LINE.match(line.strip())
                if m:
                    return m.group(1), int(m.group(2))
    return None, None


def environment(folder: Path, runs: dict[str, dict]) -> dict:
    """GPU, vLLM/torch versions, model pair and date, each with where it was read."""
    env: dict = {}
    recorded = [r["versions"] for r in runs.values() if r.get("versions")]
    if recorded:
        for key in ("gpu", "vllm", "torch", "python"):
            vals = sorted({str(v.get(key)) for v in recorded if v.get(key)})
            if vals:
                env[key] = (", ".join(vals), "run JSON")
    if "vllm" not in env:
        found = sorted({m for n in runs for m in _VLLM.findall(_log(folder, n))})
        if found:
            env["vllm"] = (", ".join(found), "engine start-up line of the server logs")
    if "gpu" not in env:
        gpu, used = _gpu_from_job_stdout(folder)
        if gpu:
            env["gpu"] = (gpu, f"nvidia-smi at job start in the job's stdout; {used} MiB in "
                               "use then")
    pairs = sorted({m for n in runs for m in _PAIR.findall(_log(folder, n))})
    if pairs:
        env["pair"] = ("; ".join(f"target {t}, draft {d}" for t, d in pairs), "server logs")
    times = [s["t"] for r in runs.values() for s in (r.get("scrapes") or [])[:1]]
    if times:
        day = datetime.fromtimestamp(min(times), UTC).strftime("%Y-%m-%d")
        env["date"] = (day, "first /metrics scrape")
    return env


def window(run: dict) -> tuple[float, float] | None:
    """(first, last) unix time of the run's /metrics scrapes: its workload window."""
    s = run.get("scrapes") or []
    return (s[0]["t"], s[-1]["t"]) if s else None


def overlaps(runs: dict[str, dict]) -> list[tuple[str, str]]:
    """Pairs of runs whose workload windows overlap in time (runs sharing the GPU)."""
    out = []
    for (na, a), (nb, b) in itertools.combinations(runs.items(), 2):
        wa, wb = window(a), window(b)
        if wa and wb and wa[0] < wb[1] and wb[0] < wa[1]:
            out.append((na, nb))
    return out


def hhmmss(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S")


def failure_line(run: dict) -> str:
    """The run's error and the first exception line of its log tail (the root cause,
    before the gateway's own summary of it)."""
    err = run.get("error") or "failed"
    for line in (run.get("log_tail") or "").splitlines():
        if _EXC.search(line):
            return f"{err}; cause: {_PROC_PREFIX.sub('', line).strip()}"
    return err
