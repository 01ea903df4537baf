"""Read, inside a worker, how the drafter is set up to run: runner, resolved
cudagraph mode, capture sizes, dispatcher keys / captured graphs, and whether the
drafter module is torch-compiled (without which PIECEWISE silently means eager)."""

from __future__ import annotations

from typing import Any


def _mode(m: Any) -> str | None:
    return None if m is None else getattr(m, "name", str(m))


def drafter_is_compiled(model: Any) -> bool | None:
    """Any active ``@support_torch_compile`` submodule (vLLM 0.32's
    ``has_compiled_submodule``, re-implemented because 0.26 lacks it)."""
    if model is None:
        return None
    try:
        from vllm.compilation.wrapper import TorchCompileWithNoGuardsWrapper
    except Exception:
        return None
    return any(
        isinstance(m, TorchCompileWithNoGuardsWrapper) and not getattr(m, "do_not_compile", True)
        for m in model.modules()
    )


def _manager(mgr: Any) -> dict[str, Any] | None:
    if mgr is None:
        return None
    return {
        "cudagraph_mode": _mode(getattr(mgr, "cudagraph_mode", None)),
        "graphs": len(getattr(mgr, "graphs", {}) or {}),
        "use_breakable_cg": bool(getattr(mgr, "use_breakable_cg", False)),
    }


def graph_plan(runner: Any) -> dict[str, Any]:
    cfg = runner.vllm_config
    cc = cfg.compilation_config
    spec = cfg.speculative_config
    plan: dict[str, Any] = {
        "runner_class": f"{type(runner).__module__}.{type(runner).__name__}",
        "runner": "v2" if hasattr(runner, "speculator") else "v1",
        "compilation_mode": _mode(cc.mode),
        "cudagraph_mode": _mode(cc.cudagraph_mode),
        "cudagraph_capture_sizes": list(cc.cudagraph_capture_sizes or []),
        "max_cudagraph_capture_size": cc.max_cudagraph_capture_size,
        "max_num_seqs": cfg.scheduler_config.max_num_seqs,
        "num_speculative_tokens": spec.num_speculative_tokens if spec else 0,
        "spec_method": spec.method if spec else None,
        "spec_enforce_eager": bool(getattr(spec, "enforce_eager", False)) if spec else None,
        "enforce_eager": bool(cfg.model_config.enforce_eager),
    }
    if hasattr(runner, "speculator"):
        sp = runner.speculator
        plan["drafter_class"] = type(sp).__name__ if sp is not None else None
        model = getattr(sp, "model", None)
        plan["drafter_model_class"] = type(model).__name__ if model is not None else None
        plan["drafter_compiled"] = drafter_is_compiled(model)
        plan["draft_prefill_manager"] = _manager(getattr(sp, "prefill_cudagraph_manager", None))
        plan["draft_decode_manager"] = _manager(getattr(sp, "decode_cudagraph_manager", None))
    else:
        dr = getattr(runner, "drafter", None)
        plan["drafter_class"] = type(dr).__name__ if dr is not None else None
        model = getattr(dr, "model", None)
        plan["drafter_model_class"] = type(model).__name__ if model is not None else None
        plan["drafter_compiled"] = drafter_is_compiled(model)
        disp = getattr(dr, "cudagraph_dispatcher", None)
        if disp is not None:
            keys = getattr(disp, "cudagraph_keys", {}) or {}
            plan["drafter_dispatcher"] = {
                "cudagraph_mode": _mode(getattr(disp, "cudagraph_mode", None)),
                "keys_initialized": bool(getattr(disp, "keys_initialized", False)),
                "num_keys": sum(len(v) for v in keys.values()) if isinstance(keys, dict) else 0,
            }
    from engine_ext.probes.ledger import LEDGER

    plan["captures"] = dict(LEDGER.captures)
    return plan
