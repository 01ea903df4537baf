"""Bounded concurrent streaming client for ``gpu_bench.py``, in its own process so that it
costs the gateway nothing it would not cost a real client (the benchmark's engine and
gateway share one process and one event loop). Requests: ``harness.stream_completion``.

Protocol: one JSON command per stdin line, ``{"batch": B, "max_tokens": N, "offset": I}``;
one JSON result per stdout line, ``{"wall_s": .., "requests": [[ttft_s, e2e_s, tokens]]}``.
``{"batch": 0}`` or EOF ends it. Run as ``python -m benchmarks.sse_client``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import aiohttp

from benchmarks.harness import PROMPTS, completion_body, stream_completion


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="gateway base URL")
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    url = f"{a.url}/v1/completions"
    conn = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=900)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        while line := await reader.readline():
            cmd = json.loads(line)
            b = cmd.get("batch", 0)
            if not b:
                break
            off = cmd.get("offset", 0)
            bodies = [completion_body(a.model, PROMPTS[(off + i) % len(PROMPTS)],
                                      cmd["max_tokens"]) for i in range(b)]
            t = time.perf_counter()
            try:
                reqs = await asyncio.gather(*(stream_completion(session, url, body)
                                              for body in bodies))
                res = {"wall_s": time.perf_counter() - t, "requests": reqs}
            except Exception as exc:  # report, keep serving commands
                res = {"error": f"{type(exc).__name__}: {exc}"}
            sys.stdout.write(json.dumps(res) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
