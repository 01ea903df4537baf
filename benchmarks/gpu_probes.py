"""GPU run (H200, vLLM 0.26): do the drafter's CUDA graphs really replay, and what does
that buy? One process per configuration, the in-process engine from ``engine_ext``:

* ``v1-piecewise``  Model Runner V1, FULL_AND_PIECEWISE, drafter PIECEWISE graphs
* ``v1-eager-draft`` same, ``speculative_config.enforce_eager`` (drafter eager)
* ``v2-default``    Model Runner V2 (vLLM 0.26's default for Llama)
* ``no-spec``       no speculation (V2)

For batch sizes 1, 8, 32 it runs B concurrent greedy requests of the bundled pair
(ignore_eos, fixed length) and reports output tokens/s, TPOT/TTFT percentiles, the
acceptance length, and the graph hit rate per role/phase from our worker probes
(counter deltas over the batch: prefill included, warm-up excluded).

Usage (device): ``python benchmarks/gpu_probes.py --out $OUT`` (orchestrates all).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {
    "v1-piecewise": dict(runner="v1"),
    "v1-eager-draft": dict(runner="v1", draft_enforce_eager=True),
    "v2-default": dict(runner="v2"),
    "no-spec": dict(runner="v2", method="none"),
}
BATCHES = (1, 8, 32)
PROMPTS = [
    "def binary_search(items, target):\n", "class LRUCache:\n    def __init__(self, cap):\n",
    "import os\nimport sys\n\ndef main():\n", "for root, dirs, files in os.walk(path):\n",
    "def __repr__(self):\n        return", "with open(filename, 'rb') as f:\n",
    "try:\n    import json\nexcept ImportError:\n", "def parse_args(argv=None):\n",
]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))] if xs else float("nan")


def forwards(snaps: list[dict]) -> dict[tuple, int]:
    out: dict[tuple, int] = {}
    for s in snaps:
        for role, phase, dispatched, executed, n in s["forwards"]:
            key = (role, phase, dispatched, executed)
            out[key] = out.get(key, 0) + n
    return out


def hit_rates(before: dict, after: dict) -> dict[str, dict]:
    res: dict[str, dict] = {}
    for key in set(after) | set(before):
        n = after.get(key, 0) - before.get(key, 0)
        if not n:
            continue
        role, phase, dispatched, executed = key
        r = res.setdefault(f"{role}/{phase}", {"graph": 0, "eager": 0, "silent_eager": 0,
                                                "dispatched": {}})
        r[executed] += n
        r["dispatched"][dispatched] = r["dispatched"].get(dispatched, 0) + n
        if executed == "eager" and dispatched != "none":
            r["silent_eager"] += n
    for r in res.values():
        tot = r["graph"] + r["eager"]
        r["hit_rate"] = round(r["graph"] / tot, 4) if tot else None
    return res


async def run_one(name: str, max_tokens: int) -> dict:
    from prometheus_client import REGISTRY
    from vllm import SamplingParams

    from engine_ext.engine import SpecEngine
    from engine_ext.settings import EngineSettings

    s = EngineSettings.from_env(max_num_seqs=32, **CONFIGS[name])
    eng = SpecEngine(s, poll_interval_s=3600)
    t0 = time.monotonic()
    await eng.start()
    start_s = time.monotonic() - t0
    tok = eng.engine.get_tokenizer()
    prompt_ids = [tok.encode(p, add_special_tokens=False) for p in PROMPTS]

    def acc() -> tuple[float, float]:
        lbl = {"model": eng.model_name}
        return (REGISTRY.get_sample_value("specgw_spec_decode_accepted_tokens_per_draft_sum",
                                          lbl) or 0.0,
                REGISTRY.get_sample_value("specgw_spec_decode_accepted_tokens_per_draft_count",
                                          lbl) or 0.0)

    async def one(i: int, batch_tag: str) -> dict:
        sp = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
        t_start = time.perf_counter()
        first = None
        n = 0
        async for out in eng.engine.generate({"prompt_token_ids": prompt_ids[i % 8]}, sp,
                                             request_id=f"{batch_tag}-{i}"):
            if first is None and out.outputs[0].token_ids:
                first = time.perf_counter()
            n = len(out.outputs[0].token_ids)
        end = time.perf_counter()
        return {"ttft": first - t_start, "tpot": (end - first) / max(1, n - 1), "tokens": n}

    await asyncio.gather(*(one(i, "warm") for i in range(4)))
    results = []
    for b in BATCHES:
        snap0 = forwards(await eng.collective_rpc("specgw_probe_snapshot"))
        a0 = acc()
        t = time.perf_counter()
        reqs = await asyncio.gather(*(one(i, f"b{b}") for i in range(b)))
        wall = time.perf_counter() - t
        snap1 = forwards(await eng.collective_rpc("specgw_probe_snapshot"))
        a1 = acc()
        drafts = a1[1] - a0[1]
        results.append({
            "batch": b,
            "output_tokens_per_s": round(sum(r["tokens"] for r in reqs) / wall, 1),
            "tpot_ms_p50": round(1000 * statistics.median(r["tpot"] for r in reqs), 3),
            "tpot_ms_p90": round(1000 * pct([r["tpot"] for r in reqs], 0.9), 3),
            "ttft_ms_p50": round(1000 * statistics.median(r["ttft"] for r in reqs), 2),
            "ttft_ms_p90": round(1000 * pct([r["ttft"] for r in reqs], 0.9), 2),
            "acceptance_length": round(1 + (a1[0] - a0[0]) / drafts, 3) if drafts else None,
            "probes": hit_rates(snap0, snap1),
        })
    final = await eng.collective_rpc("specgw_probe_snapshot")
    out = {"config": name, "settings": CONFIGS[name], "engine_start_s": round(start_s, 1),
           "self_check": eng.self_check, "results": results,
           "captures": final[0].get("captures"), "installed": final[0].get("installed"),
           "unattributed_replays": final[0].get("unattributed_replays"),
           "proposes_without_forward": final[0].get("proposes_without_forward")}
    await eng.shutdown()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "docs")))
    ap.add_argument("--one", choices=sorted(CONFIGS))
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--timeout", type=int, default=170)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.one:
        res = asyncio.run(run_one(a.one, a.max_tokens))
        (a.out / f"gpu_{a.one}.json").write_text(json.dumps(res, indent=2, default=str))
        print("RESULT", json.dumps({"config": a.one, "results": [
            {k: v for k, v in r.items() if k != "probes"} | {
                "hit": {p: x["hit_rate"] for p, x in r["probes"].items()}}
            for r in res["results"]]}))
        return
    for name in a.configs.split(","):
        log = (a.out / f"gpu_{name}.log").open("w")
        t = time.time()
        try:
            rc = subprocess.run([sys.executable, __file__, "--one", name, "--out", str(a.out),
                                 "--max-tokens", str(a.max_tokens)], stdout=log,
                                stderr=subprocess.STDOUT, timeout=a.timeout, cwd=ROOT).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        log.close()
        text = (a.out / f"gpu_{name}.log").read_text(errors="replace")
        lines = [ln for ln in text.splitlines() if ln.startswith("RESULT")]
        print(f"== {name} rc={rc} {time.time() - t:.0f}s", lines[-1] if lines else
              "\n".join(text.splitlines()[-15:]), flush=True)


if __name__ == "__main__":
    main()
