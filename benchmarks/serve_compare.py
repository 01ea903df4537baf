"""``specgw serve`` vs ``vllm serve`` (and specgw's own variants) under ``vllm bench serve``.

Servers (``--variants``, any subset; each a real process on 127.0.0.1):

* ``specgw``            ``specgw serve`` with the engine configuration stated below
* ``vllm``              vLLM's own OpenAI server with the same engine configuration, stock:
                        ``VLLM_PLUGINS=`` (empty) loads no plugin at all, so neither
                        specgw's nor any other installed one runs in it (what a user without
                        specgw runs). Run sets before ``run8`` gave it ``SPECGW_PROBES=0``
                        instead, which loads our plugin without probes (its sampler guard
                        and drafter-class hook still installed); ``servers.json`` records
                        each server's ``env`` from ``run8`` on
* ``specgw-probes-off`` ``specgw`` with ``SPECGW_PROBES=0``: no probes; the plugin's sampler
                        guard and drafter-class hook stay, as in ``specgw``
* ``specgw-poll-1s``    ``specgw`` with ``--poll-interval 1`` (default 5 s)
* ``specgw-2``          a second ``specgw`` process, identical: how far two instances of
                        one server differ (the floor under every cross-process ratio)
* ``vllm-2``            a second ``vllm`` process, identical: the same floor for vLLM's
                        own server
* ``router``            ``specgw serve --backend`` in front of the ``vllm`` server (routing
                        only, no engine of its own): router overhead vs ``vllm``
* ``specgw-defaults`` / ``vllm-defaults``  each server with only model, draft and k given
* ``vllm-plugin``       ``vllm`` with specgw's plugin loaded as the README tells a vLLM user
                        (``VLLM_PLUGINS``, ``--worker-extension-cls``; probes on, vLLM's
                        runner choice): against ``vllm`` the plugin's cost in vLLM's own
                        server, against ``specgw`` the gateway's front end

Speculation against none, and the drafter's graphs against an eager drafter (issue #14's
"target big enough for speculation to pay"; run with ``--pair`` on the device-built 1 B
pair), all stock ``vllm serve`` with the same engine configuration:

* ``vllm-nospec``          without ``--speculative-config``: speculation vs none
* ``vllm-v1-piecewise``    runner V1 (``VLLM_USE_V2_MODEL_RUNNER=0``) with specgw's plugin
                           (``VLLM_PLUGINS``, worker extension): its compiled drafter runs
                           the piecewise graphs vLLM dispatches, and its probes count them
* ``vllm-v1-eager-draft``  the same with ``speculative_config.enforce_eager``

``--only VARIANT=C1,C2`` runs a variant at those concurrencies only (the drafter pair at
batch 1 and 32, as the issue asks, to fit the device session).

Same engine configuration (``engine_config()``, recorded in ``servers.json`` with each
server's own "with config:" log line as evidence): model, draft, method, k, max_num_seqs,
max_model_len, seed, dtype, max_num_batched_tokens (2048: what specgw's in-process
``AsyncLLM`` gets from vLLM, usage context ENGINE_CONTEXT; ``vllm serve`` would take 8192
on an H200), compilation config with specgw's capture sizes
(``engine_ext.graph_config.compilation_config``), memory share per server.

Protocol: all servers are started one after another (each with ``--gpu-share`` of the GPU)
and stay warm. Then for every repetition, concurrency and server, in an order rotated per
repetition (so no server always runs first or last), one ``vllm bench serve`` run
(in-process: ``vllm.benchmarks.serve.main``; random dataset, ``--ignore-eos``, fixed
input/output lengths, ``num_prompts = max(--min-prompts, --prompts-per-client * c)``)
after ``--num-warmups`` warm-up requests. With ``--pin N`` each server (its API process,
engine core and their threads) runs on N CPUs of its own and the load client on the rest.
Each run's result is one JSON file under ``OUT/runs/``, with what the server's own
counters say about the same seconds (vLLM's acceptance counters, its engine-side
inter-token latency, our drafter probes; the warm-up requests fall inside that window,
the client's figures leave them out) and where the server's processes ran
(``placement``; the host's CPU and GPU topology is in ``servers.json``); a run whose file
exists is skipped, so an interrupted matrix resumes. With ``--py-spy RATE`` every process
of the server under test is sampled over its run (``OUT/profiles/``, ``benchmarks/py_spy.py``;
``profile_data.py`` reads them per engine step): where two servers' engine cores take the
same steps at different speeds, the functions that cost the difference.
``serve_compare_report.py`` turns ``OUT`` into ``docs/serve_compare.md``.

Device (after ``gpu_session.sh stash`` and ``install``; output under $OUT). ``run5_instance``
took 437 s for four engines and 80 runs; the same command for ``run6_instance`` (slower
starts) reached its 470 s budget after 60 runs; ``run7_pinned`` (the same with
``--pin 3``: three CPUs per server) reached it after 75; ``run8_router``
(``--variants specgw,specgw-probes-off,vllm,router --concurrency 16,64 --pin 3``, the rest
as below) took 398 s for three engines, the router and 40 runs::

    JOB_SECONDS=578 bash benchmarks/gpu_session.sh job benchmarks/serve_compare.py \
        --variants specgw,specgw-2,vllm,vllm-2 --concurrency 1,16,64,128 --reps 5 \
        --gpu-share 0.2 --budget-s 490 --out /root/results/serve_compare/run5_instance

Here: ``flock /tmp/specgw-engine.lock python -m benchmarks.serve_compare --out DIR ...``;
``docs/cpu/serve_compare_cputime`` is ``--variants specgw,vllm --concurrency 1,8 --reps 5
--output-len 64 --prompts-per-client 2 --min-prompts 8 --num-warmups 1`` (about 6 min).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import (
    ROOT,
    Samples,
    Server,
    acceptance,
    metric_sum,
    scrape,
    vllm_serve_cmd,
)

SERVED = "bench"
VARIANTS = ("specgw", "specgw-2", "vllm", "vllm-2", "specgw-probes-off", "specgw-poll-1s",
            "router", "specgw-defaults", "vllm-defaults", "vllm-nospec", "vllm-v1-piecewise",
            "vllm-v1-eager-draft", "vllm-plugin")
V1_PLUGIN = ("vllm-v1-piecewise", "vllm-v1-eager-draft")
PLUGIN_LOADED = (*V1_PLUGIN, "vllm-plugin")
BUNDLED = ROOT / "models" / "tiny-code-llama"
# Fields of each vllm bench serve result kept per run (the per-request lists are not).
KEEP = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
        "request_throughput", "output_throughput", "total_token_throughput",
        "max_output_tokens_per_s", "max_concurrent_requests",
        "spec_decode_acceptance_length", "spec_decode_acceptance_rate")


def device() -> str:
    from engine_ext.engine import detect_device

    return detect_device()


def engine_config(a: argparse.Namespace, dev: str) -> dict:
    """The one engine configuration both servers get, stated explicitly."""
    from vllm.config import SchedulerConfig

    from engine_ext.graph_config import compilation_config
    from engine_ext.settings import EngineSettings

    s = EngineSettings(model=str(a.pair / "target"), draft_model=str(a.pair / "eagle3"),
                       method=a.method, num_speculative_tokens=a.k, served_model_name=SERVED,
                       max_num_seqs=a.max_num_seqs, max_model_len=a.max_model_len, seed=a.seed)
    spec = {"method": a.method, "model": s.draft_model, "num_speculative_tokens": a.k}
    return {
        "model": s.model, "served_model_name": SERVED, "speculative_config": spec,
        "max_num_seqs": s.max_num_seqs, "max_model_len": s.max_model_len, "seed": s.seed,
        "dtype": s.dtype,
        # specgw's AsyncLLM.from_engine_args runs under UsageContext.ENGINE_CONTEXT, for
        # which vLLM has no per-device default: the SchedulerConfig class default.
        "max_num_batched_tokens": SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS,
        "compilation_config": compilation_config(s, dev),
        "memory": ({"gpu_memory_utilization": a.gpu_share} if dev == "cuda"
                   else {"kv_cache_memory_bytes": int(s.kv_cache_gib * (1 << 30))}),
        "runner": "auto (vLLM's choice, the same for both)",
    }


def vllm_flags(cfg: dict, same: bool, variant: str = "vllm") -> list[str]:
    flags = ["--model", cfg["model"], "--served-model-name", SERVED, "--port", "{port}",
             "--host", "127.0.0.1", "--seed", str(cfg["seed"])]
    if variant != "vllm-nospec":
        spec = dict(cfg["speculative_config"])
        if variant == "vllm-v1-eager-draft":
            spec["enforce_eager"] = True
        flags += ["--speculative-config", json.dumps(spec)]
    if variant in PLUGIN_LOADED:
        from engine_ext.engine import WORKER_EXTENSION

        flags += ["--worker-extension-cls", WORKER_EXTENSION]
    flags += [f"--{k.replace('_', '-')}={v}" for k, v in cfg["memory"].items()]
    if same:
        flags += ["--max-num-seqs", str(cfg["max_num_seqs"]),
                  "--max-model-len", str(cfg["max_model_len"]), "--dtype", cfg["dtype"],
                  "--max-num-batched-tokens", str(cfg["max_num_batched_tokens"])]
        if cfg["compilation_config"]:
            flags += ["--compilation-config", json.dumps(cfg["compilation_config"])]
    return flags


def vllm_env(variant: str) -> dict[str, str]:
    """Stock (no plugin loaded: vLLM matches ``VLLM_PLUGINS`` by name and none is named
    ""), the plugin loaded as the README tells a vLLM user, or that on runner V1."""
    if variant not in PLUGIN_LOADED:
        return {"VLLM_PLUGINS": ""}
    from engine_ext.vllm_serve import plugin_serve_env

    v1 = {"VLLM_USE_V2_MODEL_RUNNER": "0"} if variant in V1_PLUGIN else {}
    return {**plugin_serve_env(), **v1}


def specgw_flags(cfg: dict, same: bool, max_c: int) -> tuple[list[str], dict]:
    spec = cfg["speculative_config"]
    flags = ["--log-format", "text", "--model", cfg["model"], "--draft-model", spec["model"],
             "--method", spec["method"], "-k", str(spec["num_speculative_tokens"]),
             "--served-model-name", SERVED]
    env = {"SPECGW_SEED": str(cfg["seed"])}
    if "gpu_memory_utilization" in cfg["memory"]:
        env["SPECGW_GPU_MEMORY_UTILIZATION"] = str(cfg["memory"]["gpu_memory_utilization"])
    if same:
        # The gateway's admission limit must not queue what vLLM would run at once.
        flags += ["--max-num-seqs", str(cfg["max_num_seqs"]), "--max-model-len",
                  str(cfg["max_model_len"]), "--max-concurrency", str(max(64, max_c)),
                  "--max-queue", str(4 * max(64, max_c))]
    return flags, env


def cpu_plan(names: list[str], per: int, avail: list[int]) -> tuple[dict[str, list[int]],
                                                                     list[int]]:
    """``per`` CPUs of ``avail`` for each server, disjoint, in start order, and the rest for
    the load client (this process): with ``--pin`` two servers never share a core, so a
    per-process offset that comes from where the scheduler put an engine core's threads
    goes away, and one that does not come from there stays."""
    need = per * len(names)
    if need >= len(avail):
        raise SystemExit(f"--pin {per}: {len(names)} servers need {need} CPUs and leave none "
                         f"for the client; this host offers {len(avail)}")
    return {v: avail[i * per:(i + 1) * per] for i, v in enumerate(names)}, avail[need:]


def start_servers(a: argparse.Namespace, cfg: dict, log_dir: Path,
                  servers: dict[str, Server]) -> None:
    """Start the variants one after another into ``servers`` (engines racing for memory
    at profiling time fail), each ready before the next starts; with ``--pin``, each on
    its own CPUs and this process (the load client) on the rest."""
    max_c = max(a.concurrency)
    order = [v for v in a.variants if v != "router"]
    if "router" in a.variants and "vllm" not in order:
        order.append("vllm")
    names = order + (["router"] if "router" in a.variants else [])
    plan, rest = (cpu_plan(names, a.pin, sorted(os.sched_getaffinity(0))) if a.pin
                  else ({}, []))
    for v in order:
        same = not v.endswith("-defaults")
        if v.startswith("vllm"):
            srv = Server(v, vllm_flags(cfg, same, v), env=vllm_env(v), cmd=vllm_serve_cmd(),
                         ready_path="/health", log_dir=log_dir, cpus=plan.get(v))
        else:
            flags, env = specgw_flags(cfg, same, max_c)
            if v == "specgw-probes-off":
                env["SPECGW_PROBES"] = "0"
            if v == "specgw-poll-1s":
                flags += ["--poll-interval", "1"]
            srv = Server(v, flags, env=env, log_dir=log_dir, cpus=plan.get(v))
        servers[v] = srv
        t = time.monotonic()
        srv.wait_ready(a.start_timeout)
        print(f"== {v} ready in {time.monotonic() - t:.0f}s at {srv.url}", flush=True)
    if "router" in a.variants:
        srv = Server("router", ["--log-format", "text", "--backend",
                                f"engine={servers['vllm'].url}", "--max-concurrency",
                                str(max(64, max_c)), "--max-queue", str(4 * max(64, max_c))],
                     log_dir=log_dir, cpus=plan.get("router"))
        servers["router"] = srv
        srv.wait_ready(120)
        print(f"== router ready at {srv.url}", flush=True)
    if rest:
        os.sched_setaffinity(0, rest)
        print(f"== pinned: {plan}, client on {rest}", flush=True)


def config_evidence(srv: Server) -> list[str]:
    """The engine's own statement of its configuration, from its log."""
    keep = ("with config:", "max_num_batched_tokens", "Chunked prefill is enabled",
            "cudagraph_capture_sizes", "speculative")
    return [ln[:4000] for ln in srv.log_path.read_text(errors="replace").splitlines()
            if any(k in ln for k in keep)][:12]


def bench(a: argparse.Namespace, url: str, c: int, label: str) -> dict:
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    n = max(a.min_prompts, a.prompts_per_client * c)
    p = FlexibleArgumentParser()
    add_cli_args(p)
    args = p.parse_args([
        "--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions",
        "--model", SERVED, "--tokenizer", str(a.pair / "target"), "--dataset-name", "random",
        "--random-input-len", str(a.input_len), "--random-output-len", str(a.output_len),
        "--ignore-eos", "--num-prompts", str(n), "--max-concurrency", str(c),
        "--num-warmups", str(a.num_warmups), "--seed", str(a.seed), "--disable-tqdm",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--temperature", "0", "--label", label, "--save-detailed"])
    return summarise(main(args))


def summarise(res: dict) -> dict:
    """The kept fields of one ``vllm bench serve`` result, plus per request its start (ms
    after the first request) and TTFT, and the distinct errors with their counts: enough
    to see which requests a TTFT tail or a failure burst hit, without the texts."""
    out = {k: v for k, v in res.items()
           if k in KEEP or (k.endswith("_ms") and isinstance(v, int | float))}
    starts, ttfts = res.get("start_times") or [], res.get("ttfts") or []
    if starts and len(starts) == len(ttfts):
        t0 = min(starts)
        out["request_start_ms"] = [round(1000 * (t - t0), 1) for t in starts]
        out["request_ttft_ms"] = [round(1000 * t, 1) for t in ttfts]  # 0 for a failed one
    errors: dict[str, int] = {}
    for e in res.get("errors") or []:
        if e:  # the last line of a traceback names the exception
            last = e.strip().splitlines()[-1][:300]
            errors[last] = errors.get(last, 0) + 1
    if errors:
        out["error_counts"] = errors
    return out


def drafter_graphs(before: Samples, after: Samples) -> dict | None:
    """Drafter forwards and CUDA-graph replays in one run, from specgw's worker probes
    (present only where the plugin runs: ``specgw*`` and ``vllm-v1-*``)."""
    def d(name: str) -> float:
        return metric_sum(after, name, role="draft") - metric_sum(before, name, role="draft")

    if not any(n == "specgw_model_forwards_total" for n, _ in after):
        return None
    return {"forwards": d("specgw_model_forwards_total"),
            "replayed": d("specgw_cudagraph_replayed_forwards_total")}


def engine_timing(before: Samples, after: Samples) -> dict:
    """What the engine's own clock says about a run: vLLM's inter-token latency histogram
    is fed from the engine core's output timestamps (``EngineCoreOutputs.timestamp``, set
    in the engine-core process), so its mean is the step time before the API process and
    the network; the client's ITL adds both. Equal engine ITLs with unequal client ITLs
    put a difference in the front end, unequal engine ITLs in the engine. The scrapes
    bracket the whole ``vllm bench serve`` call, so its warm-up requests (same shape as
    the measured ones) are in these counts and not in the client's."""
    def d(name: str) -> float:
        return metric_sum(after, name) - metric_sum(before, name)

    def mean_ms(hist: str) -> float | None:
        return hist_mean_ms(before, after, hist)

    # Where a request's first-token time goes, on vLLM's clocks: its TTFT from the arrival
    # time vLLM stamps on it, the wait in the scheduler's queue, and the prefill itself;
    # under load specgw's client TTFT is lower than vllm serve's and these say at which
    # stage.
    return {"itl_mean_ms": mean_ms("vllm:inter_token_latency_seconds"),
            "itl_count": d("vllm:inter_token_latency_seconds_count"),
            "iterations": d("vllm:iteration_tokens_total_count"),
            "generation_tokens": d("vllm:generation_tokens_total"),
            "ttft_mean_ms": mean_ms("vllm:time_to_first_token_seconds"),
            "queue_mean_ms": mean_ms("vllm:request_queue_time_seconds"),
            "prefill_mean_ms": mean_ms("vllm:request_prefill_time_seconds"),
            "decode_mean_ms": mean_ms("vllm:request_decode_time_seconds")}


def hist_mean_ms(before: Samples, after: Samples, hist: str) -> float | None:
    """The mean of a histogram's observations between two scrapes, in ms."""
    n = metric_sum(after, f"{hist}_count") - metric_sum(before, f"{hist}_count")
    if not n:
        return None
    return round(1000 * (metric_sum(after, f"{hist}_sum") - metric_sum(before, f"{hist}_sum"))
                 / n, 4)


def histogram_quantile(before: Samples, after: Samples, name: str, q: float) -> float | None:
    """The ``q`` quantile of a histogram's observations between two scrapes, interpolated
    inside its bucket as Prometheus' ``histogram_quantile`` does (label sets summed)."""
    per_le: dict[float, float] = {}
    for (n, ls), v in after.items():
        if n == f"{name}_bucket":
            le = float(dict(ls)["le"])
            per_le[le] = per_le.get(le, 0.0) + v - before.get((n, ls), 0.0)
    cum = sorted(per_le.items())
    if not cum or cum[-1][1] <= 0:
        return None
    rank, lo, below = q * cum[-1][1], 0.0, 0.0
    for le, n in cum:
        if n >= rank:
            if le == float("inf"):
                return lo
            return lo + (le - lo) * (rank - below) / (n - below) if n > below else le
        lo, below = le, n
    return lo


def router_timing(before: Samples, after: Samples) -> dict | None:
    """A router's own clocks over a run (``specgw serve --backend``): each streamed
    request's time to first byte on the backend (from the router's send) and what the
    router added to it (its TTFT from the request's arrival, less the backend's): the
    router's share of the client's TTFT, without the backend's run-to-run noise in it."""
    added = "specgw_gateway_added_latency_seconds"
    ttfb = "specgw_backend_time_to_first_byte_seconds"
    n = metric_sum(after, f"{added}_count") - metric_sum(before, f"{added}_count")
    if n <= 0:
        return None

    def mean_ms(name: str) -> float | None:
        return hist_mean_ms(before, after, name)

    def p50_ms(name: str) -> float | None:
        v = histogram_quantile(before, after, name, 0.5)
        return None if v is None else round(1000 * v, 4)

    return {"requests": n, "added_mean_ms": mean_ms(added), "added_p50_ms": p50_ms(added),
            "backend_ttfb_mean_ms": mean_ms(ttfb), "backend_ttfb_p50_ms": p50_ms(ttfb)}


def server_processes(srv: Server) -> list:
    """The server's process and its children (API server, engine core, workers)."""
    import psutil

    try:
        root = psutil.Process(srv.proc.pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def process_cpu_s(p) -> float:
    """User + system CPU seconds a (psutil) process has used so far."""
    t = p.cpu_times()
    return t.user + t.system


def cpu_seconds(srv: Server) -> dict[int, float]:
    """``process_cpu_s`` of each of the server's processes."""
    import psutil

    out = {}
    for p in server_processes(srv):
        with contextlib.suppress(psutil.Error):
            out[p.pid] = process_cpu_s(p)
    return out


def placement(srv: Server, cpu_before: dict[int, float] | None = None) -> list[dict]:
    """The CPU each of the server's processes last ran on, and the cores it may use: a
    per-process offset that follows the socket or NUMA node the engine core landed on
    shows here (``host_topology`` says which cores belong to which node). With
    ``cpu_before`` (``cpu_seconds`` at the run's start), ``cpu_s``: the CPU seconds each
    process used over the ``vllm bench serve`` call (its warm-ups included, as in
    ``engine_timing``; the metric scrapes left out), so the front end's CPU cost per
    token can be set against the engine core's."""
    import psutil

    out = []
    for p in server_processes(srv):
        with contextlib.suppress(psutil.Error):
            rec = {"pid": p.pid, "name": p.name(), "cpu": p.cpu_num(),
                   "affinity": len(p.cpu_affinity()), "threads": p.num_threads()}
            if cpu_before is not None:
                rec["cpu_s"] = round(process_cpu_s(p) - cpu_before.get(p.pid, 0.0), 3)
            out.append(rec)
    return out


def host_topology() -> dict:
    """The host's CPU sockets / NUMA nodes and the GPU's CPU affinity, as its tools say."""
    out = {"sched_affinity": sorted(os.sched_getaffinity(0))}
    for key, cmd in (("lscpu", ["lscpu"]), ("numa", ["numactl", "--hardware"]),
                     ("gpu_topo", ["nvidia-smi", "topo", "-m"])):
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
            out[key] = (res.stdout or res.stderr)[-4000:]
        except (OSError, subprocess.TimeoutExpired) as exc:
            out[key] = f"unavailable: {exc}"
    return out


def profiled(a: argparse.Namespace, srv: Server, stem: str
             ) -> contextlib.AbstractContextManager:
    """With ``--py-spy RATE``, every process of the server sampled over the run
    (``OUT/profiles/<stem>.<process name>-<pid>.raw.gz``, ``benchmarks/py_spy.py``)."""
    if not a.py_spy:
        return contextlib.nullcontext()
    from benchmarks import py_spy

    return py_spy.recording(process_names(srv), a.out / "profiles", stem, a.py_spy)


def process_names(srv: Server) -> dict[str, int]:
    """``<process name>-<pid> -> pid`` of every process of the server still there (the
    names its py-spy profiles are filed under)."""
    procs = {}
    for p in server_processes(srv):
        with contextlib.suppress(Exception):
            procs[f"{p.name().replace('/', '_').replace(' ', '_')}-{p.pid}"] = p.pid
    return procs


def run_matrix(a: argparse.Namespace, servers: dict[str, Server]) -> None:
    runs = a.out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    variants = list(a.variants)
    total = a.reps * sum(len(set(a.only.get(v, a.concurrency)) & set(a.concurrency))
                         for v in variants)
    done = 0
    for rep in range(a.reps):
        # Rotated per repetition: every server runs first, middle and last in turn.
        order = variants[rep % len(variants):] + variants[:rep % len(variants)]
        for c in a.concurrency:
            for v in order:
                if c not in a.only.get(v, a.concurrency):
                    continue
                done += 1
                f = runs / f"{v}_c{c}_r{rep}.json"
                if f.exists():
                    continue
                srv = servers[v]
                if srv.proc.poll() is not None:
                    raise RuntimeError(f"{v} died:\n{srv.tail()}")
                before = scrape(srv.url)
                cpu_before = cpu_seconds(srv)  # after the scrape: its cost is not the run's
                t = time.time()
                with profiled(a, srv, f"{v}_c{c}_r{rep}"):
                    res = bench(a, srv.url, c, f"{v}-c{c}-r{rep}")
                where = placement(srv, cpu_before)
                after = scrape(srv.url)
                acc = acceptance(before, after, a.k)
                rec = {"variant": v, "concurrency": c, "rep": rep, "position": order.index(v),
                       "started": t, "wall_s": round(time.time() - t, 2), "bench": res,
                       "server_acceptance": acc, "drafter_graphs": drafter_graphs(before, after),
                       "engine_timing": engine_timing(before, after),
                       "router_timing": router_timing(before, after),
                       "placement": where}
                f.write_text(json.dumps(rec, indent=1))
                print(f"[{done}/{total}] {v} c={c} rep={rep}: "
                      f"{res.get('output_throughput', 0):.0f} tok/s, TPOT p50 "
                      f"{res.get('median_tpot_ms', 0):.2f} ms, TTFT p50 "
                      f"{res.get('median_ttft_ms', 0):.1f} ms, failed {res.get('failed')}, "
                      f"AL {acc['acceptance_length']}", flush=True)
                if a.deadline and time.time() > a.deadline:
                    print("== deadline: stopping (rerun to resume)", flush=True)
                    return


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "serve_compare")))
    ap.add_argument("--pair", type=Path, default=BUNDLED,
                    help="model pair dir with target/ and eagle3/")
    ap.add_argument("--variants", type=lambda s: s.split(","),
                    default=["specgw", "vllm", "specgw-probes-off"])
    ap.add_argument("--concurrency", type=ints, default=[1, 16, 64, 128])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompts-per-client", type=int, default=4)
    ap.add_argument("--min-prompts", type=int, default=16)
    ap.add_argument("--num-warmups", type=int, default=4)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--method", default="eagle3")
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--max-num-seqs", type=int, default=128)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gpu-share", type=float, default=0.2,
                    help="gpu_memory_utilization of each engine (all stay warm at once)")
    ap.add_argument("--start-timeout", type=float, default=420)
    ap.add_argument("--budget-s", type=float, default=0,
                    help="seconds from start after which no new run starts (0: none); "
                         "the servers are stopped and a rerun resumes")
    ap.add_argument("--pin", type=int, default=0, metavar="N",
                    help="give each server N CPUs of its own and the load client the rest "
                         "(0: no pinning, the scheduler places every process)")
    ap.add_argument("--py-spy", type=int, default=0, metavar="RATE",
                    help="sample every server process with py-spy at RATE Hz during each "
                         "run (0: off; benchmarks/py_spy.py)")
    ap.add_argument("--only", action="append", default=[], metavar="VARIANT=C1,C2",
                    help="run VARIANT at these concurrencies only (repeatable)")
    a = ap.parse_args()
    if any("=" not in o for o in a.only):
        ap.error("--only takes VARIANT=C1,C2")
    a.only = {v: ints(cs) for v, _, cs in (o.partition("=") for o in a.only)}
    if stray := [v for v in a.only if v not in a.variants]:
        ap.error(f"--only names variants not in --variants: {stray}")
    bad = [v for v in a.variants if v not in VARIANTS]
    if bad:
        ap.error(f"unknown variants {bad}; choose from {VARIANTS}")
    a.deadline = time.time() + a.budget_s if a.budget_s else 0
    a.out.mkdir(parents=True, exist_ok=True)
    dev = device()
    cfg = engine_config(a, dev)
    servers: dict[str, Server] = {}
    try:
        start_servers(a, cfg, a.out / "logs", servers)
        import torch
        import vllm

        meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": dev,
                "device_name": (torch.cuda.get_device_name() if dev == "cuda"
                                else f"cpu x{os.cpu_count()}"),
                "vllm": vllm.__version__, "torch": torch.__version__, "engine_config": cfg,
                "host": host_topology(),
                "protocol": {k: (str(v) if isinstance(v, Path) else v)
                             for k, v in vars(a).items()},
                "servers": {v: {"argv": s.argv, "env": s.env, "cpus": s.cpus,
                                "config_log": config_evidence(s)}
                            for v, s in servers.items()},
                "client_cpus": sorted(os.sched_getaffinity(0))}
        (a.out / "servers.json").write_text(json.dumps(meta, indent=1))
        run_matrix(a, servers)
    except KeyboardInterrupt:
        print("== interrupted: stopping servers (rerun to resume)", flush=True)
        return 130
    finally:
        for s in reversed(list(servers.values())):
            s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
