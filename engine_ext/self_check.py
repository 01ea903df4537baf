"""Start-up self-check: ask every worker how the drafter is set up, predict what it will
run as in steady decode, and warn loudly (log + metric) when that is eager."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from engine_ext.graph_config import predict_drafter_modes

if TYPE_CHECKING:
    from engine_ext.engine import SpecEngine

log = logging.getLogger("engine_ext.self_check")


PHASES = ("first_pass", "first_pass_mixed", "draft_step")


def evaluate(plan: dict[str, Any], device: str, rules: Any = None) -> dict[str, Any]:
    """Predictions and warnings for one rank's plan (pure; unit-tested)."""
    k = plan.get("num_speculative_tokens") or 0
    report: dict[str, Any] = {"expected": {}, "warnings": [], "notes": []}
    if not k:
        report["notes"].append("speculative decoding off")
        return report
    manager = plan.get("draft_prefill_manager") or {}
    for label, batch in (("1", 1), ("max", int(plan.get("max_num_seqs") or 1))):
        modes = predict_drafter_modes(
            runner=plan.get("runner", "v1"),
            cudagraph_mode=plan.get("cudagraph_mode"),
            max_capture_size=plan.get("max_cudagraph_capture_size"),
            k=k,
            batch=batch,
            drafter_compiled=plan.get("drafter_compiled"),
            spec_enforce_eager=bool(plan.get("spec_enforce_eager")),
            breakable_graphs=bool(manager.get("use_breakable_cg")),
            rules=rules,
        )
        report["expected"][label] = {
            "batch": batch,
            "first_pass": modes.first_pass,
            "first_pass_mixed": modes.first_pass_mixed,
            "draft_step": modes.draft_step if k > 1 else None,
            "reasons": list(modes.reasons),
        }
    if plan.get("drafter_compiled_by_specgw"):
        report["notes"].append(
            f"drafter {plan.get('drafter_model_class')} torch-compiled by specgw "
            "(compiled drafter replacement): PIECEWISE dispatch can replay")
    unsafe = plan.get("drafter_compile_unsafe")
    captures = plan.get("captures") or {}
    if captures.get("unknown"):
        report["notes"].append(f"{captures['unknown']} CUDA graph captures not attributed to "
                               "target or draft (an unprobed capture path)")
    if device != "cuda":
        report["notes"].append(f"{device}: no CUDA graphs exist here; every forward is eager")
        return report
    if unsafe:
        report["warnings"].append(f"drafter dispatched eager on purpose: {unsafe}")
    seen: set[str] = set()
    for label, exp in report["expected"].items():
        for phase in PHASES:
            if exp[phase] != "none":
                continue
            why = "; ".join(r for r in exp["reasons"] if not r.startswith(
                tuple(p for p in PHASES if p != phase))) or "no graph for this shape"
            if phase == "first_pass_mixed":  # one shape class, not per batch size
                text = f"drafter first pass of mixed batches will run EAGER: {why}"
            else:
                text = (f"drafter {phase} at batch {exp['batch']} ({label}) will run EAGER: "
                        f"{why}")
            if text not in seen:
                seen.add(text)
                report["warnings"].append(text)
    if plan.get("drafter_compiled") is False and not manager.get("use_breakable_cg"):
        dispatch = ("PIECEWISE dispatch would run eager" if plan.get("runner") == "v1" else
                    "first passes of mixed batches are dispatched PIECEWISE and would run "
                    "eager")
        report["warnings"].append(
            f"drafter {plan.get('drafter_model_class')} is not torch-compiled: {dispatch}")
    return report


async def run_self_check(engine: SpecEngine) -> dict[str, Any]:
    from monitoring import metrics as m

    plans = await engine.collective_rpc("specgw_graph_plan", timeout=60)
    device = engine.device or "cpu"
    reports = [evaluate(p, device) for p in plans]
    summary = {"device": device, "ranks": plans, "reports": reports}
    first, report = plans[0], reports[0]
    log.info(
        "self-check: runner=%s cudagraph_mode=%s capture_max=%s drafter=%s compiled=%s "
        "captures=%s expected=%s",
        first.get("runner"), first.get("cudagraph_mode"),
        first.get("max_cudagraph_capture_size"), first.get("drafter_model_class"),
        first.get("drafter_compiled"), first.get("captures"), report["expected"],
    )
    for note in report["notes"]:
        log.info("self-check: %s", note)
    warnings = sorted({w for r in reports for w in r["warnings"]})
    for w in warnings:
        log.warning("SELF-CHECK WARNING: %s", w)
    m.STARTUP_WARNINGS.labels(engine.model_name).set(len(warnings))
    for label, exp in report["expected"].items():
        for phase in PHASES:
            if exp.get(phase) is not None:
                graphed = 1.0 if device == "cuda" and exp[phase] != "none" else 0.0
                m.DRAFTER_EXPECTED_MODE.labels(engine.model_name, phase, label).set(graphed)
    summary["warnings"] = warnings
    return summary
