"""The soak's clients and its ledger: request kinds, one request sent and read to the end,
and the verdict on each ledger entry given the faults active while it ran.

Every request carries its own ``x-request-id`` and ends in exactly one :class:`Entry`
(exceptions in the client are recorded on it, never raised). Outcomes as the client saw
them: ``ok`` (complete: every choice has a finish_reason, a stream ended with
``[DONE]`` and no error event), ``error`` (an OpenAI error: status or error event),
``aborted`` (the client left on purpose), ``truncated``, ``hung`` or ``exception``.
:func:`judge` turns an outcome into a verdict: succeeded, failed_expected, aborted, or
lost (with the reason); any lost request fails the run.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import httpx

from benchmarks.harness import MODEL, PROMPTS

API_KEY, LIMITED_KEY = "soak", "soak-limited"  # the second one has a small rpm budget
LIMITED_RPM = 4
# Relative weights of the request kinds each client draws from (seeded).
KINDS: dict[str, float] = {
    "chat": 3, "chat_stream": 3, "completion": 2, "completion_stream": 3, "n2": 2,
    "abort": 1.5, "slow_stream": 1, "bad_input": 1, "limited": 0.7, "burst": 0.3,
}
BURST = 8  # requests a burst fires at once: more than the router's slots + queue
# The types a refused request may carry: OpenAI's, which the router gives whatever the
# backend wrote (vLLM's own server says e.g. "BadRequestError" with code 400).
BAD_INPUT_TYPES = {"invalid_request_error", "not_found_error"}
FAULT_GRACE_S = 20.0  # after a fault ends: passive ejection (10 s) + health checks (2 s)
ERROR_STATUS_AFTER_FAULT = {502, 503, 504}

# A prompt far over the backends' context (--max-model-len 2048 for both kinds): only a
# backend knows its context length, so the router must pass the backend's 4xx through.
LONG_PROMPT = "def f(x):\n    return x + 1\n" * 1500
# Bad input that must end in a clear 4xx (status, raw body or JSON body). The status is
# what specgw serve answers; any OpenAI-style 4xx is accepted, since the two kinds of
# backend differ on some (vLLM's server answers 400 where FastAPI validation says 422).
BAD_INPUTS: list[tuple[int, str, object]] = [
    (400, "/v1/chat/completions", {"model": MODEL, "messages": "not a list"}),
    (400, "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": -3}),
    (400, "/v1/completions", {"model": MODEL, "prompt": "x", "temperature": "hot"}),
    (400, "/v1/completions", b'{"model": "tiny-code-llama", "prompt": '),
    (400, "/v1/chat/completions", {"model": MODEL, "messages": [], "n": 0}),
    (404, "/v1/completions", {"model": "no-such-model", "prompt": "x", "max_tokens": 4}),
    # Refused by the backend, not by the router's validation:
    (400, "/v1/completions", {"model": MODEL, "prompt": LONG_PROMPT, "max_tokens": 4}),
    (400, "/v1/chat/completions", {"model": MODEL, "max_tokens": 4, "stream": True,
                                   "messages": [{"role": "user", "content": LONG_PROMPT}]}),
    (400, "/v1/chat/completions", {"model": MODEL, "max_tokens": 100_000,
                                   "messages": [{"role": "user", "content": "hi"}]}),
]


@dataclass
class Entry:
    rid: str
    kind: str
    t: float  # sent, seconds since the run started
    dur: float = 0.0
    status: int | None = None
    outcome: str = "hung"
    err_type: str | None = None
    err_code: str | None = None
    mid_stream: bool = False  # the error came as an event inside a 200 stream
    ttft: float | None = None
    tokens: int = 0
    backend: str | None = None
    detail: str | None = None
    verdict: str = ""
    reason: str | None = None
    # The whole request (headers and body) was written to the router's socket: a client
    # that leaves before this (on a short timeout, on a loaded machine) sent the router
    # nothing it could count.
    delivered: bool = False

    FIELDS = ("rid", "kind", "t", "dur", "status", "outcome", "err_type", "err_code",
              "mid_stream", "ttft", "tokens", "backend", "detail", "verdict", "reason",
              "delivered")

    def row(self) -> list:
        d = asdict(self)
        return [round(v, 4) if isinstance(v, float) else v for v in (d[f] for f in self.FIELDS)]


@dataclass
class Request:
    kind: str
    path: str
    body: object  # dict (JSON) or bytes sent as is
    stream: bool = False
    n: int = 1
    key: str = API_KEY
    abort_after: int | None = None  # data events read before the client leaves
    leave_after_s: float | None = None  # the client gives up after this long, wherever
    read_delay_s: float = 0.0  # a slow SSE reader sleeps this long per event
    expect_status: int | None = None  # bad input: the 4xx it must get
    extra: dict = field(default_factory=dict)


def _generation(rng: random.Random, chat: bool, stream: bool, n: int = 1) -> Request:
    prompt = rng.choice(PROMPTS)
    body: dict = {"model": MODEL, "max_tokens": rng.randint(4, 24), "n": n,
                  "temperature": 0.8 if n > 1 else rng.choice([0.0, 0.7]), "stream": stream}
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if stream and rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    path = "/v1/chat/completions" if chat else "/v1/completions"
    return Request("", path, body, stream, n)


def make_request(kind: str, rng: random.Random) -> Request:
    """One request of ``kind`` drawn with ``rng`` (same seed, same requests)."""
    chat = rng.random() < 0.5
    if kind in ("chat", "chat_stream", "completion", "completion_stream"):
        req = _generation(rng, kind.startswith("chat"), kind.endswith("stream"))
    elif kind == "n2":
        req = _generation(rng, chat, rng.random() < 0.5, n=2)
    elif kind == "abort":
        req = _generation(rng, chat, True)
        req.body["max_tokens"] = 24  # type: ignore[index]
        mode = rng.choice(["timeout", 0, 1, 3])
        if mode == "timeout":  # often before the response headers came
            req.leave_after_s = round(rng.uniform(0.02, 0.5), 3)
        else:
            req.abort_after = mode
    elif kind == "slow_stream":
        req = _generation(rng, chat, True)
        req.read_delay_s = 0.3
    elif kind == "bad_input":
        status, path, body = rng.choice(BAD_INPUTS)
        req = Request("", path, body, expect_status=status)
    elif kind in ("limited", "burst"):
        req = _generation(rng, chat, False)
        req.body["max_tokens"] = 4  # type: ignore[index]
        req.key = LIMITED_KEY if kind == "limited" else API_KEY
    else:
        raise ValueError(f"unknown request kind {kind!r}")
    req.kind = kind
    return req


def draw_kind(rng: random.Random) -> str:
    return rng.choices(list(KINDS), weights=list(KINDS.values()))[0]


# ---------------------------------------------------------------------- one request
async def send(client: httpx.AsyncClient, req: Request, entry: Entry, deadline_s: float
               ) -> Entry:
    """Send ``req`` and fill ``entry``; never raises (but lets cancellation through)."""
    t0 = time.monotonic()
    try:
        await asyncio.wait_for(_send(client, req, entry, t0), req.leave_after_s or deadline_s)
    except asyncio.TimeoutError:
        if req.leave_after_s:
            entry.outcome, entry.detail = "aborted", f"left after {req.leave_after_s}s"
        else:
            entry.outcome, entry.detail = "hung", f"no end after {deadline_s:.0f}s"
    except httpx.HTTPError as exc:
        entry.outcome, entry.detail = "exception", f"{type(exc).__name__}: {exc}"[:200]
    except Exception as exc:  # a client bug must show up in the ledger, not end the run
        entry.outcome, entry.detail = "exception", f"{type(exc).__name__}: {exc}"[:200]
    entry.dur = time.monotonic() - t0
    return entry


async def _send(client: httpx.AsyncClient, req: Request, entry: Entry, t0: float) -> None:
    headers = {"x-request-id": entry.rid, "authorization": f"Bearer {req.key}",
               "content-type": "application/json"}
    content = req.body if isinstance(req.body, bytes) else json.dumps(req.body).encode()
    async def trace(event: str, _info: dict) -> None:
        if event == "http11.send_request_body.complete":
            entry.delivered = True

    async with client.stream("POST", req.path, content=content, headers=headers,
                             extensions={"trace": trace}) as r:
        entry.status = r.status_code
        entry.backend = r.headers.get("x-backend")
        if r.status_code != 200 or not req.stream:
            _read_json(entry, req, r.status_code, await r.aread())
        else:
            await _read_stream(entry, req, r, t0)


def _read_json(entry: Entry, req: Request, status: int, raw: bytes) -> None:
    try:
        obj = json.loads(raw)
    except ValueError:
        entry.outcome, entry.detail = "exception", f"HTTP {status}, not JSON: {raw[:80]!r}"
        return
    if status != 200:
        err = obj.get("error") if isinstance(obj, dict) else None
        if not isinstance(err, dict) or "type" not in err:
            entry.outcome, entry.detail = "exception", f"HTTP {status}, not an OpenAI error"
            return
        entry.outcome, entry.err_type, entry.err_code = "error", err["type"], err.get("code")
        return
    choices = obj.get("choices") or []
    complete = len(choices) == req.n and all(c.get("finish_reason") for c in choices)
    entry.outcome = "ok" if complete else "truncated"
    entry.tokens = (obj.get("usage") or {}).get("completion_tokens", 0)
    if not complete:
        entry.detail = f"{len(choices)}/{req.n} choices, finish_reasons " \
                       f"{[c.get('finish_reason') for c in choices]}"


class StreamState:
    def __init__(self, n: int):
        self.finished: set[int] = set()
        self.events = 0
        self.done = False
        self.error: dict | None = None
        self.n = n


async def _read_stream(entry: Entry, req: Request, r: httpx.Response, t0: float) -> None:
    st = StreamState(req.n)
    if req.abort_after == 0:  # gone as soon as the headers came
        entry.outcome = "aborted"
        return
    async for line in r.aiter_lines():
        if not line.startswith("data: "):
            continue
        if req.abort_after is not None and st.events >= req.abort_after:
            entry.outcome = "aborted"  # leaving the block closes the connection
            return
        stream_event(entry, st, line[6:], t0)
        if st.done:
            break
        if req.read_delay_s:
            await asyncio.sleep(req.read_delay_s)
    stream_verdict(entry, st)


def stream_event(entry: Entry, st: StreamState, data: str, t0: float) -> None:
    if data == "[DONE]":
        st.done = True
        return
    st.events += 1
    obj = json.loads(data)
    if "error" in obj:
        st.error = obj["error"]
        return
    for c in obj.get("choices") or []:
        text = c.get("text") or (c.get("delta") or {}).get("content")
        if text and entry.ttft is None:
            entry.ttft = time.monotonic() - t0
        if c.get("finish_reason"):
            st.finished.add(c.get("index", 0))
    if obj.get("usage"):
        entry.tokens = obj["usage"].get("completion_tokens", 0)


def stream_verdict(entry: Entry, st: StreamState) -> None:
    """A stream is complete only with [DONE], no error event and every choice finished;
    an error event makes it an OpenAI error; anything else is a truncated stream."""
    if st.error is not None:
        entry.outcome, entry.mid_stream = "error", True
        entry.err_type, entry.err_code = st.error.get("type"), st.error.get("code")
    elif st.done and len(st.finished) == st.n:
        entry.outcome = "ok"
    else:
        entry.outcome = "truncated"
        entry.detail = f"[DONE]={st.done}, finished choices {sorted(st.finished)} of {st.n}"


# --------------------------------------------------------------------------- verdicts
def fault_active(t0: float, t1: float, faults: Sequence[dict]) -> bool:
    """Did [t0, t1] overlap a fault (or its grace period after it ended)?"""
    for f in faults:
        end = f.get("t_end")
        end = float("inf") if end is None else end + FAULT_GRACE_S
        if t0 <= end and t1 >= f["t_start"]:
            return True
    return False


def judge(e: Entry, faults: Sequence[dict]) -> None:
    """Set ``e.verdict`` (and ``e.reason`` when lost)."""
    e.verdict, e.reason = _judge(e, fault_active(e.t, e.t + e.dur, faults))


def _judge(e: Entry, in_fault: bool) -> tuple[str, str | None]:
    if e.kind == "bad_input":
        if e.outcome == "error" and e.status == 429 and e.err_type == "rate_limit_error":
            return _judge_429(e)  # a backend-judged bad input passes the router's queue
        if e.outcome == "error" and e.status is not None and 400 <= e.status < 500:
            if e.err_type in BAD_INPUT_TYPES:
                return "failed_expected", None
            return "lost", f"bad input answered {e.status} with type {e.err_type!r}"
        # Bad input a backend judges reaches a backend, so a fault may answer first.
        if e.outcome == "error" and e.status in ERROR_STATUS_AFTER_FAULT and in_fault:
            return "failed_expected", None
        return "lost", f"bad input answered {e.status} ({e.outcome})"
    if e.outcome == "ok":
        return "succeeded", None
    if e.outcome == "aborted":
        return "aborted", None
    if e.outcome != "error":
        return "lost", e.outcome
    if e.status == 429 and e.err_type == "rate_limit_error":
        return _judge_429(e)
    if e.mid_stream or e.status in ERROR_STATUS_AFTER_FAULT:
        if in_fault:
            return "failed_expected", None
        return "lost", f"unexplained {e.status} {e.err_type}/{e.err_code} (no fault active)"
    return "lost", f"unexpected {e.status} {e.err_type}/{e.err_code}"


def _judge_429(e: Entry) -> tuple[str, str | None]:
    if e.err_code == "server_overloaded":
        return "failed_expected", None  # the router's queue bound
    if e.err_code == "rate_limit_exceeded" and e.kind == "limited":
        return "failed_expected", None  # the per-key budget
    return "lost", f"429 {e.err_code} on a {e.kind} request"
