"""Read, inside a worker, how the drafter is set up to run: runner, resolved
cudagraph mode, capture sizes, dispatcher keys / captured graphs, and whether the
drafter module is torch-compiled (without which PIECEWISE silently means eager).
Every vLLM attribute name comes from the per-version internals table."""

from __future__ import annotations

import importlib
from typing import Any

from engine_ext.internals.table import InternalsTable


def _table() -> InternalsTable:
    from engine_ext.internals import table_for

    return table_for()


def _mode(m: Any) -> str | None:
    return None if m is None else getattr(m, "name", str(m))


def runner_kind(runner: Any, table: InternalsTable | None = None) -> str:
    """``v2`` or ``v1``: Model Runner V2 keeps its drafter in ``speculator``, V1 in
    ``drafter`` (the one runner detection; the worker extension uses it too)."""
    return "v2" if hasattr(runner, (table or _table()).v2_drafter_attr) else "v1"


def drafter_of(runner: Any, table: InternalsTable | None = None) -> Any:
    """The runner's proposer (V1) or speculator (V2), or None without speculation."""
    table = table or _table()
    attr = table.v2_drafter_attr if runner_kind(runner, table) == "v2" else table.v1_drafter_attr
    return getattr(runner, attr, None)


def drafter_is_compiled(model: Any, table: InternalsTable | None = None) -> bool | None:
    """Any active ``@support_torch_compile`` submodule (vLLM 0.32's
    ``has_compiled_submodule``, re-implemented because 0.26 lacks it)."""
    if model is None:
        return None
    table = table or _table()
    try:
        mod, name = table.compile_wrapper_class
        wrapper = getattr(importlib.import_module(mod), name)
    except Exception:
        return None
    return any(
        isinstance(m, wrapper) and not getattr(m, table.compile_opt_out_attr, True)
        for m in model.modules()
    )


def _fields(obj: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {n: getattr(obj, n, None) for n in names}


def graph_plan(runner: Any) -> dict[str, Any]:
    from engine_ext.compiled_drafters import plan_fields

    table = _table()
    cfg = getattr(runner, table.runner_config_attr)
    cc = cfg.compilation_config
    spec = cfg.speculative_config
    plan: dict[str, Any] = {
        "runner_class": f"{type(runner).__module__}.{type(runner).__name__}",
        "runner": runner_kind(runner, table),
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
    dr = drafter_of(runner, table)
    model = getattr(dr, table.drafter_model_attr, None)
    plan["drafter_class"] = type(dr).__name__ if dr is not None else None
    plan["drafter_model_class"] = type(model).__name__ if model is not None else None
    plan["drafter_compiled"] = drafter_is_compiled(model, table)
    plan.update(plan_fields(model, plan["drafter_compiled"]))
    if plan["runner"] == "v2":
        prefill, decode = (getattr(dr, a, None) for a in table.v2_draft_manager_attrs)
        for key, mgr in (("draft_prefill_manager", prefill), ("draft_decode_manager", decode)):
            f = _fields(mgr, table.v2_manager_fields) if mgr is not None else None
            plan[key] = f and {"cudagraph_mode": _mode(f["cudagraph_mode"]),
                               "graphs": len(f["graphs"] or {}),
                               "use_breakable_cg": bool(f["use_breakable_cg"])}
    else:
        disp = getattr(dr, table.v1_drafter_dispatcher_attr, None)
        if disp is not None:
            f = _fields(disp, table.dispatcher_fields)
            keys = f["cudagraph_keys"] or {}
            plan["drafter_dispatcher"] = {
                "cudagraph_mode": _mode(f["cudagraph_mode"]),
                "keys_initialized": bool(f["keys_initialized"]),
                "num_keys": sum(len(v) for v in keys.values()) if isinstance(keys, dict) else 0,
            }
    from engine_ext.probes.ledger import LEDGER

    plan["captures"] = dict(LEDGER.captures)
    return plan
