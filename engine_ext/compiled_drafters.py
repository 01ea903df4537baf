"""torch.compile'd subclasses for drafter classes that reach the engine without
``@support_torch_compile``.

Without compilation no PIECEWISE wrapper exists inside the drafter, so the dispatcher's
PIECEWISE decision silently runs eager (vLLM PR #25109's seed bug). vLLM has shipped
drafters that way more than once (EAGLE-3 Llama before #25109; GLM, MiMo, ERNIE, HY MTP
heads), so no list of class names is kept here: every drafter class vLLM resolves is
checked when it is resolved, whoever registered it and in whichever plugin order.

* Resolution is the hook: ``_ModelRegistry.resolve_model_cls`` is wrapped (names in the
  per-version internals table). A class is a drafter when it is resolved for a draft
  model config (``runner_type == "draft"``) or under one of vLLM's speculative-decoding
  architectures.
* A drafter is already compiled when its class, or a module class its ``__init__``
  builds (EAGLE heads decorate the inner ``...Model``), is a
  ``TorchCompileWithNoGuardsWrapper``: then vLLM's class is kept.
* Otherwise a subclass is returned that adds the decorator to the class vLLM resolved
  (the MTP heads' layout, e.g. ``DeepSeekMTP``). For an EAGLE head whose top ``forward``
  only calls its inner model, Dynamo traces through that call, so the graph (split at
  attention for PIECEWISE) is the one the decorated inner model would give. The subclass
  keeps the original in its MRO (vLLM asserts ``isinstance`` on drafters) and does not
  change ``forward``.
* Not the EAGLE/MTP shape (no ``forward(positions, hidden_states, ...)``: DFlash, DSpark,
  Medusa, ...): left alone and recorded; several of them build a compiled inner model
  through a helper the static scan cannot follow. Our compiled subclass also checks,
  once built, that no inner module is compiled already, and opts out if one is.
* Unsafe: ``TorchCompileWithNoGuardsWrapper`` drops guards, so Python control flow on
  ``spec_step_idx`` is frozen at trace time. A drafter whose ``forward`` takes
  ``spec_step_idx`` and whose checkpoint has more than one MTP layer (or an unknown
  number) is left uncompiled and its config gets ``speculative_config.enforce_eager``,
  so runner V1 dispatches it NONE (eager by decision, counted as such by the probes).
  Runner V2 ignores that flag: there the self-check reports the reason.

What was decided in this process is kept in :data:`DECISIONS` for the worker's graph plan.
``SPECGW_COMPILED_DRAFTERS=0`` leaves vLLM's classes alone.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import types
from dataclasses import asdict, dataclass
from typing import Any

from engine_ext.internals.table import InternalsTable

log = logging.getLogger("engine_ext.compiled_drafters")

_MARK = "__specgw_compiled_drafters__"
# Set on our subclasses: the class vLLM resolved before we compiled it.
COMPILED_FROM = "__specgw_compiled_from__"

# Same dynamic dims as vLLM's compiled drafters (DeepSeekMTP, llama_eagle3.LlamaModel);
# positions on -1 so M-RoPE's (3, n) positions work too. Filtered by forward's params.
DYNAMIC_ARG_DIMS = {"input_ids": 0, "positions": -1, "hidden_states": 0,
                    "inputs_embeds": 0, "input_embeds": 0}
# Config fields vLLM's MTP heads read their layer count from.
MTP_LAYER_FIELDS = ("num_nextn_predict_layers", "num_mtp_layers", "n_predict")


@dataclass(frozen=True)
class Decision:
    arch: str
    vllm_class: str
    action: str  # "kept_compiled" | "compiled" | "eager_unsafe" | "left_alone"
    compiled_class: str | None = None
    unsafe_reason: str | None = None


# One per drafter resolution in this process (in a worker: the drafter it builds).
DECISIONS: list[Decision] = []
_SUBCLASSES: dict[type, type] = {}


def _table() -> InternalsTable:
    from engine_ext.internals import table_for

    return table_for()


def _wrapper_cls(table: InternalsTable) -> type:
    mod, name = table.compile_wrapper_class
    return getattr(importlib.import_module(mod), name)


def is_compiled_class(cls: type, table: InternalsTable | None = None) -> bool:
    """Whether ``@support_torch_compile`` was applied to ``cls`` or an ancestor."""
    return issubclass(cls, _wrapper_cls(table or _table()))


def _inits_run(cls: type) -> list[types.FunctionType]:
    """The ``__init__`` functions constructing ``cls`` runs: its own, then the next one
    up the MRO for as long as each calls ``super()``."""
    out: list[types.FunctionType] = []
    mro = cls.__mro__
    i = 0
    while i < len(mro):
        owner = next((k for k in mro[i:] if "__init__" in vars(k)), None)
        if owner is None:
            break
        init = vars(owner)["__init__"]
        if not isinstance(init, types.FunctionType):
            break
        out.append(init)
        if "super" not in init.__code__.co_names:
            break
        i = mro.index(owner) + 1
    return out


def _module_classes_built(cls: type) -> list[type]:
    """nn.Module classes named (as module globals) in the ``__init__`` code that
    constructing ``cls`` runs: the inner modules it builds."""
    import torch.nn as nn

    found: list[type] = []
    for init in _inits_run(cls):
        codes = [init.__code__]
        while codes:
            code = codes.pop()
            codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
            for name in code.co_names:
                obj = init.__globals__.get(name)
                if (isinstance(obj, type) and issubclass(obj, nn.Module)
                        and obj not in found and obj not in cls.__mro__):
                    found.append(obj)
    return found


def compiled_part(cls: type, table: InternalsTable | None = None, depth: int = 2) -> str | None:
    """Name of the compiled class inside a drafter: ``cls`` itself or a module class its
    ``__init__`` builds (up to ``depth`` levels down), else None."""
    table = table or _table()
    if is_compiled_class(cls, table):
        return cls.__qualname__
    if depth == 0:
        return None
    for inner in _module_classes_built(cls):
        hit = compiled_part(inner, table, depth - 1)
        if hit:
            return hit
    return None


def compile_unsafe_reason(cls: type, hf_config: Any) -> str | None:
    """Why compiling ``cls`` without guards would be wrong for this checkpoint: Python
    control flow on ``spec_step_idx`` across several MTP layers (frozen at trace time)."""
    params = inspect.signature(cls.forward).parameters
    if "spec_step_idx" not in params:
        return None
    for field in MTP_LAYER_FIELDS:
        n = getattr(hf_config, field, None)
        if isinstance(n, int):
            if n > 1:
                return (f"{cls.__name__} selects one of {n} MTP layers by spec_step_idx "
                        f"({field}); a guard-free compiled graph would freeze the choice")
            return None
    return (f"{cls.__name__}.forward takes spec_step_idx and the config names no MTP layer "
            f"count ({'/'.join(MTP_LAYER_FIELDS)})")


def not_a_drafter_forward(cls: type) -> str | None:
    """Drafters whose forward is not the EAGLE/MTP shape (DFlash, Medusa, ...) are not
    compiled blindly: several build a compiled inner model through a helper the static
    scan cannot follow, and the plan reports them only if really uncompiled."""
    if not callable(getattr(cls, "forward", None)):
        return f"{cls.__name__} has no forward() for @support_torch_compile to wrap"
    params = inspect.signature(cls.forward).parameters
    if not {"positions", "hidden_states"} <= set(params):
        return (f"{cls.__name__}.forward{tuple(params)[1:]} is not an EAGLE/MTP drafter "
                "forward (positions, hidden_states); not compiled by specgw")
    return None


def compiled_subclass(base: type, table: InternalsTable | None = None) -> type:
    """``base`` plus ``@support_torch_compile`` (one subclass per base, per process)."""
    if base in _SUBCLASSES:
        return _SUBCLASSES[base]
    table = table or _table()
    mod, name = table.compile_decorator
    support_torch_compile = getattr(importlib.import_module(mod), name)
    params = inspect.signature(base.forward).parameters
    dims = {k: v for k, v in DYNAMIC_ARG_DIMS.items() if k in params}
    cls = type(f"Compiled{base.__name__}", (base,),
               {"__module__": __name__, COMPILED_FROM: f"{base.__module__}.{base.__qualname__}"})
    cls = support_torch_compile(dynamic_arg_dims=dims)(cls)
    decorated_init = cls.__init__
    wrapper = _wrapper_cls(table)
    opt_out = table.compile_opt_out_attr

    @functools.wraps(decorated_init)
    def __init__(self, *args, **kwargs):
        decorated_init(self, *args, **kwargs)
        # The static scan cannot see inner modules built through helpers
        # (``self.model_cls(...)``): if vLLM compiled one, never compile twice.
        if not getattr(self, opt_out, True) and any(
                isinstance(m, wrapper) and not getattr(m, opt_out, True)
                for m in self.modules() if m is not self):
            setattr(self, opt_out, True)
            DECISIONS.append(Decision("?", cls.__dict__[COMPILED_FROM], "kept_compiled"))

    cls.__init__ = __init__
    _SUBCLASSES[base] = cls
    globals().setdefault(cls.__name__, cls)  # importable by "module:Class" for tools
    return cls


def _force_drafter_eager(table: InternalsTable) -> bool:
    """``speculative_config.enforce_eager`` on the config this process is loading a
    model under (a worker's; runner V1 reads it when it sets up the drafter's
    dispatcher keys, after the model is built). False where no config is current."""
    mod, name = table.current_config_fn
    cfg = getattr(importlib.import_module(mod), name)()
    spec = getattr(cfg, "speculative_config", None)
    if spec is None:
        return False
    spec.enforce_eager = True
    return True


def repair(arch: str, cls: type, hf_config: Any, table: InternalsTable | None = None) -> type:
    """The class to build for drafter ``cls`` (resolved as ``arch``); records why."""
    table = table or _table()
    name = f"{cls.__module__}.{cls.__qualname__}"
    if compiled_part(cls, table):
        DECISIONS.append(Decision(arch, name, "kept_compiled"))
        return cls
    other = not_a_drafter_forward(cls)
    if other:
        DECISIONS.append(Decision(arch, name, "left_alone", unsafe_reason=other))
        return cls
    reason = compile_unsafe_reason(cls, hf_config)
    if reason:
        # Read by runner V1 when it sets up the drafter's dispatcher, after the model
        # is built: the drafter is then dispatched NONE (eager by decision).
        forced = _force_drafter_eager(table)
        DECISIONS.append(Decision(arch, name, "eager_unsafe", unsafe_reason=reason))
        log.warning("drafter %s is not torch-compiled and compiling it is unsafe: %s; "
                    "dispatched eager on purpose%s", name, reason,
                    "" if forced else " (could not set speculative_config.enforce_eager)")
        return cls
    out = compiled_subclass(cls, table)
    DECISIONS.append(Decision(arch, name, "compiled", compiled_class=out.__name__))
    log.info("drafter %s (%s) has no @support_torch_compile: building %s", name, arch,
             out.__name__)
    return out


def install(table: InternalsTable | None = None) -> bool:
    """Wrap vLLM's model-class resolution once per process (from the general plugin)."""
    table = table or _table()
    reg_mod = importlib.import_module(table.registry_module)
    reg_cls = getattr(reg_mod, table.registry_class)
    drafter_archs = frozenset(getattr(reg_mod, table.drafter_models_table))
    orig = getattr(reg_cls, table.registry_resolve_method)
    if getattr(orig, _MARK, False):
        return True

    def resolve_model_cls(self, architectures, model_config, *args, **kwargs):
        cls, arch = orig(self, architectures, model_config, *args, **kwargs)
        if arch in drafter_archs or getattr(model_config, "runner_type", None) == "draft":
            cls = repair(arch, cls, getattr(model_config, "hf_config", None), table)
        return cls, arch

    resolve_model_cls.__wrapped__ = orig  # type: ignore[attr-defined]
    setattr(resolve_model_cls, _MARK, True)
    setattr(reg_cls, table.registry_resolve_method, resolve_model_cls)
    return True


def plan_fields(model: Any, compiled: bool | None) -> dict[str, Any]:
    """``drafter_compiled_by_specgw`` / ``drafter_compile_unsafe`` for the graph plan of
    a worker whose drafter module is ``model`` (``compiled``: it has an active compiled
    submodule)."""
    unsafe = [d.unsafe_reason for d in DECISIONS if d.action in ("eager_unsafe", "left_alone")]
    return {
        "drafter_compiled_by_specgw": bool(compiled) and hasattr(type(model), COMPILED_FROM)
        and not getattr(model, _table().compile_opt_out_attr, True),
        # Only a drafter that really runs uncompiled has a reason to report.
        "drafter_compile_unsafe": unsafe[-1] if unsafe and compiled is False else None,
        "drafter_compile_decisions": [asdict(d) for d in DECISIONS],
    }
