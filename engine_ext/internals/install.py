"""Install the probes described by an :class:`InternalsTable` into the running vLLM.

Each probe is a thin wrapper that opens a ledger scope and calls the original; nothing
here reads a tensor, so the decode loop gains no GPU synchronisation. Every wrapper is
recorded in ``ledger.installed`` (or ``install_errors``): a missing one turns the
coverage flag off instead of silently under-counting.

:func:`set_enabled` takes the per-step wrappers out again (and puts them back) in a
running process, so probes-on and probes-off can be compared inside one server, seconds
apart, instead of across two server processes, each with its own start-to-start offset
(``benchmarks/probe_toggle.py``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import logging
from collections.abc import Callable
from typing import Any

from engine_ext.internals.table import InternalsTable
from engine_ext.probes.ledger import LEDGER, ROLE_DRAFT, ROLE_TARGET, UNKNOWN, Ledger

log = logging.getLogger("engine_ext.probes")

_MARK = "__specgw_probe__"
# What set_enabled switches, by the kind of work each wrapper adds to an engine step, so
# that an alternation (probes.alternate) can price one kind alone.
GROUPS = ("replay", "pieces", "forward_context", "propose", "fused", "suppress")
# (group, owner, attribute, original, wrapper) of every switchable probe, for set_enabled.
_PATCHES: list[tuple[str, Any, str, Any, Any]] = []


def _wrap_attr(owner: Any, name: str, make: Callable[[Callable], Callable], key: str,
               ledger: Ledger, group: str | None = None) -> None:
    """Replace ``owner.name`` with ``make(original)``, once per process. ``group`` (one of
    ``GROUPS``) makes it switchable by :func:`set_enabled`; None keeps it in when the
    probes are taken out: set-up-time hooks (a piece wrapper built while out would
    otherwise never be counted once back in)."""
    try:
        orig = getattr(owner, name)
        if getattr(orig, _MARK, False):
            ledger.installed[key] = True
            return
        wrapped = make(orig)
        if not isinstance(orig, type):
            with contextlib.suppress(AttributeError, TypeError):
                functools.update_wrapper(wrapped, orig)
        setattr(wrapped, _MARK, True)
        setattr(owner, name, wrapped)
        if group is not None:
            _PATCHES.append((group, owner, name, orig, wrapped))
        ledger.installed[key] = True
    except Exception as exc:  # keep serving; the coverage flag reports the gap
        ledger.installed[key] = False
        ledger.install_errors[key] = f"{type(exc).__name__}: {exc}"
        log.warning("probe %s not installed: %s", key, exc)


def _resolve(mod: str, cls: str | None = None) -> Any:
    obj = importlib.import_module(mod)
    return getattr(obj, cls) if cls else obj


_MODE_ARG = "cudagraph_runtime_mode"


def dispatch_label_reader(fn: Callable) -> Callable[[tuple, dict], object]:
    """How to read the dispatcher's decision from a call of ``fn`` (vLLM's
    ``set_forward_context``), worked out once from its signature: by keyword, by
    position, or the signature's default when the caller leaves it out (that default is
    what vLLM's graph wrappers then read). Without such a parameter the label is
    unknown, and so is every forward counted through it."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return lambda args, kwargs: kwargs.get(_MODE_ARG, UNKNOWN)
    names = [p.name for p in params]
    if _MODE_ARG not in names:
        return lambda args, kwargs: kwargs.get(_MODE_ARG, UNKNOWN)
    param = params[names.index(_MODE_ARG)]
    pos = names.index(_MODE_ARG) if param.kind in (
        param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD) else None
    default = UNKNOWN if param.default is param.empty else param.default

    def read(args: tuple, kwargs: dict) -> object:
        if _MODE_ARG in kwargs:
            return kwargs[_MODE_ARG]
        if pos is not None and len(args) > pos:
            return args[pos]
        return default

    return read


def _forward_context_probe(role: str, ledger: Ledger):
    """Wrap a module's ``set_forward_context`` so each entry is one ``role`` forward,
    labelled with the dispatcher's ``cudagraph_runtime_mode`` however it was passed."""

    def make(orig):
        label = dispatch_label_reader(orig)

        def probed(*args, **kwargs):
            return _ProbedContext(ledger.forward(role, label(args, kwargs)),
                                  orig(*args, **kwargs))

        return probed

    return make


class _ProbedContext:
    """``with ledger.forward(...), set_forward_context(...) as ctx``, as one object: runner
    V1 enters one per forward, k+1 per engine step, and a ``contextlib.contextmanager``
    wrapper would add a generator and its manager to each (the ledger's scope is reused,
    vLLM's own manager is what the caller gets without the probes)."""

    __slots__ = ("inner", "scope")

    def __init__(self, scope: Any, inner: Any):
        self.scope, self.inner = scope, inner

    def __enter__(self) -> Any:
        self.scope.__enter__()
        try:
            return self.inner.__enter__()
        except BaseException:
            self.scope.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: Any) -> Any:
        try:
            return self.inner.__exit__(*exc)
        finally:
            self.scope.__exit__(None, None, None)


def _suppress_probe(ledger: Ledger, role: str | None = None):
    def make(orig):
        def probed(*args, **kwargs):
            with ledger.suppressed(role):
                return orig(*args, **kwargs)

        return probed

    return make


def _propose_probe(ledger: Ledger):
    def make(orig):
        def probed(*args, **kwargs):
            # MRV2 warms up through propose(dummy_run=True / is_profile=True).
            if kwargs and (kwargs.get("dummy_run") or kwargs.get("is_profile")):
                with ledger.suppressed(), ledger.propose():
                    return orig(*args, **kwargs)
            with ledger.propose():
                drafts = orig(*args, **kwargs)
            if ledger.record_drafts:
                ledger.recorded_drafts.append(drafts.tolist())  # syncs: test/debug only
            return drafts

        return probed

    return make


def _whole_capture_probe(ledger: Ledger):
    def make(orig):
        def probed(*args, **kwargs):
            with ledger.whole_captures():
                return orig(*args, **kwargs)

        return probed

    return make


def _fused_probe(ledger: Ledger):
    def make(orig):
        def probed(self, *args, **kwargs):
            # Signature (0.27-0.32): (num_reqs, skip_attn, batch_desc, num_tokens_across_dp,
            #                         seq_lens_cpu_upper_bound, num_speculative_steps)
            steps = kwargs.get("num_speculative_steps", args[5] if len(args) > 5 else None)
            if steps is None:
                steps = getattr(self, "num_speculative_steps", 1)
            with ledger.covering(int(steps) - 1):
                return orig(self, *args, **kwargs)

        return probed

    return make


_PIECE = "_specgw_piece"


def _piece_probes(table: InternalsTable, ledger: Ledger) -> None:
    """Count split-graph pieces: every PIECEWISE ``CUDAGraphWrapper`` wraps one piece of a
    ``@support_torch_compile`` module. Whether an instance is a piece is decided once in
    ``__init__`` (an instance attribute), so the per-call cost is one attribute read."""
    try:
        wrapper_cls = _resolve(*table.cudagraph_wrapper)
    except Exception as exc:
        ledger.installed["graph.pieces"] = False
        ledger.install_errors["graph.pieces"] = f"{type(exc).__name__}: {exc}"
        return

    def init_make(orig):
        def __init__(self, *args, **kwargs):
            orig(self, *args, **kwargs)
            mode = self.__dict__.get("runtime_mode")
            piece = getattr(mode, "name", str(mode)) == "PIECEWISE"
            self.__dict__[_PIECE] = piece
            if piece:
                backend = getattr(self.__dict__.get("runnable"), "vllm_backend", None)
                ledger.on_piece_wrapper(getattr(backend, "prefix", None))

        return __init__

    def call_make(orig):
        def __call__(self, *args, **kwargs):
            if self.__dict__.get(_PIECE):
                return ledger.piece(orig, self, *args, **kwargs)
            return orig(self, *args, **kwargs)

        return __call__

    _wrap_attr(wrapper_cls, "__init__", init_make, "graph.pieces.__init__", ledger)
    _wrap_attr(wrapper_cls, "__call__", call_make, "graph.pieces.__call__", ledger,
               "pieces")


def _graph_probes(ledger: Ledger) -> None:
    """Count real replays and captures at the one place every graph goes through."""
    try:
        import torch

        graph_cls = torch.cuda.CUDAGraph
    except Exception as exc:
        ledger.install_errors["torch.cuda.CUDAGraph"] = str(exc)
        return

    def capture_make(orig):
        def capture_begin(self, *args, **kwargs):
            ledger.on_capture(self)
            return orig(self, *args, **kwargs)

        return capture_begin

    _wrap_attr(graph_cls, "replay", ledger.replay_probe, "torch.cuda.CUDAGraph.replay", ledger,
               "replay")
    _wrap_attr(graph_cls, "capture_begin", capture_make, "torch.cuda.CUDAGraph.capture_begin",
               ledger)


def set_enabled(enabled: bool, ledger: Ledger = LEDGER,
                groups: frozenset[str] | None = None) -> int:
    """Put every per-step probe in (``True``) or take it out (``False``): with them out,
    vLLM runs its own functions on every step and the ledger counts no forward (the
    set-up-time hooks stay: they run when a graph is built, not per step). ``groups``
    (names of ``GROUPS``) puts only those kinds in, the rest out: what they count is then
    incomplete, so it is for pricing one kind alone. Call it between forwards
    (``collective_rpc`` runs on the model's thread between steps). Returns the number of
    wrappers switched (each set in or out)."""
    for group, owner, name, orig, wrapped in _PATCHES:
        on = enabled and (groups is None or group in groups)
        setattr(owner, name, wrapped if on else orig)
    ledger.enabled = enabled
    return len(_PATCHES)


def install(table: InternalsTable, ledger: Ledger = LEDGER) -> Ledger:  # noqa: C901  (one patch per table entry)
    set_enabled(True, ledger)  # a second install must see its own wrappers, not wrap twice
    _graph_probes(ledger)
    fc = table.forward_context_name

    # ---- Model Runner V1 (also the CPU runner's base class)
    try:
        runner_mod = _resolve(table.v1_runner_module)
        runner_cls = getattr(runner_mod, table.v1_runner_class)
        _wrap_attr(runner_mod, fc, _forward_context_probe(ROLE_TARGET, ledger),
                   f"v1.target.{fc}", ledger, "forward_context")
        for m in table.suppressed_runner_methods:
            _wrap_attr(runner_cls, m, _suppress_probe(ledger, ROLE_TARGET),
                       f"v1.target.{m}", ledger, "suppress")
        base_mod, base_name = table.v1_proposer_class
        proposer = _resolve(base_mod, base_name)
        _wrap_attr(proposer, "propose", _propose_probe(ledger), "v1.draft.propose", ledger,
                   "propose")
        for m in table.suppressed_proposer_methods:
            _wrap_attr(proposer, m, _suppress_probe(ledger, ROLE_DRAFT), f"v1.draft.{m}",
                       ledger, "suppress")
        for mod_name in table.v1_proposer_modules:
            mod = _resolve(mod_name)
            _wrap_attr(mod, fc, _forward_context_probe(ROLE_DRAFT, ledger),
                       f"v1.draft.{mod_name.rsplit('.', 1)[-1]}.{fc}", ledger, "forward_context")
            # Subclasses that override propose/dummy_run need their own wrapper.
            for obj in vars(mod).values():
                if isinstance(obj, type) and issubclass(obj, proposer) and obj is not proposer:
                    for m in ("propose", *table.suppressed_proposer_methods):
                        if m in vars(obj):
                            _wrap_attr(obj, m, _propose_probe(ledger) if m == "propose"
                                       else _suppress_probe(ledger, ROLE_DRAFT),
                                       f"v1.draft.{obj.__name__}.{m}", ledger,
                                       "propose" if m == "propose" else "suppress")
    except Exception as exc:
        ledger.install_errors["v1"] = f"{type(exc).__name__}: {exc}"
        log.warning("Model Runner V1 probes unavailable: %s", exc)

    # ---- Split-graph pieces (both runners, target and drafter)
    _piece_probes(table, ledger)

    # ---- Model Runner V2 (needs triton to import; absent is fine when V1 runs)
    try:
        runner_mod = _resolve(table.v2_runner_module)
        runner_cls = getattr(runner_mod, table.v2_runner_class)
        cg = _resolve(table.v2_cudagraph_module)
        spec_mod = _resolve(table.v2_speculator[0])
        spec_cls = getattr(spec_mod, table.v2_speculator[1])
    except Exception as exc:
        ledger.install_errors["v2"] = f"{type(exc).__name__}: {exc}"
        log.info("Model Runner V2 probes unavailable (fine unless V2 runs): %s", exc)
        return ledger
    _wrap_attr(runner_mod, fc, _forward_context_probe(ROLE_TARGET, ledger),
               f"v2.target.{fc}", ledger, "forward_context")
    for m in ("_dummy_run", "profile_run", "capture_model"):
        if hasattr(runner_cls, m):
            _wrap_attr(runner_cls, m, _suppress_probe(ledger, ROLE_TARGET),
                       f"v2.target.{m}", ledger, "suppress")
    # The speculator's FULL graphs are captured inside the runner's capture_model, and
    # torch.cuda.graph starts capturing before any forward context: name the role here.
    # Those graphs (the target's too) are marked whole at capture and counted at replay
    # (Ledger.on_replay): run_fullgraph needs no wrapper on the decode path. Every V2
    # manager's capture goes through the base class's (the subclasses call super()).
    _wrap_attr(cg.CudaGraphManager, "capture", _whole_capture_probe(ledger), "v2.capture",
               ledger)
    _wrap_attr(spec_cls, table.v2_speculator_capture_method,
               _suppress_probe(ledger, ROLE_DRAFT),
               f"v2.draft.{table.v2_speculator_capture_method}", ledger, "suppress")
    _wrap_attr(spec_cls, "propose", _propose_probe(ledger), "v2.draft.propose", ledger,
               "propose")
    _wrap_attr(spec_mod, fc, _forward_context_probe(ROLE_DRAFT, ledger),
               f"v2.draft.{fc}", ledger, "forward_context")
    if table.v2_fused_decode_method:
        _wrap_attr(spec_cls, table.v2_fused_decode_method, _fused_probe(ledger),
                   f"v2.draft.{table.v2_fused_decode_method}", ledger, "fused")
    return ledger
