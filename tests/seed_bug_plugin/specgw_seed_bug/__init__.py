"""Test-only vLLM general plugin reproducing the seed bug (vLLM PR #25109).

With ``SPECGW_SEED_BUG=1`` every EAGLE-3 Llama drafter architecture is registered, through
``ModelRegistry``, to :class:`specgw_seed_bug.eagle3.SeedBugEagle3LlamaForCausalLM`, whose
inner model class carries no ``@support_torch_compile``: the drafter vLLM shipped before
PR #25109. Without the variable the plugin does nothing, so installing it is harmless.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("specgw_seed_bug")

ENV = "SPECGW_SEED_BUG"
CLASS_PATH = "specgw_seed_bug.eagle3:SeedBugEagle3LlamaForCausalLM"
# The registry entry vLLM 0.26-0.32 gives every EAGLE-3 Llama drafter architecture.
_VLLM_ENTRY = ("llama_eagle3", "Eagle3LlamaForCausalLM")


def eagle3_llama_archs() -> list[str]:
    """Drafter architectures vLLM maps to its EAGLE-3 Llama class (read from its table,
    so an alias added in a later release is covered too)."""
    from vllm.model_executor.models import registry

    return sorted(a for a, entry in registry._SPECULATIVE_DECODING_MODELS.items()
                  if tuple(entry) == _VLLM_ENTRY)


def register() -> list[str]:
    if os.environ.get(ENV) != "1":
        return []
    from vllm import ModelRegistry

    archs = eagle3_llama_archs()
    if not archs:
        raise RuntimeError(f"{ENV}=1 but this vLLM has no {_VLLM_ENTRY} drafter entry")
    for arch in archs:
        # A "module:Class" string: the class is built lazily where the model loads.
        ModelRegistry.register_model(arch, CLASS_PATH)
    log.warning("%s=1: EAGLE-3 Llama drafters %s load the uncompiled %s", ENV, archs,
                CLASS_PATH)
    return archs
