"""Seed-bug runs (issue #13): does the measurement catch an eager drafter, and does the fix
bring its graphs back? One unattended batch for the H200 (vLLM 0.26), also runnable on the
CPU engine as a plumbing check.

For each runner (v1, v2) and case, one ``specgw serve`` process with the pair from
``--pair``, k=3, ``max_num_seqs`` 32:

* ``a``  normal: vLLM's compiled EAGLE-3 drafter;
* ``b``  the seed bug, our fix off: ``SPECGW_SEED_BUG=1 SPECGW_COMPILED_DRAFTERS=0`` (the
  test-only plugin ``specgw_seed_bug`` swaps in a drafter class without
  ``@support_torch_compile``, the state before vLLM PR #25109);
* ``c``  the seed bug, our fix on: ``SPECGW_SEED_BUG=1``.

Each run records the start-up self-check (``/v1/engine/self_check``), scrapes ``/metrics``
every ``--scrape-s`` seconds during a fixed workload (``--concurrency`` greedy completions
of ``--max-tokens`` tokens, ``ignore_eos``, starts staggered so prefills join running
decodes: mixed batches, the V2 first pass that is dispatched PIECEWISE), repeated
``--rounds`` times after one warm-up round. Tokens/s per round comes from the engine's
token counter (``specgw_generation_tokens_total``) over the round's wall time.

Output: ``<out>/<runner>_<case>.json`` per run (raw scrapes with unix timestamps, so they
convert to OpenMetrics or promtool input series), ``<out>/summary.json``. A run whose JSON
says ``ok`` is skipped on re-run. ``benchmarks/seed_bug_report.py`` builds docs/seed_bug.md;
``benchmarks/seed_bug_alert.py`` checks the alert with promtool on the recorded series.

Device: ``PYTHONPATH=$PWD:/tmp/site python3 benchmarks/seed_bug_gpu.py --out $OUT``.
CPU check: ``--runners v1 --cases a --max-tokens 16 --concurrency 2 --rounds 2``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
from benchmarks.seed_bug_report import summarize_run  # noqa: E402

MODEL = "pair"  # served model name (the `model` label of every series)
CASES = {
    "a": {"title": "normal drafter", "env": {}},
    "b": {"title": "seed bug, fix off",
          "env": {"SPECGW_SEED_BUG": "1", "SPECGW_COMPILED_DRAFTERS": "0"}},
    "c": {"title": "seed bug, fix on", "env": {"SPECGW_SEED_BUG": "1"}},
}
PROMPTS = [
    "def binary_search(items, target):\n", "class LRUCache:\n    def __init__(self, cap):\n",
    "import os\nimport sys\n\ndef main():\n", "for root, dirs, files in os.walk(path):\n",
    "def __repr__(self):\n        return", "with open(filename, 'rb') as f:\n",
    "try:\n    import json\nexcept ImportError:\n", "def parse_args(argv=None):\n",
]
# Series worth keeping from each scrape: the probe counters, the self-check gauges and the
# token/acceptance counters (histogram buckets and HTTP metrics are left out).
KEEP_PREFIXES = ("specgw_cudagraph", "specgw_eager", "specgw_silent", "specgw_partial",
                 "specgw_unknown", "specgw_model_forwards", "specgw_probe",
                 "specgw_unattributed", "specgw_drafter_expected", "specgw_startup",
                 "specgw_engine_ready", "specgw_generation_tokens_total",
                 "vllm:spec_decode_num_drafts_total",
                 "vllm:spec_decode_num_accepted_tokens_total")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str, body: dict | None = None, timeout: float = 30) -> dict | list:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data,
                                 headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def scrape(base: str) -> dict[str, float]:
    """One /metrics scrape: {series id: value}, the id being the OpenMetrics series text
    (``name{a="x",b="y"}``), labels sorted, for the kept series only."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=15) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            # NaN gauges (nothing to divide yet) are left out: strict JSON has no NaN.
            if not s.name.startswith(KEEP_PREFIXES) or s.value != s.value:
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


class Scraper(threading.Thread):
    """Scrapes every ``period`` seconds until stopped; keeps unix timestamps."""

    def __init__(self, base: str, period: float):
        super().__init__(daemon=True)
        self.base, self.period = base, period
        self.samples: list[dict] = []
        self.errors = 0
        self._halt = threading.Event()

    def snap(self) -> dict:
        t = time.time()
        sample = {"t": round(t, 3), "values": scrape(self.base)}
        self.samples.append(sample)
        return sample

    def run(self) -> None:
        while not self._halt.is_set():
            t0 = time.monotonic()
            try:
                self.snap()
            except Exception:
                self.errors += 1
            self._halt.wait(max(0.0, self.period - (time.monotonic() - t0)))

    def stop(self) -> None:
        self._halt.set()
        self.join(30)


def tokens(sample: dict) -> float:
    return sum(v for k, v in sample["values"].items()
               if k.startswith("specgw_generation_tokens_total"))


def one_completion(base: str, model: str, i: int, max_tokens: int, delay: float) -> int:
    time.sleep(delay)
    r = http_json(f"{base}/v1/completions", {
        "model": model, "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens,
        "temperature": 0, "ignore_eos": True}, timeout=300)
    return int(r["usage"]["completion_tokens"])


def workload_round(base: str, model: str, a: argparse.Namespace, pool: ThreadPoolExecutor,
                   scraper: Scraper, offset: int) -> dict:
    before = scraper.snap()
    t0 = time.perf_counter()
    futs = [pool.submit(one_completion, base, model, offset + i, a.max_tokens, i * a.stagger_s)
            for i in range(a.concurrency)]
    got = [f.result() for f in futs]
    wall = time.perf_counter() - t0
    after = scraper.snap()
    n = tokens(after) - tokens(before)
    return {"t0": before["t"], "t1": after["t"], "wall_s": round(wall, 4),
            "completion_tokens": sum(got), "engine_tokens": n,
            "tokens_per_s": round(n / wall, 2) if wall > 0 else None}


def start_server(a: argparse.Namespace, runner: str, case: str, log_path: Path):
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "SPECGW_GPU_MEMORY_UTILIZATION": str(a.gpu_memory_utilization),
           "SPECGW_BUNDLED_DIR": str(Path(a.pair).resolve()), **CASES[case]["env"]}
    for var in ("SPECGW_SEED_BUG", "SPECGW_COMPILED_DRAFTERS"):
        if var not in CASES[case]["env"]:
            env.pop(var, None)
    pair = Path(a.pair).resolve()
    cmd = [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port),
           "--model", str(pair / "target"), "--draft-model", str(pair / "eagle3"),
           "--served-model-name", MODEL, "--method", "eagle3", "-k", str(a.k),
           "--runner", runner, "--max-num-seqs", str(a.max_num_seqs),
           "--log-format", "text", "--poll-interval", "1"]
    log = log_path.open("w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    return proc, f"http://127.0.0.1:{port}", log


def wait_ready(base: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited rc={proc.returncode}")
        try:
            http_json(f"{base}/ready", timeout=3)
            return
        except (urllib.error.URLError, OSError, ValueError):
            time.sleep(0.5)
    raise TimeoutError(f"server not ready after {timeout}s")


def stop_server(proc: subprocess.Popen, log) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    # The engine core is a child in the same process group: wait until it is gone too,
    # so the next run's memory profiling does not see this one's GPU memory.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    log.close()


def tail(path: Path, n: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:])


def run_one(a: argparse.Namespace, runner: str, case: str, out: Path) -> dict:
    name = f"{runner}_{case}"
    log_path = out / f"{name}.log"
    res: dict = {"run": name, "runner": runner, "case": case, "title": CASES[case]["title"],
                 "model": MODEL,
                 "env": CASES[case]["env"], "k": a.k, "max_num_seqs": a.max_num_seqs,
                 "concurrency": a.concurrency, "max_tokens": a.max_tokens,
                 "stagger_s": a.stagger_s, "ok": False}
    t_start = time.monotonic()
    proc, base, log = start_server(a, runner, case, log_path)
    scraper = None
    try:
        wait_ready(base, proc, a.start_timeout_s)
        res["start_s"] = round(time.monotonic() - t_start, 1)
        res["self_check"] = http_json(f"{base}/v1/engine/self_check")
        print(f"[{name}] ready in {res['start_s']}s, self-check warnings: "
              f"{res['self_check'].get('warnings')}", flush=True)
        scraper = Scraper(base, a.scrape_s)
        scraper.start()
        rounds = []
        with ThreadPoolExecutor(a.concurrency) as pool:
            for r in range(a.rounds + 1):
                rd = workload_round(base, MODEL, a, pool, scraper, r * a.concurrency)
                rd["warmup"] = r == 0
                rounds.append(rd)
                print(f"[{name}] round {r}{' (warm-up)' if r == 0 else ''}: "
                      f"{rd['engine_tokens']:.0f} tokens {rd['tokens_per_s']} tok/s", flush=True)
        time.sleep(a.scrape_s * 2.2)  # a periodic scrape or two after the last step
        res["rounds"] = rounds
        res["probes"] = http_json(f"{base}/v1/engine/probes")
        res["ok"] = True
    except Exception as exc:
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["log_tail"] = tail(log_path)
        print(f"[{name}] FAILED: {res['error']}\n{res['log_tail']}", flush=True)
    finally:
        try:
            if scraper is not None:
                scraper.stop()
                # Two threads append (the periodic scraper, the round boundaries).
                res["scrapes"] = sorted(scraper.samples, key=lambda x: x["t"])
                res["scrape_errors"] = scraper.errors
        finally:
            stop_server(proc, log)
        res["wall_s"] = round(time.monotonic() - t_start, 1)
    if res["ok"]:
        res["summary"] = summarize_run(res)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--pair", default=str(ROOT / "models" / "tiny-code-llama"),
                   help="directory with target/ and eagle3/")
    p.add_argument("--runners", default="v1,v2")
    p.add_argument("--cases", default="a,b,c")
    p.add_argument("-k", type=int, default=3)
    p.add_argument("--max-num-seqs", type=int, default=32)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--rounds", type=int, default=4, help="measured rounds after a warm-up")
    p.add_argument("--stagger-s", type=float, default=0.03,
                   help="delay between request starts within a round (mixed batches)")
    p.add_argument("--scrape-s", type=float, default=1.0)
    p.add_argument("--start-timeout-s", type=float, default=240)
    p.add_argument("--budget-s", type=float, default=450,
                   help="no new run starts after this many seconds (a run takes ~60-100 s "
                   "on the H200; the device allows 600 s per command, re-run for the rest)")
    a = p.parse_args(argv)
    # Killed by a timeout: unwind through run_one's finally, which stops the server.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    for runner in a.runners.split(","):
        for case in a.cases.split(","):
            path = out / f"{runner}_{case}.json"
            if path.exists() and json.loads(path.read_text()).get("ok"):
                print(f"[{runner}_{case}] done already, skipped", flush=True)
                continue
            if time.monotonic() - t0 > a.budget_s:
                print(f"[{runner}_{case}] skipped: budget {a.budget_s}s spent", flush=True)
                continue
            print(f"[{runner}_{case}] start ({CASES[case]['title']}) at "
                  f"{time.monotonic() - t0:.0f}s", flush=True)
            res = run_one(a, runner, case, out)
            path.write_text(json.dumps(res, indent=1) + "\n")
            print(f"[{runner}_{case}] {'ok' if res['ok'] else 'FAILED'} in {res['wall_s']}s: "
                  f"{json.dumps(res.get('summary'))}", flush=True)
    runs = [json.loads(f.read_text()) for f in sorted(out.glob("v*_*.json"))]
    summary = {r["run"]: r.get("summary") or {"error": r.get("error")} for r in runs}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1), flush=True)
    return 0 if all(r.get("ok") for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
