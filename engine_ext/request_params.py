"""The vLLM side of the gateway's OpenAI features, behind plain-Python signatures.

The gateway (which never imports vLLM) describes a request as plain keyword arguments;
these functions turn them into vLLM's public request types and read vLLM's answers back
into plain values:

* :func:`build_sampling_params`: kwargs -> ``SamplingParams``; a ``structured_outputs``
  entry (``StructuredOutputsParams`` kwargs) becomes the vLLM object.
* :func:`default_sampling_params`: the model's ``generation_config.json`` defaults as
  ``vllm serve`` applies them (``ModelConfig.get_diff_sampling_param``).
* :func:`spec_decode_counts`: one finished sequence's per-request speculative counts
  (``CompletionOutput.spec_decode_metrics``, on with ``per_request_spec_decode_metrics``).
* :func:`tool_call_extractor`: a vLLM tool-call parser (``ToolParserManager``) as a
  function ``(text, tools) -> (content, [(name, arguments)])``.
"""

from __future__ import annotations

import logging
from typing import Any

from engine_ext.internals import table_for

log = logging.getLogger("engine_ext.request_params")

# SamplingParams fields a generation_config.json may set (``max_new_tokens`` arrives
# renamed to ``max_tokens``, as vLLM's own server maps it).
DEFAULTABLE = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty",
               "presence_penalty", "frequency_penalty", "max_tokens")


class EngineRequestError(ValueError):
    """vLLM refused the request as the client's fault (its ``VLLMClientError`` family,
    which does not derive from ValueError): a 400, with the parameter when vLLM names one.
    Unconverted, ``min_tokens > max_tokens`` reached the HTTP layer as a 500."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


def client_error(exc: BaseException) -> EngineRequestError | None:
    """``exc`` as an :class:`EngineRequestError` if vLLM blames the request, else None."""
    if isinstance(exc, EngineRequestError):
        return exc
    t = table_for()
    # None (0.26): vLLM's validation errors are ValueErrors already.
    client = t.resolve(*t.client_error_class) if t.client_error_class else None
    if client is not None and isinstance(exc, client):
        msg = exc.args[0] if exc.args else str(exc)
        return EngineRequestError(str(msg), getattr(exc, "parameter", None))
    return None


def structured_outputs_config():
    """Compact JSON for every constrained request: with free whitespace between tokens a
    small model emits newlines until max_tokens (seen on the bundled pair: ``{`` then 59
    newlines). vLLM's xgrammar backend reads this engine-wide, not per request."""
    from vllm.config import StructuredOutputsConfig

    return StructuredOutputsConfig(backend="xgrammar", disable_any_whitespace=True)


def build_sampling_params(kwargs: dict[str, Any]):
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

    kwargs = dict(kwargs)
    kind = kwargs.get("output_kind")
    if isinstance(kind, str):  # "delta" / "final_only" from the gateway
        kwargs["output_kind"] = RequestOutputKind[kind.upper()]
    try:
        so = kwargs.pop("structured_outputs", None)
        if so is not None:
            kwargs["structured_outputs"] = StructuredOutputsParams(**so)
        return SamplingParams(**kwargs)
    except Exception as exc:
        err = client_error(exc)
        if err is None:
            raise
        raise err from exc


def default_sampling_params(llm) -> dict[str, Any]:
    """``{}`` when the engine runs with ``generation_config="vllm"``."""
    t = table_for()
    diff = dict(getattr(llm.model_config, t.sampling_defaults_method[2])())
    if "max_new_tokens" in diff:
        diff["max_tokens"] = diff.pop("max_new_tokens")
    return {k: v for k, v in diff.items() if k in DEFAULTABLE}


def model_vocab_size(llm) -> int:
    return int(getattr(llm.model_config, table_for().vocab_size_method[2])())


def spec_decode_counts(completion_output) -> dict[str, int] | None:
    attr = table_for().spec_metrics_output_attr
    m = getattr(completion_output, attr, None) if attr else None
    if m is None:
        return None
    d = m.to_dict()
    return {"num_draft_tokens": d["num_draft_tokens"],
            "num_accepted_tokens": d["num_accepted_draft_tokens"],
            "num_spec_steps": d["num_spec_steps"]}


def check_tool_call_parser(name: str) -> None:
    """Fail at start (not at the first request) on an unknown parser name."""
    t = table_for()
    manager = t.resolve(*t.tool_parser_manager)
    try:
        manager.get_tool_parser(name)
    except KeyError:
        known = sorted({*manager.tool_parsers, *manager.lazy_parsers})
        raise ValueError(f"unknown --tool-call-parser {name!r}; known: {', '.join(known)}"
                         ) from None


def tool_call_extractor(name: str, tokenizer):
    t = table_for()
    chat_request = t.resolve(*t.chat_request_class)
    parser_cls = t.resolve(*t.tool_parser_manager).get_tool_parser(name)

    def extract(text: str, tools: list[dict]) -> tuple[str | None, list[tuple[str, str]]]:
        request = chat_request(model="-", messages=[], tools=tools)
        parser = parser_cls(tokenizer, request.tools)  # stateful: one per response
        info = parser.extract_tool_calls(text, request)
        if not info.tools_called:
            return info.content if info.content is not None else text, []
        return info.content, [(c.function.name, c.function.arguments) for c in info.tool_calls]

    return extract
