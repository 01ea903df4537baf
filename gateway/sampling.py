"""OpenAI request -> ``SamplingParams`` keyword arguments (and the prompt-length check).

A plain dict: the engine (``SpecEngine.build_sampling_params``) makes vLLM's type of it,
so this module, like the rest of the gateway, never imports vLLM.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import invalid
from gateway.protocol import ChatCompletionRequest, CompletionRequest


def reject_unsupported(req: ChatCompletionRequest | CompletionRequest, speculative: bool) -> None:
    """Parameters we would otherwise ignore silently are refused with a 400."""
    for name, value in (req.model_extra or {}).items():
        inert = req.UNHONOURED.get(name)
        if inert is not None and value not in inert:
            raise invalid(f"{name} is not supported by this server", param=name,
                          code="unsupported_parameter")
    if req.logit_bias:
        raise invalid("logit_bias is not supported with speculative decoding",
                      param="logit_bias", code="unsupported_parameter")
    if speculative and req.min_p:
        raise invalid("min_p is not supported with speculative decoding",
                      param="min_p", code="unsupported_parameter")
    if isinstance(req, CompletionRequest):
        if req.suffix:
            raise invalid("suffix is not supported", param="suffix",
                          code="unsupported_parameter")
        if req.best_of is not None and req.best_of != req.n:
            raise invalid("best_of must equal n", param="best_of",
                          code="unsupported_parameter")


def sampling_kwargs(
    req: ChatCompletionRequest | CompletionRequest,
    prompt_len: int,
    max_model_len: int,
    stream: bool,
    prompt_param: str,
    defaults: dict[str, Any] | None = None,
    structured: dict | None = None,
) -> dict[str, Any]:
    """``defaults``: the model's generation-config sampling defaults (request wins);
    ``structured``: ``StructuredOutputsParams`` kwargs constraining the output."""
    defaults = defaults or {}
    room = max_model_len - prompt_len
    limit = req.output_limit
    if room <= 0 or (limit is not None and limit > room):
        asked = f" + {limit} output tokens" if limit is not None else ""
        raise invalid(
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_len} prompt tokens{asked}. Please reduce the length of the "
            "messages or the max tokens.",
            param=prompt_param if limit is None or room <= 0 else "max_tokens",
            code="context_length_exceeded",
        )
    if isinstance(req, ChatCompletionRequest):
        logprobs = (req.top_logprobs or 0) if req.logprobs else None
    else:
        logprobs = req.logprobs
    kwargs: dict[str, Any] = dict(
        n=req.n,
        max_tokens=limit if limit is not None else min(room, defaults.get("max_tokens", room)),
        stop=req.stop_list() or None,
        seed=req.seed,
        logprobs=logprobs,
        ignore_eos=req.ignore_eos,
        min_tokens=req.min_tokens,
        stop_token_ids=req.stop_token_ids,
        include_stop_str_in_output=req.include_stop_str_in_output,
        skip_special_tokens=req.skip_special_tokens,
        spaces_between_special_tokens=req.spaces_between_special_tokens,
        output_kind="delta" if stream else "final_only",
    )
    if structured is not None:
        kwargs["structured_outputs"] = structured
    optional = {
        "temperature": req.temperature,
        "top_p": req.top_p,
        "top_k": req.top_k,
        "min_p": req.min_p,
        "presence_penalty": req.presence_penalty,
        "frequency_penalty": req.frequency_penalty,
        "repetition_penalty": req.repetition_penalty,
    }
    kwargs.update({k: v if v is not None else defaults[k] for k, v in optional.items()
                   if v is not None or k in defaults})
    return kwargs
