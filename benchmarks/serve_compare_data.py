"""One ``serve_compare.py`` output directory read back: the runs per (server, concurrency),
ratios paired by repetition, and what each server's own log says (its engine
configuration line, KV cache size, the router's failover and ejection lines).

Two directories are two sets of server processes started at different times; only servers
of one directory are ever divided by each other (see ``serve_compare_report.py``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

Cells = dict[tuple[str, int], list[dict]]
# vLLM's own per-request means (engine_timing), over the same requests as the client's.
STAGE_KEYS = ("ttft_mean_ms", "queue_mean_ms", "prefill_mean_ms")
# vLLM names its engine processes (VLLM::EngineCore, and VLLM::Worker[_TPn] where the
# model runs in processes of its own, as on the CPU); every other process of a server,
# VLLM::APIServer_n and the data-parallel coordinator included, is its front end (HTTP,
# tokenization, detokenization, streaming).
ENGINE_PROCESSES = ("VLLM::EngineCore", "VLLM::Worker")


@dataclass
class RunSet:
    """``OUT`` of one ``serve_compare.py`` invocation."""

    label: str
    src: Path
    meta: dict
    cells: Cells

    @classmethod
    def load(cls, src: Path, label: str | None = None) -> RunSet:
        meta = json.loads((src / "servers.json").read_text())
        cells: Cells = {}
        for f in sorted((src / "runs").glob("*.json")):
            r = json.loads(f.read_text())
            cells.setdefault((r["variant"], r["concurrency"]), []).append(r)
        for runs in cells.values():
            runs.sort(key=lambda r: r["rep"])
        return cls(label or src.name, src, meta, cells)

    def conc(self) -> list[int]:
        return sorted({c for _, c in self.cells})

    def variants(self) -> list[str]:
        return [v for v in self.meta["protocol"]["variants"]
                if any(vv == v for vv, _ in self.cells)]

    def stock_vllm_text(self) -> str:
        """What of specgw ran inside this set's stock ``vllm serve`` (``vllm``, ``vllm-2``,
        ``vllm-nospec``, ...; not the runner-V1 plugin variants), from its recorded env
        (sets before ``run8`` recorded none and gave it ``SPECGW_PROBES=0``)."""
        stock = [s for v, s in self.meta.get("servers", {}).items()
                 if v.startswith("vllm") and not v.startswith("vllm-v1-")]
        env = stock[0].get("env") if stock else None
        if env is not None and env.get("VLLM_PLUGINS") == "":
            return "no plugin loaded (`VLLM_PLUGINS=`), specgw's included"
        return ("specgw's plugin loaded with `SPECGW_PROBES=0`: no probes, but its "
                "empty-batch sampler guard and drafter-class hook installed")

    def runs(self, v: str, c: int) -> list[dict]:
        return self.cells.get((v, c), [])

    def values(self, v: str, c: int, key: str) -> list[float]:
        """``key`` of the client's (``vllm bench serve``'s) result of each run."""
        return self.record_values(v, c, "bench", key)

    def record_values(self, v: str, c: int, section: str, key: str) -> list[float]:
        """``key`` of ``section`` of each run record (``bench``: the client's result;
        ``engine_timing``: the server's own counters), where the run recorded it and
        completed requests (see ``paired_runs``)."""
        return [r[section][key] for r in self.runs(v, c)
                if (r.get(section) or {}).get(key) is not None
                and r["bench"].get("completed")]

    def ttft_stages(self, v: str, c: int) -> dict[str, float] | None:
        """Where the time to a first token went, medians over the repetitions (ms):
        ``client`` (the client's mean TTFT), ``engine`` (vLLM's own, from the arrival
        time it stamps on the request to when its front end's output loop takes the first
        token in), ``front`` (client minus engine: before the stamp, and from that loop to
        the client), ``outside_core`` (engine minus queue minus prefill: the two spans of
        vLLM's TTFT outside the engine core's own clocks, from the stamp to the scheduler
        queue and from the engine core's first token back to the output loop),
        ``queue``, ``prefill``; ``steps``, the engine iterations of the run's window;
        ``reps``. Each term is computed per run before the median. None where the runs
        predate vLLM's stage timing."""
        rows = [(r["bench"]["mean_ttft_ms"], r["engine_timing"]) for r in self.runs(v, c)
                if r["bench"].get("mean_ttft_ms") is not None
                and all((r.get("engine_timing") or {}).get(k) is not None
                        for k in STAGE_KEYS)]
        if not rows:
            return None
        terms = {
            "client": [cl for cl, _ in rows],
            "engine": [e["ttft_mean_ms"] for _, e in rows],
            "front": [cl - e["ttft_mean_ms"] for cl, e in rows],
            "outside_core": [e["ttft_mean_ms"] - e["queue_mean_ms"] - e["prefill_mean_ms"]
                             for _, e in rows],
            "queue": [e["queue_mean_ms"] for _, e in rows],
            "prefill": [e["prefill_mean_ms"] for _, e in rows],
            "steps": [e["iterations"] for _, e in rows if e.get("iterations") is not None],
        }
        return {"reps": len(rows),
                **{k: statistics.median(x) for k, x in terms.items() if x}}

    def cpu_per_token(self, v: str, c: int) -> dict[str, float] | None:
        """CPU milliseconds per generated token over each run's ``vllm bench serve`` call,
        medians over the repetitions: ``front`` (the server's processes but vLLM's engine
        processes) and ``engine`` (the engine core and any workers); ``reps``. None where
        the runs predate the record."""
        front, engine = [], []
        for r in self.runs(v, c):
            procs = [p for p in r.get("placement") or [] if "cpu_s" in p]
            tokens = (r.get("engine_timing") or {}).get("generation_tokens")
            if not (procs and tokens):
                continue
            core = sum(p["cpu_s"] for p in procs if p["name"].startswith(ENGINE_PROCESSES))
            front.append(1000 * (sum(p["cpu_s"] for p in procs) - core) / tokens)
            engine.append(1000 * core / tokens)
        if not front:
            return None
        return {"reps": len(front), "front": statistics.median(front),
                "engine": statistics.median(engine)}

    def paired_runs(self, a: str, b: str, c: int) -> list[tuple[dict, dict]]:
        """(a, b) runs of the repetitions both ran (same repetition, same concurrency:
        seconds apart, in the rotated order) and completed requests in: a run whose every
        request failed has no throughput or latency to divide (its failures are counted
        in the main table)."""
        rb = {r["rep"]: r for r in self.runs(b, c) if r["bench"].get("completed")}
        return [(r, rb[r["rep"]]) for r in self.runs(a, c)
                if r["rep"] in rb and r["bench"].get("completed")]

    def paired(self, a: str, b: str, c: int, key: str) -> list[tuple[float, float]]:
        """(a, b) values of ``key`` of the repetitions both ran with it."""
        return [(ra["bench"][key], rb["bench"][key]) for ra, rb in self.paired_runs(a, b, c)
                if ra["bench"].get(key) is not None and rb["bench"].get(key) is not None]

    def requests(self, v: str) -> tuple[int, int]:
        """(completed, failed) over every run of ``v``."""
        runs = [r for (vv, _), rr in self.cells.items() if vv == v for r in rr]
        return (sum(r["bench"].get("completed") or 0 for r in runs),
                sum(r["bench"].get("failed") or 0 for r in runs))

    def log_lines(self, v: str) -> list[str]:
        """The server's whole log (``logs/<v>.log``, gzipped or not); servers.json's
        excerpt when the log is not there."""
        for path in (self.src / "logs" / f"{v}.log.gz", self.src / "logs" / f"{v}.log"):
            if path.exists():
                raw = (gzip.decompress(path.read_bytes()) if path.suffix == ".gz"
                       else path.read_bytes())
                return raw.decode(errors="replace").splitlines()
        return list(self.meta["servers"].get(v, {}).get("config_log", []))


def engine_evidence(lines: list[str]) -> dict:
    """What the engine logged about its configuration: a digest of the resolved "with
    config:" line (equal digests: byte-identical configurations), its KV cache size and
    whether asynchronous scheduling was on."""
    cfg = [ln.split("with config:", 1)[1] for ln in lines if "with config:" in ln]
    kv = [m.group(1) for ln in lines if (m := re.search(r"GPU KV cache size: ([\d,]+) tokens",
                                                        ln))]
    return {"config_digest": hashlib.sha256(cfg[0].encode()).hexdigest()[:12] if cfg else None,
            "config_chars": len(cfg[0]) if cfg else 0,
            "kv_cache_tokens": kv[0] if kv else None,
            "async_scheduling": any("Asynchronous scheduling is enabled" in ln for ln in lines),
            "max_num_batched_tokens": sorted(set(re.findall(
                r"max_num_batched_tokens['\"]?[=:] ?(\d+)", "\n".join(lines))))}


def router_events(lines: list[str]) -> dict[str, list[str]]:
    """The router's failover and ejection lines (gateway.proxy / gateway.remote)."""
    return {"failover": [ln for ln in lines if "failover:" in ln],
            "ejected": [ln for ln in lines if " ejected for " in ln]}
