"""The worker-side ledger of forwards, graph replays and captures.

Pure Python and free of vLLM imports so it can be unit-tested anywhere. The version
modules in ``engine_ext.internals`` open a :func:`forward` scope around every model
invocation they can see; ``torch.cuda.CUDAGraph.replay`` and ``capture_begin`` report
into the innermost open scope, and every PIECEWISE ``CUDAGraphWrapper`` call (one piece of
a compiled split graph) reports whether it replayed. At the end of the scope
:func:`classify` compares what replayed with what the dispatcher asked for: a PIECEWISE
forward is ``graph`` only if every piece of the split graph replayed, ``partial`` if some
did, ``eager`` if none did (the silent fallback of vLLM PR #25109); a forward whose
dispatch label could not be read is ``unknown``, never a hit.

Everything here is CPU-side bookkeeping: no tensor is touched, so no GPU sync is added.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

ROLE_TARGET = "target"
ROLE_DRAFT = "draft"
PHASE_TARGET = "forward"
PHASE_FIRST = "first_pass"  # drafter pass over the verified tokens (B*(k+1) tokens)
PHASE_STEP = "draft_step"  # drafter per-token steps 2..k (B tokens each)

MODES = ("none", "piecewise", "full")
UNKNOWN = "unknown"  # dispatch label not determinable: never counted as a graph hit
EXECUTED = ("graph", "partial", "eager", UNKNOWN)


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


@dataclass
class _Scope:
    role: str
    phase: str
    dispatched: str
    weight: int
    counted: bool
    replays: int = 0  # every CUDAGraph.replay() inside the scope
    pieces: int = 0  # PIECEWISE wrapper calls (split-graph pieces executed)
    pieces_replayed: int = 0  # of those, the ones that replayed their graph


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


@dataclass
class _ProposeState:
    forwards: int = 0
    fused_steps: int | None = None


@dataclass
class Ledger:
    """Counters for one worker process. Keys are label tuples; values are counts."""

    forwards: Counter = field(default_factory=Counter)  # (role, phase, dispatched, executed)
    replays: Counter = field(default_factory=Counter)  # (role, phase) raw replay calls
    pieces_replayed: Counter = field(default_factory=Counter)  # (role, phase)
    pieces_expected: Counter = field(default_factory=Counter)  # (role, phase)
    known_pieces: dict[str, int] = field(default_factory=dict)  # role -> split-graph pieces
    piece_wrappers: Counter = field(default_factory=Counter)  # compile prefix -> wrappers
    captures: Counter = field(default_factory=Counter)  # role
    unattributed_replays: int = 0
    proposes: int = 0
    proposes_without_forward: int = 0
    # Debug/test only (SPECGW_RECORD_DRAFTS=1): the proposed draft token ids. Reading
    # them synchronises with the device, so it is off in serving.
    record_drafts: bool = False
    recorded_drafts: list = field(default_factory=list)
    installed: dict[str, bool] = field(default_factory=dict)
    install_errors: dict[str, str] = field(default_factory=dict)
    _local: threading.local = field(default_factory=threading.local, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # ------------------------------------------------------------------ state
    def _stack(self) -> list[_Scope]:
        st = getattr(self._local, "stack", None)
        if st is None:
            st = self._local.stack = []
        return st

    def _suppress_depth(self) -> int:
        return getattr(self._local, "suppress", 0)

    def _propose(self) -> _ProposeState | None:
        return getattr(self._local, "propose", None)

    @property
    def in_propose(self) -> bool:
        return self._propose() is not None

    @property
    def fused_steps(self) -> int | None:
        st = self._propose()
        return st.fused_steps if st is not None else None

    # -------------------------------------------------------------- scopes
    @contextmanager
    def suppressed(self, role: str | None = None) -> Iterator[None]:
        """Profile, warm-up and capture runs: seen, never counted as serving work.
        ``role`` names whose graphs a capture outside any forward scope belongs to (MRV2
        opens ``torch.cuda.graph`` before the model's forward context)."""
        self._local.suppress = self._suppress_depth() + 1
        outer_role = getattr(self._local, "role_hint", None)
        if role is not None:
            self._local.role_hint = role
        try:
            yield
        finally:
            self._local.suppress -= 1
            self._local.role_hint = outer_role

    @contextmanager
    def propose(self) -> Iterator[None]:
        """One drafter ``propose()`` call: its first forward is the first pass."""
        outer = self._propose()
        state = _ProposeState()
        self._local.propose = state
        try:
            yield
        finally:
            self._local.propose = outer
            if self._suppress_depth() == 0:
                with self._lock:
                    self.proposes += 1
                    if state.forwards == 0:
                        self.proposes_without_forward += 1

    @contextmanager
    def covering(self, steps: int) -> Iterator[None]:
        """Inside, a FULL graph replay of the drafter stands for ``steps`` forwards (a
        fused multi-step decode graph replays k-1 drafter steps at once)."""
        st = self._propose()
        if st is None:
            yield
            return
        prev, st.fused_steps = st.fused_steps, max(1, steps)
        try:
            yield
        finally:
            st.fused_steps = prev

    @contextmanager
    def forward(
        self, role: str, dispatched: object, phase: str | None = None, weight: int = 1
    ) -> Iterator[None]:
        st = self._propose() if role == ROLE_DRAFT else None
        if phase is None:
            if role == ROLE_DRAFT:
                phase = PHASE_FIRST if st is None or st.forwards == 0 else PHASE_STEP
            else:
                phase = PHASE_TARGET
        scope = _Scope(role, phase, mode_name(dispatched), weight, self._suppress_depth() == 0)
        stack = self._stack()
        stack.append(scope)
        try:
            yield
        finally:
            stack.pop()
            self._close(scope, st)

    def _close(self, scope: _Scope, st: _ProposeState | None) -> None:
        role = scope.role
        known = self.known_pieces.get(role, 0)
        if scope.pieces > known:  # learnt at capture too: the split graph's size
            self.known_pieces[role] = known = scope.pieces
        if not scope.counted:
            return
        executed, replayed, expected = classify(
            scope.dispatched, scope.replays, scope.pieces, scope.pieces_replayed, known)
        w = scope.weight
        key = (role, scope.phase)
        with self._lock:  # the one lock taken per forward
            self.forwards[(role, scope.phase, scope.dispatched, executed)] += w
            if scope.replays:
                self.replays[key] += scope.replays
            if expected:
                self.pieces_expected[key] += expected * w
                self.pieces_replayed[key] += replayed * w
        if st is not None:
            st.forwards += w

    # ------------------------------------------------------- torch callbacks
    def on_replay(self) -> None:
        stack = self._stack()
        if stack:
            stack[-1].replays += 1  # added to the ledger when the scope closes
        elif self._suppress_depth() == 0:
            with self._lock:
                self.unattributed_replays += 1

    def piece(self, fn, *args, **kwargs):
        """Run one PIECEWISE wrapper call (a piece of a split graph) inside the open
        scope, noting whether it replayed. Integer bumps on the scope only: no lock."""
        stack = self._stack()
        if not stack:
            return fn(*args, **kwargs)
        scope = stack[-1]
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

    def on_capture(self) -> None:
        stack = self._stack()
        hint = getattr(self._local, "role_hint", None)
        role = stack[-1].role if stack else hint or "unknown"
        with self._lock:
            self.captures[role] += 1

    # ------------------------------------------------------------- reporting
    def snapshot(self) -> dict:
        """Plain-data view for ``collective_rpc`` (msgpack/pickle friendly)."""
        with self._lock:
            return {
                "forwards": [[*k, v] for k, v in sorted(self.forwards.items())],
                "replays": [[*k, v] for k, v in sorted(self.replays.items())],
                "pieces": [[*k, self.pieces_replayed[k], v]
                           for k, v in sorted(self.pieces_expected.items())],
                "known_pieces": dict(self.known_pieces),
                "piece_wrappers": dict(self.piece_wrappers),
                "captures": dict(self.captures),
                "unattributed_replays": self.unattributed_replays,
                "proposes": self.proposes,
                "proposes_without_forward": self.proposes_without_forward,
                "installed": dict(self.installed),
                "install_errors": dict(self.install_errors),
            }


LEDGER = Ledger(record_drafts=os.environ.get("SPECGW_RECORD_DRAFTS") == "1")
