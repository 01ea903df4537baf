"""Bounded concurrent streaming client for the gateway benchmark, in its own process.

It must cost the gateway nothing it would not cost a real client, so it runs apart from
the server (the benchmark's engine and gateway share one process and one event loop),
uses aiohttp (what ``vllm bench serve`` uses) and parses JSON only for the first chunk
(time to first token) and the usage chunk (token count), never per token.

Protocol: one JSON command per stdin line, ``{"batch": B, "max_tokens": N, "offset": I}``;
one JSON result per stdout line, ``{"wall_s": .., "requests": [[ttft_s, e2e_s, tokens]]}``.
``{"batch": 0}`` or EOF ends it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import aiohttp


async def one(session: aiohttp.ClientSession, url: str, body: dict) -> tuple[float, float, int]:
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


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="gateway base URL")
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True, help="JSON list of prompt strings")
    a = ap.parse_args()
    prompts = json.loads(a.prompts)
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
            bodies = [{"model": a.model, "prompt": prompts[(cmd.get("offset", 0) + i) %
                                                           len(prompts)],
                       "max_tokens": cmd["max_tokens"], "temperature": 0, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}}
                      for i in range(b)]
            t = time.perf_counter()
            try:
                reqs = await asyncio.gather(*(one(session, url, body) for body in bodies))
                res = {"wall_s": time.perf_counter() - t, "requests": reqs}
            except Exception as exc:  # report, keep serving commands
                res = {"error": f"{type(exc).__name__}: {exc}"}
            sys.stdout.write(json.dumps(res) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
