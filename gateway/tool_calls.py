"""Tool calling: ``tools`` / ``tool_choice`` -> a constraint on the output, and the
output -> OpenAI ``tool_calls`` (whole message, or streaming deltas as OpenAI sends them).

* ``none`` (or no tools): plain text.
* a named function: the output is constrained to that function's ``parameters`` schema,
  so the arguments always parse; streamed as argument fragments.
* ``required``: the output is constrained to a non-empty JSON array of
  ``{"name", "arguments"}`` objects, one ``anyOf`` branch per function.
* ``auto``: unconstrained; the text goes through the vLLM tool-call parser selected with
  ``--tool-call-parser``. Streaming ``required`` and ``auto`` hold the text back and
  send content and complete calls in the choice's last chunk (the parser needs it all).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.engine_api import ToolCallExtractor as Extractor
from gateway.errors import invalid
from gateway.protocol import ChatCompletionRequest, ChatMessage, NamedToolChoice
from gateway.structured_output import check_schema, json_constraint

EMPTY_PARAMS = {"type": "object", "properties": {}}


def call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def template_messages(messages: list[ChatMessage]) -> list[dict]:
    """Messages as chat templates expect them: tool-call arguments as objects (as vLLM
    does, so ``tojson`` in a template renders them), tool results with their call id."""
    out = []
    for m in messages:
        d: dict[str, Any] = {"role": m.role, "content": m.text()}
        if m.name is not None:
            d["name"] = m.name
        if m.tool_calls:
            d["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.function.name, "arguments": _maybe_json(c.function.arguments)}}
                for c in m.tool_calls]
        if m.tool_call_id is not None:
            d["tool_call_id"] = m.tool_call_id
        out.append(d)
    return out


def _maybe_json(s: str) -> Any:
    try:
        return json.loads(s)
    except ValueError:
        return s


@dataclass
class ToolPlan:
    mode: Literal["named", "required", "auto"]
    tools: list[dict]
    name: str | None = None  # the named function
    extractor: Extractor | None = None
    parallel: bool = True  # parallel_tool_calls: false caps "required" at one call
    _ids: dict[int, str] = field(default_factory=dict)
    _buf: dict[int, str] = field(default_factory=dict)

    # ------------------------------------------------------------------ request side
    def structured_outputs(self) -> dict | None:
        if self.mode == "named":
            fn = next(t["function"] for t in self.tools if t["function"]["name"] == self.name)
            return json_constraint(fn.get("parameters") or EMPTY_PARAMS)
        if self.mode == "required":
            branches = [{
                "type": "object",
                "properties": {"name": {"const": t["function"]["name"]},
                               "arguments": t["function"].get("parameters") or EMPTY_PARAMS},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            } for t in self.tools]
            array = {"type": "array", "minItems": 1, "items": {"anyOf": branches}}
            if not self.parallel:
                array["maxItems"] = 1
            return json_constraint(array)
        return None

    # ----------------------------------------------------------------- response side
    def parse(self, text: str) -> tuple[str | None, list[tuple[str, str]]]:
        """Whole output -> (content, [(name, arguments)])."""
        if self.mode == "named":
            return None, [(self.name or "", text)]
        if self.mode == "required":
            try:
                calls = json.loads(text)
                return None, [(c["name"], json.dumps(c["arguments"], ensure_ascii=False))
                              for c in calls]
            except (ValueError, TypeError, KeyError):
                return text, []  # cut short (finish_reason "length"): no valid calls
        assert self.extractor is not None
        return self.extractor(text, self.tools)

    def message(self, index: int, text: str, finish_reason: str | None) -> tuple[dict, str | None]:
        content, calls = self.parse(text)
        msg: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        if calls:
            msg["tool_calls"] = [
                {"id": call_id(), "type": "function",
                 "function": {"name": name, "arguments": args}} for name, args in calls]
        return msg, _finish(self.mode, bool(calls), finish_reason)

    def delta(self, index: int, text: str, finish_reason: str | None) -> tuple[dict, str | None]:
        """Streaming: the delta fields for one engine delta of choice ``index``."""
        if self.mode == "named":
            out: dict[str, Any] = {}
            if index not in self._ids:
                self._ids[index] = call_id()
                out["tool_calls"] = [{"index": 0, "id": self._ids[index], "type": "function",
                                      "function": {"name": self.name, "arguments": text}}]
            elif text:
                out["tool_calls"] = [{"index": 0, "function": {"arguments": text}}]
            return out, _finish(self.mode, True, finish_reason)
        # required / auto: parse the whole text once the choice is done
        buf = self._buf.get(index, "") + text
        self._buf[index] = buf
        if finish_reason is None:
            return {}, None
        content, calls = self.parse(buf)
        out = {}
        if content:
            out["content"] = content
        if calls:
            out["tool_calls"] = [
                {"index": i, "id": call_id(), "type": "function",
                 "function": {"name": name, "arguments": args}}
                for i, (name, args) in enumerate(calls)]
        return out, _finish(self.mode, bool(calls), finish_reason)


def _finish(mode: str, called: bool, reason: str | None) -> str | None:
    # OpenAI: a forced named function ends with "stop"; otherwise calls end "tool_calls".
    if reason != "stop" or not called or mode == "named":
        return reason
    return "tool_calls"


def plan_tools(req: ChatCompletionRequest, extractor: Extractor | None) -> ToolPlan | None:
    if not req.tools or req.tool_choice == "none":
        return None
    tools = [t.model_dump(exclude_none=True) for t in req.tools]
    for i, t in enumerate(tools):
        if "parameters" in t["function"]:
            check_schema(t["function"]["parameters"], f"tools.{i}.function.parameters")
    if isinstance(req.tool_choice, NamedToolChoice):
        return ToolPlan("named", tools, name=req.tool_choice.function.name)
    if req.tool_choice == "required":
        return ToolPlan("required", tools, parallel=req.parallel_tool_calls is not False)
    if extractor is None:
        raise invalid('tool_choice "auto" needs a tool-call parser: start specgw serve with '
                      "--tool-call-parser NAME (e.g. hermes), or send tool_choice "
                      '"required", "none" or a named function', param="tool_choice",
                      code="unsupported_parameter")
    return ToolPlan("auto", tools, extractor=extractor)
