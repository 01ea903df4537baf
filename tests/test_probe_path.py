"""The whole-path steps that ``benchmarks/probe_cost.py`` times go through the real probes:
every wrapper of ``install.py`` is installed on its stand-in and one probed step moves the
ledger by exactly one engine step's forwards, replays, pieces and proposes, while the bare
step moves nothing. Pure Python; no engine."""

from __future__ import annotations

import sys

import pytest

from benchmarks.probe_path import STEPS, v1_step, v2_step
from engine_ext.internals import install as inst
from engine_ext.probes.ledger import Ledger


def counts(lg: Ledger) -> dict:
    snap = lg.snapshot()
    return {"forwards": {tuple(r[:-1]): r[-1] for r in snap["forwards"]},
            "replays": {tuple(r[:-1]): r[-1] for r in snap["replays"]},
            "pieces": {tuple(r[:2]): tuple(r[2:]) for r in snap["pieces"]},
            "proposes": snap["proposes"], "unattributed": snap["unattributed_replays"]}


@pytest.mark.parametrize("n", [1, 3])
def test_v2_probed_step_counts_one_full_step(n: int):
    lg = Ledger()
    step = v2_step(lg, probed=True, k=3)
    assert lg.installed == dict.fromkeys(
        ["torch.cuda.CUDAGraph.replay", "torch.cuda.CUDAGraph.capture_begin",
         "v2.draft.propose", "v2.draft._fused_multi_step_decode"], True)
    for _ in range(n):
        step()
    assert counts(lg) == {
        "forwards": {("target", "forward", "full", "graph"): n,
                     ("draft", "first_pass", "full", "graph"): n,
                     ("draft", "draft_step", "full", "graph"): 2 * n},  # fused: k-1 steps
        "replays": {("target", "forward"): n, ("draft", "first_pass"): n,
                    ("draft", "draft_step"): n},
        "pieces": {("target", "forward"): (n, n), ("draft", "first_pass"): (n, n),
                   ("draft", "draft_step"): (2 * n, 2 * n)},
        "proposes": n, "unattributed": 0}


def test_v2_step_of_vllm_0_26_counts_a_decode_graph_per_drafter_step():
    lg = Ledger()
    step = v2_step(lg, probed=True, k=3, fused=False)
    step()
    step()
    assert counts(lg) == {
        "forwards": {("target", "forward", "full", "graph"): 2,
                     ("draft", "first_pass", "full", "graph"): 2,
                     ("draft", "draft_step", "full", "graph"): 4},
        "replays": {("target", "forward"): 2, ("draft", "first_pass"): 2,
                    ("draft", "draft_step"): 4},
        "pieces": {("target", "forward"): (2, 2), ("draft", "first_pass"): (2, 2),
                   ("draft", "draft_step"): (4, 4)},
        "proposes": 2, "unattributed": 0}


@pytest.mark.parametrize(("tp", "dp"), [(5, 2), (3, 1)])
def test_v1_probed_step_counts_every_piece(tp: int, dp: int):
    lg = Ledger()
    step = v1_step(lg, probed=True, k=3, target_pieces=tp, draft_pieces=dp)
    assert not lg.install_errors and all(lg.installed.values())
    assert lg.piece_wrappers == {"model": tp + dp}
    step()
    step()
    c = counts(lg)
    assert c["forwards"] == {("target", "forward", "piecewise", "graph"): 2,
                             ("draft", "first_pass", "piecewise", "graph"): 2,
                             ("draft", "draft_step", "piecewise", "graph"): 4}
    assert c["pieces"] == {("target", "forward"): (2 * tp, 2 * tp),
                           ("draft", "first_pass"): (2 * dp, 2 * dp),
                           ("draft", "draft_step"): (4 * dp, 4 * dp)}
    assert c["proposes"] == 2 and c["unattributed"] == 0
    assert lg.known_pieces == {"target": tp, "draft": dp}


@pytest.mark.parametrize("name", list(STEPS))
def test_bare_step_counts_nothing_and_leaves_no_trace(name: str):
    torch_before = sys.modules.get("torch")
    patches = len(inst._PATCHES)
    lg = Ledger()
    STEPS[name](lg, False)()
    assert lg.snapshot()["forwards"] == [] and lg.proposes == 0 and not lg.installed
    STEPS[name](Ledger(), True)()
    # The stand-ins never reach set_enabled's list nor replace the real torch module.
    assert len(inst._PATCHES) == patches
    assert sys.modules.get("torch") is torch_before
