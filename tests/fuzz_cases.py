"""Hypothesis strategies for hostile OpenAI request bodies, and the check every answer
must pass. Shared by tests/test_fuzz.py (short, CI) and benchmarks/fuzz_soak.py (long).

Every field of both generation endpoints is drawn either from plausible values or from
arbitrary JSON (full Unicode strings, lone surrogates included; huge and negative ints;
NaN/Infinity; nesting), bodies are encoded several ways (``\\u`` escapes, raw surrogate
bytes, corrupted UTF-8, non-object top levels, wrong content types), ``stream`` is on or
off. Generation stays tiny: token counts that the server would accept are capped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx
from hypothesis import strategies as st

# Every code point, surrogates and unassigned ones included.
CHARS = st.characters(codec=None, categories=None, exclude_categories=())
TEXT = st.text(CHARS, max_size=24)
INTS = st.one_of(st.integers(-5, 40), st.integers(), st.sampled_from(
    [2**31, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30]))
FLOATS = st.floats(allow_nan=True, allow_infinity=True)
SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, TEXT)
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)), max_leaves=8)

CAPS = {"max_tokens": 4, "max_completion_tokens": 4, "n": 2, "min_tokens": 2, "best_of": 2,
        "top_logprobs": 3, "logprobs": 3}


def maybe(valid: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly plausible values, sometimes anything at all."""
    return st.one_of(valid, valid, JSON)


SCHEMA = st.one_of(
    st.just({"type": "object", "properties": {"a": {"type": "integer"}}}),
    st.just({"type": "string", "maxLength": 3}), st.just({"type": "nope"}),
    st.just({"properties": {"x": {"type": "string", "pattern": "("}}}), JSON)
TOOL = st.fixed_dictionaries({"type": maybe(st.just("function")), "function": maybe(
    st.fixed_dictionaries({"name": maybe(st.sampled_from(["f", "get_weather"]))},
                          optional={"parameters": maybe(SCHEMA), "description": TEXT,
                                    "strict": maybe(st.booleans())}))})
TOOL_CALL = st.fixed_dictionaries({"id": maybe(TEXT), "type": maybe(st.just("function")),
                                   "function": maybe(st.fixed_dictionaries(
                                       {"name": maybe(TEXT), "arguments": maybe(TEXT)}))})
MESSAGE = st.fixed_dictionaries(
    {"role": maybe(st.sampled_from(["system", "developer", "user", "assistant", "tool"]))},
    optional={"content": maybe(st.one_of(TEXT, st.lists(st.fixed_dictionaries(
        {"type": maybe(st.just("text")), "text": maybe(TEXT)}), max_size=2))),
        "name": maybe(TEXT), "tool_calls": maybe(st.lists(TOOL_CALL, max_size=2)),
        "tool_call_id": maybe(TEXT)})
STOP = st.one_of(TEXT, st.lists(TEXT, max_size=4))
RESPONSE_FORMAT = maybe(st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object"])}),
    st.fixed_dictionaries({"type": st.just("json_schema"), "json_schema":
                           st.fixed_dictionaries({"name": maybe(TEXT)}, optional={
                               "schema": maybe(SCHEMA), "strict": maybe(st.booleans())})})))
COMMON = {
    "temperature": maybe(st.floats(0, 2)), "top_p": maybe(st.floats(0, 1)),
    "n": maybe(st.integers(1, 2)), "stop": maybe(STOP), "seed": maybe(INTS),
    "presence_penalty": maybe(st.floats(-2, 2)), "frequency_penalty": maybe(st.floats(-2, 2)),
    "stream": maybe(st.booleans()), "stream_options": maybe(st.fixed_dictionaries(
        {}, optional={"include_usage": maybe(st.booleans())})),
    "user": maybe(TEXT), "logit_bias": maybe(st.dictionaries(TEXT, FLOATS, max_size=2)),
    "top_k": maybe(INTS), "min_p": maybe(st.floats(0, 1)),
    "repetition_penalty": maybe(st.floats(0, 2)), "ignore_eos": maybe(st.booleans()),
    "min_tokens": maybe(st.integers(0, 2)), "max_tokens": maybe(st.integers(1, 4)),
    "stop_token_ids": maybe(st.lists(st.one_of(st.integers(0, 5000), INTS), max_size=3)),
    "include_stop_str_in_output": maybe(st.booleans()),
    "skip_special_tokens": maybe(st.booleans()),
    "spaces_between_special_tokens": maybe(st.booleans()),
    "add_special_tokens": maybe(st.booleans()),
    # vLLM fields specgw refuses unless they ask for nothing (gateway.protocol.UNHONOURED)
    "use_beam_search": maybe(st.booleans()), "priority": maybe(INTS),
    "structured_outputs": JSON, "request_id": maybe(TEXT),
}
CHAT = {**COMMON, "max_completion_tokens": maybe(st.integers(1, 4)),
        "logprobs": maybe(st.booleans()), "top_logprobs": maybe(st.integers(0, 3)),
        "tools": maybe(st.lists(TOOL, max_size=2)),
        "tool_choice": maybe(st.one_of(st.sampled_from(["none", "auto", "required"]),
                                       st.fixed_dictionaries({"type": st.just("function"),
                                                              "function": st.fixed_dictionaries(
                                                                  {"name": maybe(TEXT)})}))),
        "parallel_tool_calls": maybe(st.booleans()), "response_format": RESPONSE_FORMAT}
COMPLETION = {**COMMON, "logprobs": maybe(st.integers(0, 3)), "echo": maybe(st.booleans()),
              "response_format": RESPONSE_FORMAT,
              "suffix": maybe(TEXT), "best_of": maybe(st.integers(1, 2)),
              "prompt": maybe(st.one_of(TEXT, st.lists(TEXT, min_size=1, max_size=2),
                                        st.lists(st.integers(-2, 5000), max_size=4)))}


def _cap(body: dict, chat: bool) -> dict:
    """Keep accepted requests cheap: large token counts shrink, absent limits get one."""
    for key, cap in CAPS.items():
        v = body.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > cap:
            body[key] = cap
    if chat and body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
        body["max_tokens"] = 4
    return body


@st.composite
def bodies(draw, chat: bool, model: str) -> dict:
    fields = CHAT if chat else COMPLETION
    body: dict = {"model": draw(st.one_of(st.just(model), st.just(model), JSON))}
    if chat:
        body["messages"] = draw(maybe(st.lists(MESSAGE, min_size=1, max_size=3)))
    keys = draw(st.lists(st.sampled_from(sorted(fields)), unique=True, max_size=8))
    for k in keys:
        body[k] = draw(fields[k])
    body.update(draw(st.dictionaries(TEXT, JSON, max_size=2)))  # unknown extras
    if draw(st.booleans()) and len(body) > 1:  # drop a required field now and then
        body.pop(draw(st.sampled_from(sorted(body, key=repr))))
    return _cap(body, chat)


@dataclass
class Case:
    path: str
    content: bytes
    content_type: str | None


def _encode(draw, body) -> bytes:
    how = draw(st.sampled_from(["escaped", "raw", "surrogatepass", "corrupt", "truncate"]))
    if how == "escaped":  # lone surrogates as \\udXXX escapes, NaN as a bare literal
        return json.dumps(body, ensure_ascii=True).encode()
    text = json.dumps(body, ensure_ascii=False)
    if how == "surrogatepass":
        return text.encode("utf-8", "surrogatepass")
    raw = text.encode("utf-8", "replace")
    if how == "raw" or not raw:
        return raw
    i = draw(st.integers(0, len(raw) - 1))
    if how == "truncate":
        return raw[:i]
    junk = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\xf4\x90\x80\x80"]))
    return raw[:i] + junk + raw[i:]


@st.composite
def cases(draw, model: str) -> Case:
    chat = draw(st.booleans())
    path = "/v1/chat/completions" if chat else "/v1/completions"
    kind = draw(st.sampled_from(["body"] * 8 + ["top", "deep"]))
    if kind == "top":  # not an object at the top level
        content = json.dumps(draw(JSON)).encode()
    elif kind == "deep":
        d = draw(st.integers(1, 200_000))
        content = (b"[" * d + b"]" * d) if draw(st.booleans()) else b'{"a":' * d
    else:
        content = _encode(draw, draw(bodies(chat, model)))
    ctype = draw(st.sampled_from(["application/json"] * 6 + [
        None, "text/plain", "application/x-www-form-urlencoded",
        "application/json; charset=latin-1",
        "multipart/form-data; boundary=x"]))
    return Case(path, content, ctype)


def local_port(r: httpx.Response) -> int | None:
    stream = r.extensions.get("network_stream")
    addr = stream.get_extra_info("client_addr") if stream is not None else None
    return addr[1] if addr else None


def send(client: httpx.Client, case: Case) -> httpx.Response:
    headers = {"content-type": case.content_type} if case.content_type else {}
    return client.post(case.path, content=case.content, headers=headers)


def check(r: httpx.Response, case: Case) -> None:
    """Never a 5xx (nor one hidden in a stream's error event); errors OpenAI-shaped."""
    where = f"{case.path} {case.content_type} {case.content[:300]!r}"
    assert r.status_code < 500, f"{r.status_code} {r.text[:300]} for {where}"
    assert r.headers.get("connection") != "close", f"connection closed for {where}"
    if r.status_code >= 400:
        err = r.json().get("error", {})
        assert {"message", "type", "param", "code"} <= set(err), r.text[:300]
    elif r.headers.get("content-type", "").startswith("text/event-stream"):
        assert "internal_server_error" not in r.text, f"{r.text[-300:]} for {where}"


def client(base_url: str, timeout: float = 120) -> httpx.Client:
    # One connection: a server that drops it shows up as a new local port.
    return httpx.Client(base_url=base_url, timeout=timeout,
                        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))
