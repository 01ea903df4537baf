"""The worker-side ledger of forwards, graph replays and captures.

Pure Python and free of vLLM imports so it can be unit-tested anywhere. The version
modules in ``engine_ext.internals`` open a :func:`forward` scope around every model
invocation they can see; ``torch.cuda.CUDAGraph.replay`` and ``capture_begin`` report
into the innermost open scope, and every PIECEWISE ``CUDAGraphWrapper`` call (one piece of
a compiled split graph) reports whether it replayed. Runner V2's FULL graphs are replayed
by their manager with no forward context around them: a graph whose capture began outside
any scope is marked at capture, and each of its replays counts as one FULL forward that
replayed (``Ledger.replay_probe``), with no scope and no wrapper of its own. At the end of the scope
:func:`classify` compares what replayed with what the dispatcher asked for: a PIECEWISE
forward is ``graph`` only if every piece of the split graph replayed, ``partial`` if some
did, ``eager`` if none did (the silent fallback of vLLM PR #25109); a forward whose
dispatch label could not be read is ``unknown``, never a hit.

Everything here is CPU-side bookkeeping: no tensor is touched, so no GPU sync is added.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

# How this ledger counts runner V2's FULL graphs, recorded by the probe-cost benchmarks:
# their runs measure the cost of one counting design and hot path, and runs of two are not
# one measurement. "whole-graph-inline" (now): a replay of a graph whose capture began
# outside any scope is counted inside the replay wrapper's own frame (Ledger.replay_probe),
# and a propose reuses its thread's objects; "whole-graph" (4a00e34 to 82c7572): the same
# counts through three calls per replay and two objects per propose; "scoped", before: a
# forward scope around CudaGraphManager.run_fullgraph.
COUNTING = "whole-graph-inline"
ROLE_TARGET = "target"
ROLE_DRAFT = "draft"
PHASE_TARGET = "forward"
PHASE_FIRST = "first_pass"  # drafter pass over the verified tokens (B*(k+1) tokens)
PHASE_STEP = "draft_step"  # drafter per-token steps 2..k (B tokens each)

MODES = ("none", "piecewise", "full")
# Set (to its role) on a graph that runner V2's CudaGraphManager.capture began outside any
# forward scope: a whole step's FULL graph, which the manager replays with no forward
# scope around it. Graphs captured anywhere else outside a scope (an encoder's, a
# drafter's own) stay unmarked: their replays are still escapes, and turn coverage off.
WHOLE_GRAPH = "_specgw_whole_graph"
# The (role, phase) of a whole-graph replay, by index into _Thread.whole_n / whole_w:
# counting one is two list bumps (no key to build or hash); snapshot folds them in.
_WHOLE = ((ROLE_TARGET, PHASE_TARGET), (ROLE_DRAFT, PHASE_FIRST), (ROLE_DRAFT, PHASE_STEP))
UNKNOWN = "unknown"  # dispatch label not determinable: never counted as a graph hit
EXECUTED = ("graph", "partial", "eager", UNKNOWN)


def _no_replay(graph: object = None) -> None:
    return None


def mode_name(mode: object) -> str:
    """Normalise a vLLM ``CUDAGraphMode`` (or None/str) to none|piecewise|full."""
    if mode is None:
        return "none"
    if mode is UNKNOWN:
        return UNKNOWN
    name = getattr(mode, "name", str(mode)).lower()
    if name in MODES:
        return name
    # FULL_AND_PIECEWISE / FULL_DECODE_ONLY are not runtime modes; keep them visible.
    return name


class _Scope:
    """One open forward; also its own context manager. A thread reuses its scope objects
    by nesting depth (no scope object per forward), so ``Ledger.forward()`` must be
    entered at once: a second ``forward()`` at the same depth relabels the first."""

    __slots__ = (
        "counted",
        "dispatched",
        "ledger",
        "phase",
        "pieces",
        "pieces_replayed",
        "propose",
        "replays",
        "role",
        "thread",
        "weight",
    )

    def __init__(self, ledger: Ledger, thread: _Thread):
        self.ledger, self.thread = ledger, thread

    def __enter__(self) -> None:
        self.thread.depth += 1

    def __exit__(self, *exc: object) -> None:
        self.thread.depth -= 1
        self.ledger._close(self)


def classify(dispatched: str, replays: int, pieces: int, pieces_replayed: int,
             known_pieces: int) -> tuple[str, int, int]:
    """(executed, graphs replayed, graphs expected) for one forward.

    ``known_pieces`` is the number of pieces this role's split graph has (learned from
    earlier forwards, capture included). A PIECEWISE forward expects every piece of its
    split graph to replay, and at least one graph even when no piece ran at all: an
    uncompiled module has no pieces, which is exactly the silent fallback. A FULL forward
    expects one graph.
    """
    if dispatched == UNKNOWN:
        return UNKNOWN, 0, 0
    if dispatched == "piecewise":
        if pieces == 0 and replays > 0:
            # Graphs without piecewise wrappers (breakable CUDA graphs): one whole graph.
            return "graph", 1, 1
        expected = max(pieces, known_pieces, 1)
        if pieces_replayed >= expected:
            return "graph", pieces_replayed, expected
        return ("partial" if pieces_replayed else "eager"), pieces_replayed, expected
    if dispatched == "full":
        return ("graph", 1, 1) if replays else ("eager", 0, 1)
    return ("graph" if replays else "eager"), 0, 0


class _ProposeState:
    """One open drafter propose. A thread reuses these by nesting depth, as it does its
    scopes: a propose allocates nothing (it runs every engine step)."""

    __slots__ = ("forwards", "fused_steps")

    def __init__(self) -> None:
        self.forwards = 0
        self.fused_steps: int | None = None


class _Thread:
    """One thread's open scopes and its own counters. The hot path (a forward, a piece, a
    replay) touches only these: no lock, and nothing another thread writes; ``snapshot``
    sums the threads' counters (copies of dicts only this thread writes, each copy one
    step under the GIL)."""

    __slots__ = (
        "covering_depth",
        "coverings",
        "depth",
        "forwards",
        "pieces_expected",
        "pieces_replayed",
        "propose",
        "propose_cm",
        "propose_depth",
        "propose_states",
        "proposes",
        "proposes_without_forward",
        "replays",
        "role_hint",
        "scopes",
        "suppress",
        "unattributed_replays",
        "whole_capture",
        "whole_n",
        "whole_w",
    )

    def __init__(self) -> None:
        self.scopes: list[_Scope] = []  # by depth, reused
        self.depth = 0
        self.suppress = 0
        self.propose: _ProposeState | None = None  # the innermost open propose
        self.propose_states: list[_ProposeState] = []  # by propose depth, reused
        self.propose_depth = 0
        self.propose_cm = _Propose(self)
        self.coverings: list[_Covering] = []  # by covering depth, reused
        self.covering_depth = 0
        self.role_hint: str | None = None
        self.forwards: Counter = Counter()  # (role, phase, dispatched, executed)
        self.replays: Counter = Counter()  # (role, phase) raw replay calls
        self.pieces_expected: Counter = Counter()  # (role, phase)
        self.pieces_replayed: Counter = Counter()  # (role, phase)
        self.unattributed_replays = 0
        self.whole_capture = 0  # inside CudaGraphManager.capture (nesting depth)
        self.whole_n = [0] * len(_WHOLE)  # whole-graph replays, by _WHOLE index
        self.whole_w = [0] * len(_WHOLE)  # the forwards they stand for (fused: k-1 each)
        self.proposes = 0
        self.proposes_without_forward = 0

    def top(self) -> _Scope | None:
        return self.scopes[self.depth - 1] if self.depth else None


class _Propose:
    """``Ledger.propose()``: one drafter propose call. One per thread, entered once per
    propose (class-based: no generator, and no object per call)."""

    __slots__ = ("thread",)

    def __init__(self, thread: _Thread):
        self.thread = thread

    def __enter__(self) -> None:
        t = self.thread
        d = t.propose_depth
        if d == len(t.propose_states):
            t.propose_states.append(_ProposeState())
        st = t.propose = t.propose_states[d]
        st.forwards, st.fused_steps = 0, None
        t.propose_depth = d + 1

    def __exit__(self, *exc: object) -> None:
        t = self.thread
        forwards = t.propose.forwards  # type: ignore[union-attr]
        d = t.propose_depth = t.propose_depth - 1
        t.propose = t.propose_states[d - 1] if d else None
        if t.suppress == 0:
            t.proposes += 1
            if forwards == 0:
                t.proposes_without_forward += 1


class _Covering:
    """``Ledger.covering(steps)``; a thread reuses these by nesting depth, as its scopes
    (entered at once, like ``Ledger.forward()``)."""

    __slots__ = ("prev", "state", "steps", "thread")

    def __init__(self, thread: _Thread):
        self.thread = thread
        self.state: _ProposeState | None = None
        self.steps = 1

    def __enter__(self) -> None:
        self.thread.covering_depth += 1
        if self.state is not None:
            self.prev, self.state.fused_steps = self.state.fused_steps, max(1, self.steps)

    def __exit__(self, *exc: object) -> None:
        self.thread.covering_depth -= 1
        if self.state is not None:
            self.state.fused_steps = self.prev


@dataclass
class Ledger:
    """Counters for one worker process, kept per thread (see ``_Thread``) and summed by
    ``snapshot``. Keys are label tuples; values are counts."""

    known_pieces: dict[str, int] = field(default_factory=dict)  # role -> split-graph pieces
    piece_wrappers: Counter = field(default_factory=Counter)  # compile prefix -> wrappers
    captures: Counter = field(default_factory=Counter)  # role
    # Debug/test only (SPECGW_RECORD_DRAFTS=1): the proposed draft token ids. Reading
    # them synchronises with the device, so it is off in serving.
    record_drafts: bool = False
    recorded_drafts: list = field(default_factory=list)
    installed: dict[str, bool] = field(default_factory=dict)
    install_errors: dict[str, str] = field(default_factory=dict)
    enabled: bool = True  # False while the probes are taken out (install.set_enabled)
    _local: threading.local = field(default_factory=threading.local, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _threads: list[_Thread] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self._count_replay = self.replay_probe(_no_replay)

    # ------------------------------------------------------------------ state
    def _thread(self) -> _Thread:
        try:
            return self._local.t
        except AttributeError:
            t = self._local.t = _Thread()
            with self._lock:  # once per thread
                self._threads.append(t)
            return t

    def divert(self) -> tuple[_Thread, _Thread | None]:
        """From now on this thread counts into a fresh ``_Thread`` that no snapshot sums
        (the same work per forward, nothing reported), until :meth:`undivert`. Returns
        (that scratch, this thread's own, None if it had none yet)."""
        own = getattr(self._local, "t", None)
        scratch = self._local.t = _Thread()
        return scratch, own

    def undivert(self, own: _Thread | None) -> None:
        """This thread counts into ``own`` again (what :meth:`divert` returned)."""
        if own is None:
            del self._local.t
        else:
            self._local.t = own

    def _sum(self, name: str) -> int:
        return sum(getattr(t, name) for t in list(self._threads))

    @property
    def proposes(self) -> int:
        return self._sum("proposes")

    @property
    def proposes_without_forward(self) -> int:
        return self._sum("proposes_without_forward")

    @property
    def fused_steps(self) -> int | None:
        st = self._thread().propose
        return st.fused_steps if st is not None else None

    @contextmanager
    def suppressed(self, role: str | None = None) -> Iterator[None]:
        """Profile, warm-up and capture runs: seen, never counted as serving work.
        ``role`` names whose graphs a capture outside any forward scope belongs to (MRV2
        opens ``torch.cuda.graph`` before the model's forward context)."""
        t = self._thread()
        t.suppress += 1
        outer_role = t.role_hint
        if role is not None:
            t.role_hint = role
        try:
            yield
        finally:
            t.suppress -= 1
            t.role_hint = outer_role

    @contextmanager
    def whole_captures(self) -> Iterator[None]:
        """Inside runner V2's ``CudaGraphManager.capture``: a graph begun outside any
        forward scope here is a whole FULL graph (:data:`WHOLE_GRAPH`). Set-up time only."""
        t = self._thread()
        t.whole_capture += 1
        try:
            yield
        finally:
            t.whole_capture -= 1

    def propose(self) -> _Propose:
        """One drafter ``propose()`` call: its first forward is the first pass. Every
        engine step enters one, so the thread's context manager is read in this frame."""
        try:
            return self._local.t.propose_cm
        except AttributeError:
            return self._thread().propose_cm

    def covering(self, steps: int) -> _Covering:
        """Inside, a FULL graph replay of the drafter stands for ``steps`` forwards (a
        fused multi-step decode graph replays k-1 drafter steps at once)."""
        t = self._thread()
        if t.covering_depth == len(t.coverings):
            t.coverings.append(_Covering(t))
        c = t.coverings[t.covering_depth]
        c.state, c.steps = t.propose, steps
        return c

    def forward(self, role: str, dispatched: object, phase: str | None = None,
                weight: int = 1) -> _Scope:
        """The scope of one forward (``with ledger.forward(...):``)."""
        t = self._thread()
        st = t.propose if role == ROLE_DRAFT else None
        if phase is None:
            if role == ROLE_DRAFT:
                phase = PHASE_FIRST if st is None or st.forwards == 0 else PHASE_STEP
            else:
                phase = PHASE_TARGET
        if t.depth == len(t.scopes):
            t.scopes.append(_Scope(self, t))
        sc = t.scopes[t.depth]
        sc.propose, sc.role, sc.phase, sc.weight = st, role, phase, weight
        sc.dispatched, sc.counted = mode_name(dispatched), t.suppress == 0
        sc.replays = sc.pieces = sc.pieces_replayed = 0
        return sc

    def _close(self, scope: _Scope) -> None:
        role = scope.role
        known = self.known_pieces.get(role, 0)
        if scope.pieces > known:  # learnt at capture too: the split graph's size
            self.known_pieces[role] = known = scope.pieces
        if not scope.counted:
            return
        executed, replayed, expected = classify(
            scope.dispatched, scope.replays, scope.pieces, scope.pieces_replayed, known)
        w, t = scope.weight, scope.thread
        key = (role, scope.phase)
        t.forwards[(role, scope.phase, scope.dispatched, executed)] += w
        if scope.replays:
            t.replays[key] += scope.replays
        if expected:
            t.pieces_expected[key] += expected * w
            t.pieces_replayed[key] += replayed * w
        if scope.propose is not None:
            scope.propose.forwards += w

    # ------------------------------------------------------- torch callbacks
    def replay_probe(self, replay: Callable[..., Any]) -> Callable[..., Any]:
        """``torch.cuda.CUDAGraph.replay`` wrapped: every graph replay reports here first.
        This runs for every replay of every engine step (on runner V2, k+1 per step with
        no other probe around them), so the counting is written out in this one frame:
        no method call, no key built, no allocation, nothing shared with another thread.

        Inside a forward scope it counts into the scope (added to the ledger when the
        scope closes). Outside one, a graph marked whole at capture is one FULL forward
        that replayed: the drafter's under ``propose`` (its first is the first pass; under
        ``covering`` it stands for that many steps), the target's otherwise. A whole graph
        of the other role than the one replaying it (a drafter whose propose is not
        probed, say), or any other graph outside a scope, is an escape."""
        local, new_thread = self._local, self._thread

        def probed(graph: object = None, *args: Any, **kwargs: Any) -> Any:
            try:
                t = local.t
            except AttributeError:
                t = new_thread()
            if t.depth:
                t.scopes[t.depth - 1].replays += 1
            elif (role := getattr(graph, WHOLE_GRAPH, None)) is not None:
                if not t.suppress:
                    st = t.propose
                    if (st is None) != (role == ROLE_TARGET):
                        t.unattributed_replays += 1
                    elif st is None:
                        t.whole_n[0] += 1
                        t.whole_w[0] += 1
                    else:
                        i = 1 if st.forwards == 0 else 2
                        w = st.fused_steps or 1
                        st.forwards += w
                        t.whole_n[i] += 1
                        t.whole_w[i] += w
            elif t.suppress == 0:
                t.unattributed_replays += 1
            return replay(graph, *args, **kwargs)

        return probed

    def on_replay(self, graph: object = None) -> None:
        """One graph replay, counted as the replay probe counts it (tests, benchmarks)."""
        self._count_replay(graph)

    def piece(self, fn, *args, **kwargs):
        """Run one PIECEWISE wrapper call (a piece of a split graph) inside the open
        scope, noting whether it replayed. Integer bumps on the scope only."""
        scope = self._thread().top()
        if scope is None:
            return fn(*args, **kwargs)
        before = scope.replays
        out = fn(*args, **kwargs)
        scope.pieces += 1
        if scope.replays > before:
            scope.pieces_replayed += 1
        return out

    def on_piece_wrapper(self, prefix: str | None) -> None:
        """A PIECEWISE wrapper was built around a piece of the ``prefix`` module."""
        with self._lock:
            self.piece_wrappers[prefix or ""] += 1

    def on_capture(self, graph: object = None) -> None:
        t = self._thread()
        top = t.top()
        role = top.role if top is not None else t.role_hint or "unknown"
        if top is None and t.whole_capture and graph is not None:
            # Runner V2's manager begins a FULL capture before the model's forward context
            # (piecewise and V1 FULL graphs are captured inside it, by CUDAGraphWrapper):
            # its replays come with no scope, and are counted as whole forwards.
            with contextlib.suppress(AttributeError, TypeError):
                setattr(graph, WHOLE_GRAPH, role)
        with self._lock:
            self.captures[role] += 1

    # ------------------------------------------------------------- reporting
    def _merged(self, name: str) -> Counter:
        total: Counter = Counter()
        for t in list(self._threads):
            total.update(dict(getattr(t, name)))  # a copy: the owner may be counting
        return total

    def snapshot(self) -> dict:
        """Plain-data view for ``collective_rpc`` (msgpack/pickle friendly). Each counter
        is copied whole, but the counters one after another: read from a thread other
        than the one counting, two counters may be one forward apart. vLLM's workers run
        ``collective_rpc`` on the thread that runs the model, between forwards."""
        forwards, replays = self._merged("forwards"), self._merged("replays")
        expected, replayed = self._merged("pieces_expected"), self._merged("pieces_replayed")
        for t in list(self._threads):
            n, w = list(t.whole_n), list(t.whole_w)
            for (role, phase), ni, wi in zip(_WHOLE, n, w, strict=True):
                if ni:  # FULL forwards that replayed: one graph expected and replayed each
                    forwards[(role, phase, "full", "graph")] += wi
                    replays[(role, phase)] += ni
                    expected[(role, phase)] += wi
                    replayed[(role, phase)] += wi
        with self._lock:
            return {
                "forwards": [[*k, v] for k, v in sorted(forwards.items())],
                "replays": [[*k, v] for k, v in sorted(replays.items())],
                "pieces": [[*k, replayed[k], v] for k, v in sorted(expected.items())],
                "known_pieces": dict(self.known_pieces),
                "piece_wrappers": dict(self.piece_wrappers),
                "captures": dict(self.captures),
                "unattributed_replays": self._sum("unattributed_replays"),
                "proposes": self.proposes,
                "proposes_without_forward": self.proposes_without_forward,
                "installed": dict(self.installed),
                "install_errors": dict(self.install_errors),
                "enabled": self.enabled,
            }


LEDGER = Ledger(record_drafts=os.environ.get("SPECGW_RECORD_DRAFTS") == "1")
