"""The probe ledger classifies forwards by what replayed, not by what was dispatched."""

from __future__ import annotations

from engine_ext.probes.ledger import Ledger
from monitoring.metrics import coverage_by_role


def counts(ledger: Ledger) -> dict:
    return {tuple(r[:4]): r[4] for r in ledger.snapshot()["forwards"]}


def test_replay_inside_scope_is_graph_and_silent_fallback_is_eager():
    lg = Ledger()
    with lg.propose():
        with lg.forward("draft", "piecewise"):
            lg.on_replay()
            lg.on_replay()  # several pieces replayed: still one forward
        with lg.forward("draft", "piecewise"):
            pass  # dispatched PIECEWISE, nothing replayed: the seed's silent fallback
        with lg.forward("draft", "none"):
            pass
    with lg.forward("target", "full"):
        lg.on_replay()
    c = counts(lg)
    assert c[("draft", "first_pass", "piecewise", "graph")] == 1
    assert c[("draft", "draft_step", "piecewise", "eager")] == 1
    assert c[("draft", "draft_step", "none", "eager")] == 1
    assert c[("target", "forward", "full", "graph")] == 1
    assert lg.proposes == 1 and lg.proposes_without_forward == 0


def test_suppressed_runs_are_not_counted_but_captures_are():
    lg = Ledger()
    with lg.suppressed(), lg.forward("target", "piecewise"):
        lg.on_capture()
        lg.on_replay()
    with lg.suppressed(), lg.propose(), lg.forward("draft", "full"):
        lg.on_capture()
    snap = lg.snapshot()
    assert snap["forwards"] == [] and snap["proposes"] == 0
    assert snap["captures"] == {"target": 1, "draft": 1}
    assert snap["unattributed_replays"] == 0


def test_fused_multi_step_graph_counts_k_minus_1_forwards():
    lg = Ledger()
    with lg.propose():
        with lg.forward("draft", "full"):
            lg.on_replay()
        with lg.covering(3), lg.forward("draft", "full", weight=lg.fused_steps or 1):
            lg.on_replay()
    c = counts(lg)
    assert c[("draft", "first_pass", "full", "graph")] == 1
    assert c[("draft", "draft_step", "full", "graph")] == 3


def test_unprobed_paths_turn_coverage_off():
    lg = Ledger()
    lg.on_replay()  # a replay no probe scope saw
    with lg.propose():
        pass  # a propose whose forwards no probe saw
    snap = {**lg.snapshot(), "runner": "v1", "draft_propose_probed": True,
            "installed": {"v1.target.x": True, "v1.draft.y": True}}
    assert snap["unattributed_replays"] == 1 and snap["proposes_without_forward"] == 1
    assert coverage_by_role([snap]) == {"target": False, "draft": False}
    ok = {"runner": "v1", "installed": {"v1.target.x": True, "v1.draft.y": True},
          "draft_propose_probed": True, "unattributed_replays": 0,
          "proposes_without_forward": 0}
    assert coverage_by_role([ok]) == {"target": True, "draft": True}
    assert coverage_by_role([{**ok, "installed": {"v1.target.x": True, "v1.draft.y": False}}]) \
        == {"target": True, "draft": False}
    assert coverage_by_role([{**ok, "draft_propose_probed": False}])["draft"] is False
