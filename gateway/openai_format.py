"""Engine deltas -> OpenAI response objects (chat.completion(.chunk), text_completion)."""

from __future__ import annotations

import time
from typing import Any

from gateway.local_backend import Delta
from gateway.tool_calls import ToolPlan


def _token(entry: Any, token_id: int) -> str:
    text = getattr(entry, "decoded_token", None)
    return text if text is not None else f"<{token_id}>"


def _ranked(step: dict[int, Any]) -> list[tuple[int, Any]]:
    return sorted(step.items(), key=lambda kv: getattr(kv[1], "rank", 0) or 0)


def chat_logprobs(d: Delta, top: int) -> dict | None:
    if d.logprobs is None:
        return None
    content = []
    for tid, step in zip(d.token_ids, d.logprobs, strict=False):
        chosen = step.get(tid)
        tok = _token(chosen, tid)
        tops = [
            {"token": (t := _token(e, i)), "logprob": max(e.logprob, -9999.0),
             "bytes": list(t.encode())}
            for i, e in _ranked(step)[:top]
        ] if top else []
        content.append({
            "token": tok,
            "logprob": max(chosen.logprob, -9999.0) if chosen is not None else -9999.0,
            "bytes": list(tok.encode()),
            "top_logprobs": tops,
        })
    return {"content": content, "refusal": None}


def completion_logprobs(d: Delta, top: int, offset: int) -> dict | None:
    if d.logprobs is None:
        return None
    tokens, lps, tops, offsets = [], [], [], []
    pos = offset
    for tid, step in zip(d.token_ids, d.logprobs, strict=False):
        chosen = step.get(tid)
        tok = _token(chosen, tid)
        tokens.append(tok)
        lps.append(chosen.logprob if chosen is not None else None)
        tops.append({_token(e, i): e.logprob for i, e in _ranked(step)[:top]} if top else None)
        offsets.append(pos)
        pos += len(tok)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops,
            "text_offset": offsets}


def usage(prompt: int, completion: int, spec: list[dict[str, int]] | None = None) -> dict:
    """``spec``: the engine's per-sequence speculative counts (when the server runs with
    per-request spec-decode metrics), summed over the request's sequences."""
    out: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                           "total_tokens": prompt + completion}
    if spec:
        drafted = sum(s["num_draft_tokens"] for s in spec)
        accepted = sum(s["num_accepted_tokens"] for s in spec)
        steps = sum(s["num_spec_steps"] for s in spec)
        out["speculative_decoding"] = {
            "num_draft_tokens": drafted,
            "num_accepted_tokens": accepted,
            "num_spec_steps": steps,
            # tokens per target forward pass, the bonus token included (vLLM's definition)
            "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
            "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
        }
    return out


class ChatFormatter:
    object_full = "chat.completion"

    def __init__(self, rid: str, model: str, top_logprobs: int, want_logprobs: bool,
                 tool_plan: ToolPlan | None = None):
        self.rid, self.model = rid, model
        self.plan = tool_plan
        self.created = int(time.time())
        self.top, self.want_logprobs = top_logprobs, want_logprobs
        self.sent_role: set[int] = set()

    def _chunk(self, choices: list[dict], usage_: dict | None = None) -> dict:
        out = {"id": self.rid, "object": "chat.completion.chunk", "created": self.created,
               "model": self.model, "choices": choices}
        if usage_ is not None:
            out["usage"] = usage_
        return out

    def chunk(self, d: Delta) -> dict:
        delta: dict[str, Any] = {}
        if d.index not in self.sent_role:
            self.sent_role.add(d.index)
            delta["role"] = "assistant"
        finish = d.finish_reason
        if self.plan is not None:
            fields, finish = self.plan.delta(d.index, d.text, d.finish_reason)
            delta.update(fields)
        elif d.text or "role" in delta:
            delta["content"] = d.text
        choice = {"index": d.index, "delta": delta,
                  "logprobs": chat_logprobs(d, self.top) if self.want_logprobs else None,
                  "finish_reason": finish}
        return self._chunk([choice])

    def usage_chunk(self, u: dict) -> dict:
        return self._chunk([], u)

    def full(self, finals: dict[int, Delta], u: dict) -> dict:
        choices = []
        for i, d in sorted(finals.items()):
            msg, finish = ({"role": "assistant", "content": d.text, "refusal": None},
                           d.finish_reason)
            if self.plan is not None:
                msg, finish = self.plan.message(i, d.text, d.finish_reason)
            choices.append({
                "index": i, "message": msg,
                "logprobs": chat_logprobs(d, self.top) if self.want_logprobs else None,
                "finish_reason": finish,
            })
        return {"id": self.rid, "object": self.object_full, "created": self.created,
                "model": self.model, "choices": choices, "usage": u,
                "system_fingerprint": None}


class CompletionFormatter:
    def __init__(self, rid: str, model: str, logprobs: int | None, echo_texts: list[str] | None,
                 n: int):
        self.rid, self.model = rid, model
        self.created = int(time.time())
        self.logprobs = logprobs
        self.echo, self.n = echo_texts, n
        self.offsets: dict[int, int] = {}
        self.echoed: set[int] = set()

    def _text(self, d: Delta) -> str:
        if self.echo is not None and d.index not in self.echoed:
            self.echoed.add(d.index)
            return self.echo[d.index // self.n] + d.text
        return d.text

    def _choice(self, d: Delta) -> dict:
        text = self._text(d)
        off = self.offsets.get(d.index, 0)
        lp = completion_logprobs(d, self.logprobs or 0, off) if self.logprobs is not None else None
        self.offsets[d.index] = off + len(text)
        return {"index": d.index, "text": text, "logprobs": lp, "finish_reason": d.finish_reason}

    def _obj(self, choices: list[dict], usage_: dict | None = None) -> dict:
        out = {"id": self.rid, "object": "text_completion", "created": self.created,
               "model": self.model, "choices": choices}
        if usage_ is not None:
            out["usage"] = usage_
        return out

    def chunk(self, d: Delta) -> dict:
        return self._obj([self._choice(d)])

    def usage_chunk(self, u: dict) -> dict:
        return self._obj([], u)

    def full(self, finals: dict[int, Delta], u: dict) -> dict:
        return {**self._obj([self._choice(d) for _, d in sorted(finals.items())], u),
                "system_fingerprint": None}
