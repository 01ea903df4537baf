"""torch.compile'd subclasses of drafter classes vLLM ships without
``@support_torch_compile``.

Without compilation no PIECEWISE wrapper exists inside the drafter, so the dispatcher's
PIECEWISE decision silently runs eager (the failure mode of vLLM PR #25109's review).
Each subclass keeps the original class in its MRO (vLLM asserts ``isinstance`` on
drafters) and only adds the decorator, mirroring how ``DeepSeekMTP`` is declared.
Only single-layer MTP heads are listed: ``TorchCompileWithNoGuardsWrapper`` drops
guards, so Python control flow on ``spec_step_idx`` would be frozen at trace time.
"""

from __future__ import annotations

import importlib
import logging

log = logging.getLogger("engine_ext.compiled_drafters")

# registry architecture -> (module, class) in vllm.model_executor.models
UNCOMPILED_MTP_DRAFTERS: dict[str, tuple[str, str]] = {
    "Glm4MoeMTPModel": ("vllm.model_executor.models.glm4_moe_mtp", "Glm4MoeMTP"),
    "MiMoMTPModel": ("vllm.model_executor.models.mimo_mtp", "MiMoMTP"),
    "ErnieMTPModel": ("vllm.model_executor.models.ernie_mtp", "ErnieMTP"),
}

# Same dynamic dims as vLLM's DeepSeekMTP (the compiled sibling these mirror).
DYNAMIC_ARG_DIMS = {"input_ids": 0, "positions": -1, "hidden_states": 0, "inputs_embeds": 0}


def compiled_subclass(base: type) -> type:
    from vllm.compilation.decorators import support_torch_compile

    cls = type(f"Compiled{base.__name__}", (base,), {"__module__": __name__})
    return support_torch_compile(dynamic_arg_dims=DYNAMIC_ARG_DIMS)(cls)


def is_compiled_class(cls: type) -> bool:
    """Whether ``@support_torch_compile`` was applied to ``cls`` or an ancestor."""
    from vllm.compilation.wrapper import TorchCompileWithNoGuardsWrapper

    return issubclass(cls, TorchCompileWithNoGuardsWrapper)


def register_compiled_drafters() -> dict[str, str]:
    from vllm import ModelRegistry

    registered: dict[str, str] = {}
    for arch, (mod_name, cls_name) in UNCOMPILED_MTP_DRAFTERS.items():
        try:
            base = getattr(importlib.import_module(mod_name), cls_name)
        except Exception as exc:  # model not in this vLLM build
            log.debug("skip %s: %s", arch, exc)
            continue
        if is_compiled_class(base):
            continue  # upstream fixed it; keep vLLM's own class
        cls = compiled_subclass(base)
        globals()[cls.__name__] = cls  # importable by "module:Class" in every process
        ModelRegistry.register_model(arch, f"{__name__}:{cls.__name__}")
        registered[arch] = cls.__name__
    if registered:
        log.info("registered compiled drafters: %s", registered)
    return registered


def __getattr__(name: str):
    # Worker processes resolve "engine_ext.compiled_drafters:CompiledX" lazily.
    for _arch, (mod_name, cls_name) in UNCOMPILED_MTP_DRAFTERS.items():
        if name == f"Compiled{cls_name}":
            cls = compiled_subclass(getattr(importlib.import_module(mod_name), cls_name))
            globals()[name] = cls
            return cls
    raise AttributeError(name)
