"""Worker extension (``worker_extension_cls``): mixed into vLLM's Worker so the API
process can read the probe ledger and the drafter's graph set-up with
``collective_rpc``. Method names carry a ``specgw_`` prefix because vLLM refuses an
extension whose attribute names clash with the Worker's."""

from __future__ import annotations

import os
import time
from typing import Any

from engine_ext.internals import table_for
from engine_ext.worker_inspect import drafter_of, graph_plan, runner_kind


class ProbeWorkerExtension:
    def specgw_probe_snapshot(self) -> dict[str, Any]:
        from engine_ext.probes import alternate
        from engine_ext.probes.ledger import LEDGER

        t0 = time.perf_counter_ns()
        snap = LEDGER.snapshot()
        snap["rank"] = _rank(self)
        snap["pid"] = os.getpid()
        snap["runner"] = runner_kind(_runner(self))
        drafter = drafter_of(_runner(self))
        snap["drafter_class"] = type(drafter).__name__ if drafter is not None else None
        # A drafter class that overrides propose() past our wrapper is an unprobed path.
        propose = getattr(type(drafter), "propose", None) if drafter is not None else None
        snap["draft_propose_probed"] = drafter is None or bool(
            getattr(propose, "__specgw_probe__", False))
        if alternate.CURRENT is not None:  # a read inside an alternation is priced apart
            alternate.CURRENT.note_rpc("snapshot", t0, time.perf_counter_ns())
        return snap

    def specgw_probe_alternate(self, steps: int, mode: str = "ab", seed: int = 0,
                               groups: list[str] | None = None) -> dict[str, Any]:
        """Start an alternation (engine_ext.probes.alternate) over the next ``steps``
        engine steps; refused while one runs."""
        from engine_ext.probes import alternate

        cur = alternate.CURRENT
        if cur is not None and not cur.settled:
            raise RuntimeError("a probe alternation is already running")
        t = table_for()
        alt = alternate.Alternation(self, t.worker_step_method, t.scheduler_output_fields,
                                    int(steps), str(mode), int(seed),
                                    groups=None if groups is None else tuple(groups))
        alternate.CURRENT = alt
        alt.start()
        return {"rank": _rank(self), "started": True, "steps": alt.steps, "mode": alt.mode,
                "groups": None if alt.groups is None else sorted(alt.groups)}

    def specgw_probe_alternation_stop(self) -> dict[str, Any]:
        """End the running alternation now (probes back as they were before it)."""
        from engine_ext.probes import alternate

        cur = alternate.CURRENT
        if cur is not None:
            cur.finish()
        return {"rank": _rank(self), "record": None if cur is None else cur.record()}

    def specgw_probe_alternation(self) -> dict[str, Any]:
        """The last alternation's record so far ({"rank", "record": None} if none ran)."""
        from engine_ext.probes import alternate

        t0 = time.perf_counter_ns()
        cur = alternate.CURRENT
        if cur is None:
            return {"rank": _rank(self), "record": None}
        record = cur.record()
        cur.note_rpc("alternation_read", t0, time.perf_counter_ns())
        return {"rank": _rank(self), "record": record}

    def specgw_probes_set(self, enabled: bool) -> dict[str, Any]:
        """Switch this worker's probes in or out (between forwards: vLLM runs
        ``collective_rpc`` on the model's thread between steps)."""
        from engine_ext.internals.install import set_enabled

        return {"rank": _rank(self), "enabled": bool(enabled),
                "wrappers": set_enabled(bool(enabled))}

    def specgw_recorded_drafts(self) -> dict[str, Any]:
        """Draft token ids proposed so far (only with SPECGW_RECORD_DRAFTS=1)."""
        from engine_ext.probes.ledger import LEDGER

        return {"rank": _rank(self), "drafts": list(LEDGER.recorded_drafts)}

    def specgw_graph_plan(self) -> dict[str, Any]:
        from engine_ext import sampler_fixes

        plan = graph_plan(_runner(self))
        plan["rank"] = _rank(self)
        plan["sampler_fixes"] = list(sampler_fixes.INSTALLED)  # as this worker runs them
        return plan


def _runner(worker: Any) -> Any:
    return getattr(worker, table_for().worker_runner_attr)


def _rank(worker: Any) -> int:
    return getattr(worker, table_for().worker_rank_attr, 0)

