"""The probes' cost measured step by step inside one running engine: in on one engine
step, out on the next.

Why: on the H200's host two windows of the same server seconds apart differ by tens of
percent (docs/benchmarks.md, section 2), far more than the probes could cost, so a
comparison of windows, or of two server processes, cannot resolve the 1% the probes are
held to. Neighbouring engine steps of a steady batch do the same work milliseconds apart,
and whatever slows the host for seconds slows both. So for ``steps`` engine steps the
worker's step method is wrapped to switch the probes (``install.set_enabled``) before
each step, in pairs: one step in, one out, the order of each pair drawn at random (a
seeded coin), and to record when each step started and what the scheduler gave it. A
step's time is the start of the next step less its own start: everything the engine's
loop did for that step (schedule, forward, sample, draft, output), probes in or out.

``mode="aa"`` is the control: the same schedule and the same switching call per step,
but the probes stay in on both sides of every pair. Its difference must come out at zero
within its error bar, or the method is biased.

``groups`` (names of ``install.GROUPS``) prices one kind of wrapper alone: on the 'in'
steps only those are in, the others stay out for the whole alternation (``aa``: those in
on both sides). What some kinds count without the others is wrong (a propose without its
forwards reads as the silent eager fallback), so through such an alternation the model's
thread counts into a scratch ledger thread (``Ledger.divert``): the same work per forward,
never reported; its proposes are the record's ``proposes_counted``.

While an alternation runs the ledger counts only the steps the probes are in on; the
probes' own RPC reads (``specgw_probe_snapshot``) are recorded as spans, so the steps
that a read fell into can be left out of the step comparison and priced separately.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from engine_ext.internals.install import GROUPS, set_enabled
from engine_ext.probes.ledger import LEDGER, Ledger

MODES = ("ab", "aa")
MAX_STEPS = 200_000
FRAME_CALLS = 2000  # calls timed by frame_environment (~0.2 ms, in the first step only)


def _noop() -> None:
    return None


def _passing(*args: Any, **kwargs: Any) -> Any:
    return _noop(*args, **kwargs)


def frame_environment(calls: int = FRAME_CALLS) -> dict[str, Any]:
    """What one Python call costs on the thread that runs the model, inside the engine,
    and what hooks run on every frame there. Why: the probes' work is a few Python frames
    per engine step, a few microseconds where a loop times it alone (probe_cost.py), yet
    the steps measure tens of microseconds; a frame hook (a tracer, a profiler, a
    ``sys.monitoring`` tool, torch dynamo's frame evaluation callback) taxes every frame,
    which a bare loop elsewhere never sees."""
    import sys

    # The first call after the engine's own work of the step before, ahead of anything
    # else here: how far a probe's frame is from the caches (the loops below then time
    # warm calls).
    t0 = time.perf_counter_ns()
    _passing()
    first = time.perf_counter_ns() - t0
    env: dict[str, Any] = {"python": sys.version.split()[0], "trace": repr(sys.gettrace()),
                           "profile": repr(sys.getprofile()),
                           "first_call_through_wrapper_ns": first}
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        env["monitoring_tools"] = {i: tool for i in range(6)
                                   if (tool := monitoring.get_tool(i)) is not None}
    try:
        from torch._C._dynamo.eval_frame import get_eval_frame_callback

        env["eval_frame_callback"] = repr(get_eval_frame_callback())
    except Exception as exc:  # torch without dynamo, or the name moved
        env["eval_frame_callback"] = f"not read: {type(exc).__name__}: {exc}"
    for name, fn in (("call_ns", _noop), ("call_through_wrapper_ns", _passing)):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        env[name] = (time.perf_counter_ns() - t0) / calls
    env["calls"] = calls
    return env


class Alternation:
    """One alternation over ``steps`` engine steps of one worker (see the module doc)."""

    def __init__(self, worker: Any, step_method: str, token_fields: tuple[str, str],
                 steps: int, mode: str, seed: int, ledger: Ledger = LEDGER,
                 groups: tuple[str, ...] | None = None):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if groups is not None and (not groups or not set(groups) <= set(GROUPS)):
            raise ValueError(f"groups must name some of {GROUPS}, got {groups!r}")
        self.groups = None if groups is None else frozenset(groups)
        if not 2 <= steps <= MAX_STEPS or steps % 2:
            raise ValueError(f"steps must be even, 2..{MAX_STEPS}, got {steps}")
        self.worker, self.step_method, self.mode, self.steps = worker, step_method, mode, steps
        self.total_field, self.per_request_field = token_fields
        self.ledger = ledger
        rng = random.Random(seed)
        # 1 = probes in. Each pair is (1, 0) or (0, 1) by a coin, so "in" is not always
        # first (the first step after a switch would otherwise carry any switching cost).
        self.schedule: list[int] = []
        for _ in range(steps // 2):
            self.schedule += [1, 0] if rng.random() < 0.5 else [0, 1]
        self.t_ns: list[int] = []
        self.tokens: list[int] = []
        self.reqs: list[int] = []
        self.rpc_spans: list[tuple[str, int, int]] = []  # (kind, start ns, end ns)
        self.done = False
        self.frame_env: dict[str, Any] | None = None  # frame_environment(), first step
        self._lock = threading.Lock()  # the RPC thread reads while the model thread runs
        self._original = getattr(worker, step_method)
        self._was_enabled = ledger.enabled
        # Drafter proposes the ledger counted over the window: one per step the probes
        # were in on (a check that the switch reached the worker; read at start and end
        # only, never per step).
        self._proposes_at_start: int | None = None
        self.proposes_counted: int | None = None
        self._diverted: tuple | None = None  # (scratch, own) while groups divert counting
        self._divert_thread: int | None = None
        self._undivert_pending = False  # finished on another thread: undone at next step

    def start(self) -> None:
        # An instance attribute shadows the class's method for this worker alone; vLLM's
        # worker wrapper looks the method up on the worker at every step.
        self._proposes_at_start = self.ledger.proposes
        setattr(self.worker, self.step_method, self._step)

    @property
    def settled(self) -> bool:
        """Done, and the model's thread counts into its own ledger again."""
        return self.done and not self._undivert_pending

    def _step(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        if self._undivert_pending:  # finished from another thread: undone here, on ours
            self._undivert_pending = False
            self.worker.__dict__.pop(self.step_method, None)
            self._undivert()
            return self._original(scheduler_output, *args, **kwargs)
        now = time.perf_counter_ns()
        i = len(self.t_ns)
        if i < self.steps:
            if i == 0:  # on the model's thread, as its steps
                if self.groups is not None:
                    self._diverted = self.ledger.divert()
                    self._divert_thread = threading.get_ident()
                t0 = time.perf_counter_ns()
                try:  # a diagnostic: whatever it meets, the alternation goes on
                    self.frame_env = frame_environment()
                except Exception as exc:
                    self.frame_env = {"error": f"{type(exc).__name__}: {exc}"}
                self.note_rpc("frame_environment", t0, time.perf_counter_ns())
            state = self.schedule[i] if self.mode == "ab" else 1
            set_enabled(bool(state), self.ledger, self.groups)
            per_req = getattr(scheduler_output, self.per_request_field, None) or {}
            with self._lock:
                self.t_ns.append(now)
                self.tokens.append(int(getattr(scheduler_output, self.total_field, 0)))
                self.reqs.append(len(per_req))
        else:  # this step's start closes the last measured step
            with self._lock:
                self.t_ns.append(now)
            self.finish()
        return self._original(scheduler_output, *args, **kwargs)

    def finish(self) -> None:
        if self.done:
            return
        self.done = True
        try:
            set_enabled(self._was_enabled, self.ledger)
        finally:
            if self._diverted is not None:
                self.proposes_counted = self._diverted[0].proposes
            elif self._proposes_at_start is not None:
                self.proposes_counted = self.ledger.proposes - self._proposes_at_start
            # The divert is the model thread's own (a thread-local): only that thread
            # can undo it. The stop RPC runs there (collective_rpc, between steps); were
            # it ever elsewhere, the step hook stays for one step more to undo it.
            if self._diverted is not None and threading.get_ident() != self._divert_thread:
                self._undivert_pending = True
            else:
                self.worker.__dict__.pop(self.step_method, None)
                self._undivert()

    def _undivert(self) -> None:
        if self._diverted is not None:
            self.ledger.undivert(self._diverted[1])
            self._diverted = None

    def note_rpc(self, kind: str, t0_ns: int, t1_ns: int) -> None:
        """One of our RPCs ran on the model's thread from ``t0_ns`` to ``t1_ns``: the
        step it fell into did more than a step's work."""
        if not self.done:
            with self._lock:
                self.rpc_spans.append((kind, t0_ns, t1_ns))

    def record(self) -> dict[str, Any]:
        """The whole record once done; before, only how far it got (a reader polling a
        running alternation must not cost the steps it measures a copy of every list)."""
        with self._lock:
            head = {"mode": self.mode, "steps": self.steps, "done": self.settled,
                    "recorded": min(len(self.tokens), self.steps),
                    "groups": None if self.groups is None else sorted(self.groups)}
            if not self.done:
                return head
            return {**head, "proposes_counted": self.proposes_counted,
                    "frame_environment": self.frame_env,
                    "state": self.schedule, "t_ns": list(self.t_ns),
                    "tokens": list(self.tokens), "reqs": list(self.reqs),
                    "rpc_spans": [list(s) for s in self.rpc_spans]}


CURRENT: Alternation | None = None  # this process's last alternation
