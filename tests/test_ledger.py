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


class _Graph:
    """Stands for a torch.cuda.CUDAGraph: what the replay and capture probes hand over."""


def test_nested_proposes_and_coverings_reuse_their_objects_and_restore_the_outer():
    """A propose and a covering run every engine step: the thread reuses one object per
    nesting depth (no allocation per step), and leaving the inner one puts the outer's
    counting back."""
    lg = Ledger()
    whole = _Graph()
    with lg.suppressed("draft"), lg.whole_captures():
        lg.on_capture(whole)
    assert lg.propose() is lg.propose()
    states = []
    for _ in range(2):
        with lg.propose():
            outer = lg._thread().propose
            states.append(outer)
            lg.on_replay(whole)  # the outer's first pass
            with lg.covering(3):
                assert lg.fused_steps == 3
                with lg.propose():  # a propose inside a propose: its own state
                    inner = lg._thread().propose
                    assert inner is not outer and lg.fused_steps is None
                    lg.on_replay(whole)  # the inner's first pass
                assert lg._thread().propose is outer and lg.fused_steps == 3
                lg.on_replay(whole)  # a fused step: 3 forwards
            assert lg.fused_steps is None
        assert lg._thread().propose is None
    assert states[0] is states[1]
    assert counts(lg) == {("draft", "first_pass", "full", "graph"): 4,
                          ("draft", "draft_step", "full", "graph"): 6}
    assert lg.proposes == 4 and lg.proposes_without_forward == 0


def test_a_graph_captured_outside_any_scope_counts_each_replay_as_a_full_forward():
    lg = Ledger()
    whole, draft, piece, own, stray = _Graph(), _Graph(), _Graph(), _Graph(), _Graph()
    with lg.suppressed("target"), lg.whole_captures():
        lg.on_capture(whole)  # runner V2: torch.cuda.graph before the forward context
        with lg.forward("target", "piecewise"):
            lg.on_capture(piece)  # a piece: captured inside its forward
        lg.on_replay(whole)  # a warm-up replay: seen, not counted
        with lg.suppressed("draft"):
            lg.on_capture(draft)  # the speculator's, in the runner's capture_model
    with lg.suppressed("draft"):
        lg.on_capture(own)  # outside any scope but not in a V2 manager's capture
    lg.on_replay(whole)
    with lg.propose():
        lg.on_replay(draft)
        with lg.covering(2):
            lg.on_replay(draft)
        lg.on_replay(whole)  # the target's graph inside propose: an escape
    lg.on_replay(draft)  # the drafter's graph outside propose: an escape
    lg.on_replay(own)  # not whole and no scope: escaped
    lg.on_replay(piece)
    lg.on_replay(stray)
    assert counts(lg) == {("target", "forward", "full", "graph"): 1,
                          ("draft", "first_pass", "full", "graph"): 1,
                          ("draft", "draft_step", "full", "graph"): 2}
    snap = lg.snapshot()
    assert snap["pieces"] == [["draft", "draft_step", 2, 2], ["draft", "first_pass", 1, 1],
                              ["target", "forward", 1, 1]]
    assert snap["unattributed_replays"] == 5 and lg.proposes_without_forward == 0
    installed = {"torch.cuda.CUDAGraph.replay": True, "torch.cuda.CUDAGraph.capture_begin":
                 True, "v2.capture": True, "v2.target.set_forward_context": True,
                 "v2.draft.propose": True}
    clean = {**snap, "runner": "v2", "installed": installed, "unattributed_replays": 0}
    assert coverage_by_role([{**clean, "unattributed_replays": 5}]) == {
        "target": False, "draft": False}
    assert coverage_by_role([clean]) == {"target": True, "draft": True}
    # Without the manager's capture probe no FULL graph of runner V2 is told apart.
    assert coverage_by_role([{**clean, "installed": {**installed, "v2.capture": False}}]) \
        == {"target": False, "draft": False}


def test_a_diverted_thread_counts_apart_until_undiverted():
    lg = Ledger()
    with lg.forward("target", "full"):
        lg.on_replay()
    scratch, own = lg.divert()
    with lg.propose():  # a propose with no forward: only the scratch says so
        pass
    lg.on_replay()
    assert scratch.proposes == 1 and scratch.proposes_without_forward == 1
    assert lg.proposes == 0 and lg.snapshot()["unattributed_replays"] == 0
    lg.undivert(own)
    with lg.forward("target", "full"):
        lg.on_replay()
    assert counts(lg) == {("target", "forward", "full", "graph"): 2}
    assert lg.proposes_without_forward == 0 and len(lg._threads) == 1


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


def fused_propose(steps: int) -> Ledger:
    """One propose: a FULL first pass, then one fused graph replay covering ``steps``."""
    lg = Ledger()
    with lg.propose():
        with lg.forward("draft", "full"):
            lg.on_replay()
        with lg.covering(steps), lg.forward("draft", "full", weight=lg.fused_steps or 1):
            lg.on_replay()
    return lg


def test_fused_multi_step_graph_counts_k_minus_1_forwards():
    lg = fused_propose(3)
    c = counts(lg)
    assert c[("draft", "first_pass", "full", "graph")] == 1
    assert c[("draft", "draft_step", "full", "graph")] == 3


def test_unprobed_paths_turn_coverage_off():
    lg = Ledger()
    lg.on_replay()  # a replay no probe scope saw
    with lg.propose():
        pass  # a propose whose forwards no probe saw
    graphs = {"torch.cuda.CUDAGraph.replay": True, "torch.cuda.CUDAGraph.capture_begin": True}
    snap = {**lg.snapshot(), "runner": "v1", "draft_propose_probed": True,
            "installed": {**graphs, "v1.target.x": True, "v1.draft.y": True}}
    assert snap["unattributed_replays"] == 1 and snap["proposes_without_forward"] == 1
    assert coverage_by_role([snap]) == {"target": False, "draft": False}
    ok = {"runner": "v1", "installed": {**graphs, "v1.target.x": True, "v1.draft.y": True},
          "draft_propose_probed": True, "unattributed_replays": 0,
          "proposes_without_forward": 0}
    assert coverage_by_role([ok]) == {"target": True, "draft": True}
    assert coverage_by_role([{**ok, "installed": {**graphs, "v1.target.x": True,
                                                  "v1.draft.y": False}}]) \
        == {"target": True, "draft": False}
    # Without torch's replay probe no graph is counted at all, for either role.
    assert coverage_by_role([{**ok, "installed": {**ok["installed"],
                                                  "torch.cuda.CUDAGraph.replay": False}}]) \
        == {"target": False, "draft": False}
    assert coverage_by_role([{**ok, "draft_propose_probed": False}])["draft"] is False


# ------------------------------------------------------------- per-piece accounting
# The installed probes drive the ledger like this: ``set_forward_context`` opens
# ``forward(role, label)``, each PIECEWISE ``CUDAGraphWrapper.__call__`` runs through
# ``ledger.piece(...)``, and ``torch.cuda.CUDAGraph.replay`` calls ``on_replay()``.

def piecewise_forward(lg: Ledger, role: str, label: object, replayed: list[bool]) -> None:
    """One forward over a split graph whose i-th piece replays iff ``replayed[i]``."""
    with lg.forward(role, label):
        for hit in replayed:
            lg.piece(lambda hit=hit: lg.on_replay() if hit else None)


def pieces(lg: Ledger) -> dict:
    return {tuple(r[:2]): tuple(r[2:]) for r in lg.snapshot()["pieces"]}


def test_every_piece_replayed_is_graph_some_is_partial_none_is_eager():
    lg = Ledger()
    with lg.suppressed(role="draft"), lg.propose():  # capture: learns the graph's size
        piecewise_forward(lg, "draft", "piecewise", [True] * 4)
    with lg.propose():
        piecewise_forward(lg, "draft", "piecewise", [True] * 4)
        piecewise_forward(lg, "draft", "piecewise", [True, False, True, True])
        piecewise_forward(lg, "draft", "piecewise", [False] * 4)
    c = counts(lg)
    assert c == {("draft", "first_pass", "piecewise", "graph"): 1,
                 ("draft", "draft_step", "piecewise", "partial"): 1,
                 ("draft", "draft_step", "piecewise", "eager"): 1}
    assert pieces(lg) == {("draft", "first_pass"): (4, 4), ("draft", "draft_step"): (3, 8)}
    assert lg.snapshot()["known_pieces"] == {"draft": 4}


def test_uncompiled_module_dispatched_piecewise_expects_the_known_pieces():
    lg = Ledger()
    with lg.suppressed():
        piecewise_forward(lg, "draft", "piecewise", [True] * 3)
    # The seed bug: no wrapper runs at all, nothing replays.
    with lg.propose():
        piecewise_forward(lg, "draft", "piecewise", [])
    assert counts(lg) == {("draft", "first_pass", "piecewise", "eager"): 1}
    assert pieces(lg) == {("draft", "first_pass"): (0, 3)}
    # Never compiled anywhere: still at least one graph was expected, none replayed.
    fresh = Ledger()
    piecewise_forward(fresh, "draft", "piecewise", [])
    assert pieces(fresh) == {("draft", "first_pass"): (0, 1)}


def test_dispatched_none_expects_no_graph_and_full_expects_one():
    lg = Ledger()
    piecewise_forward(lg, "target", "none", [False, False])  # pieces run, mode NONE
    with lg.forward("target", "full"):
        lg.on_replay()
    with lg.forward("target", "full"):
        pass
    c = counts(lg)
    assert c == {("target", "forward", "none", "eager"): 1,
                 ("target", "forward", "full", "graph"): 1,
                 ("target", "forward", "full", "eager"): 1}
    assert pieces(lg) == {("target", "forward"): (1, 2)}


def test_unknown_label_is_never_a_hit():
    lg = Ledger()
    piecewise_forward(lg, "draft", "unknown", [True, True])
    assert counts(lg) == {("draft", "first_pass", "unknown", "unknown"): 1}
    assert pieces(lg) == {}


def test_fused_graph_pieces_weighted_by_steps():
    lg = fused_propose(3)
    assert pieces(lg) == {("draft", "first_pass"): (1, 1), ("draft", "draft_step"): (3, 3)}


def test_captures_outside_a_scope_take_the_role_of_the_capture_call():
    lg = Ledger()
    with lg.suppressed(role="target"):
        lg.on_capture()  # MRV2: torch.cuda.graph begins before the forward context
        with lg.suppressed(role="draft"):
            lg.on_capture()
        lg.on_capture()
    lg.on_capture()
    assert lg.snapshot()["captures"] == {"target": 2, "draft": 1, "unknown": 1}


def test_classify_table():
    from engine_ext.probes.ledger import classify

    assert classify("piecewise", 0, 0, 0, 0) == ("eager", 0, 1)
    assert classify("piecewise", 2, 0, 0, 5) == ("graph", 1, 1)  # breakable graphs
    assert classify("piecewise", 5, 5, 5, 5) == ("graph", 5, 5)
    assert classify("piecewise", 2, 5, 2, 5) == ("partial", 2, 5)
    assert classify("piecewise", 2, 2, 2, 5) == ("partial", 2, 5)  # pieces skipped
    assert classify("full", 0, 0, 0, 0) == ("eager", 0, 1)
    assert classify("none", 0, 3, 0, 3) == ("eager", 0, 0)
    assert classify("unknown", 9, 9, 9, 9) == ("unknown", 0, 0)


class CountingLock:
    """A lock that counts how often it is taken."""

    def __init__(self) -> None:
        import threading

        self._lock, self.taken = threading.Lock(), 0

    def __enter__(self) -> None:
        self.taken += 1
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def test_forwards_pieces_and_proposes_take_no_lock_and_each_thread_counts_its_own():
    import threading

    lg = Ledger()
    lock = lg._lock = CountingLock()
    locked_while_serving: list[int] = []
    both_registered, both_done = threading.Barrier(2), threading.Barrier(2)

    def serve(n: int) -> None:
        lg.forward("target", "full")  # registers this thread (the one locked step)
        both_registered.wait()
        taken = lock.taken
        for _ in range(n):
            with lg.forward("target", "piecewise"):
                lg.piece(lg.on_replay)
            with lg.propose(), lg.forward("draft", "full"):
                lg.on_replay()
        both_done.wait()
        locked_while_serving.append(lock.taken - taken)  # asserted below, not in a thread

    threads = [threading.Thread(target=serve, args=(n,)) for n in (300, 500)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert locked_while_serving == [0, 0]  # the hot path never locks
    c = counts(lg)
    assert c[("target", "forward", "piecewise", "graph")] == 800
    assert c[("draft", "first_pass", "full", "graph")] == 800
    assert lg.proposes == 800
    assert ["target", "forward", 800, 800] in lg.snapshot()["pieces"]


def test_an_alternation_stopped_from_another_thread_undiverts_on_the_models():
    import threading
    import types

    from engine_ext.probes.alternate import Alternation

    lg = Ledger()

    class Worker:
        def execute_model(self, out):
            with lg.propose():  # what the probed drafter does each step
                pass
            return out

    w = Worker()
    alt = Alternation(w, "execute_model", ("total", "per_req"), 100, "ab", 0, ledger=lg,
                      groups=("propose",))
    alt.start()
    sched = types.SimpleNamespace(total=4, per_req={"a": 4})
    w.execute_model(sched)  # diverts: this propose goes to the scratch
    assert lg.proposes == 0
    stopper = threading.Thread(target=alt.finish)
    stopper.start()
    stopper.join()
    assert alt.done and not alt.settled and alt.record()["done"] is False
    assert alt.proposes_counted == 1
    w.execute_model(sched)  # the model's thread: undone here, then vLLM's step as is
    assert alt.settled and "execute_model" not in vars(w)
    w.execute_model(sched)
    assert lg.proposes == 2  # counting into the ledger again, on this thread's own


def test_the_replay_wrapper_passes_its_call_through():
    """What torch.cuda.CUDAGraph.replay is replaced with: the same arguments reach the
    original and its result comes back, the replay counted on the way."""
    lg = Ledger()
    seen = []
    probed = lg.replay_probe(lambda graph, *a, **k: seen.append((graph, a, k)) or "out")
    with lg.forward("target", "full"):
        assert probed("g", 1, x=2) == "out"
    assert seen == [("g", (1,), {"x": 2})]
    assert counts(lg) == {("target", "forward", "full", "graph"): 1}
