"""A probe read that times out must not hurt the engine or the gateway.

Found on the CPU engine under load (2026-12-05, three engines on two cores): the collector
passed its timeout to vLLM's ``collective_rpc``; when it expired, vLLM's multiprocess
executor dropped the call's future while the starved worker still answered, so the late
answer was left for the next call in its response queue (``MultiprocExecutor
.collective_rpc``). From then on every request ended at once with no tokens, and
``/metrics`` answered 500 (an answer of the wrong shape read as a probe ledger). The
collector now never gives vLLM a timeout and bounds its own wait
(``engine_ext.collector.all_engines_rpc``).

This test stalls the worker (SIGSTOP) for longer than a probe read may wait
(``SPECGW_PROBE_RPC_TIMEOUT_S``) while ``/metrics`` and the raw ledgers are read, then lets
it go: the reads give up on the gateway's side (a 503 in OpenAI's shape for the raw
ledgers, where the route answered 500 before; ``/metrics`` still 200), and every later
answer is right. It does not reproduce the executor's lost answer itself: with the engine
idle, vLLM 0.32 took the stalled call only once the worker answered, and the old code
passed this test but for the 500.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest
from conftest import MODEL, Server, openai_client, ready_until_teardown

N_TOKENS = 48
PROMPT = "def fib(n):\n"
READ_TIMEOUT_S = 0.05
STOPPED_S = 0.3  # the worker's stall: six times what a read may wait


@pytest.fixture(scope="module")
def impatient() -> Iterator[Server]:
    srv = Server("gateway-rpc-timeout", ["--log-format", "text", "--poll-interval", "1"],
                 env={"SPECGW_PROBE_RPC_TIMEOUT_S": str(READ_TIMEOUT_S)})
    yield from ready_until_teardown(srv)


def worker_pid(srv: Server) -> int:
    procs = psutil.Process(srv.proc.pid).children(recursive=True)
    workers = [p.pid for p in procs if p.name().startswith("VLLM::Worker")]
    assert len(workers) == 1, [p.name() for p in procs]
    return workers[0]


def greedy(url: str) -> str:
    r = openai_client(url).completions.create(model=MODEL, prompt=PROMPT,
                                              max_tokens=N_TOKENS, temperature=0,
                                              extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == N_TOKENS
    return r.choices[0].text


async def _streams(url: str, n: int) -> list[str]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as c:
        async def stream() -> str:
            text = []
            body = {"model": MODEL, "prompt": PROMPT, "max_tokens": N_TOKENS,
                    "temperature": 0, "ignore_eos": True, "stream": True}
            async with c.stream("POST", "/v1/completions", json=body) as r:
                assert r.status_code == 200
                async for line in r.aiter_lines():
                    if line.startswith("data: {"):
                        text += [ch["text"] for ch in json.loads(line[6:])["choices"]]
            return "".join(text)

        return await asyncio.gather(*(stream() for _ in range(n)))


def stalled_reads(url: str, worker: int, rounds: int = 3) -> tuple[list[int], list[int]]:
    """With the worker stopped, /metrics and the raw ledgers are read (each read gives up
    after READ_TIMEOUT_S), then the worker is let go: the engine is idle meanwhile, so it
    takes the calls at once and, unlike during a step, waits on the worker itself."""
    scrapes, reads = [], []
    for _ in range(rounds):
        os.kill(worker, signal.SIGSTOP)
        try:
            scrapes.append(httpx.get(f"{url}/metrics", timeout=30).status_code)
            reads.append(httpx.get(f"{url}/v1/engine/probes", timeout=30).status_code)
            time.sleep(STOPPED_S)
        finally:
            os.kill(worker, signal.SIGCONT)
        time.sleep(0.2)
    return scrapes, reads


def test_timed_out_probe_reads_leave_the_engine_serving(impatient):
    # Only what the server logs from here on: vLLM 0.32 may log an ignored exception of its
    # own at start-up (a CPU GEMM handler's __del__ while it recompiles after a compile-cache
    # load failure; stock `vllm serve` does it too).
    log_start = impatient.log_path.stat().st_size
    ref = greedy(impatient.url)
    scrapes, reads = stalled_reads(impatient.url, worker_pid(impatient))
    assert set(scrapes) == {200}
    assert set(reads) == {503}  # a read that timed out: OpenAI's shape, never a 500
    assert asyncio.run(_streams(impatient.url, 3)) == [ref] * 3
    assert greedy(impatient.url) == ref
    # With the worker running, reads get through again (a few tries: READ_TIMEOUT_S is
    # short for a busy 2-core machine).
    for _ in range(20):
        r = httpx.get(f"{impatient.url}/v1/engine/probes", timeout=30)
        if r.status_code == 200:
            break
        time.sleep(0.5)
    assert r.status_code == 200 and all(isinstance(s, dict) for s in r.json())
    assert httpx.get(f"{impatient.url}/metrics", timeout=30).status_code == 200
    log = impatient.log_path.read_bytes()[log_start:].decode(errors="replace")
    assert f"no answer from the workers within {READ_TIMEOUT_S:g} s" in log
    assert "Traceback" not in log
