"""One engine step's whole probe path, built from the real wrapper factories of
``engine_ext/internals/install.py`` around stand-ins of the vLLM functions they wrap, for
``probe_cost.py`` to time against the same stand-ins unwrapped. No vLLM, no torch, no GPU:
the stand-ins do nothing, so "probed step" minus "bare step" is the CPU work the probes
add (wrapper calls, closures, ledger), which device runs cannot resolve below their noise.

The call shapes follow vLLM 0.27-0.32 (the versions ``vllm_0_27_0_32`` names), and for
runner V2 also vLLM 0.26's (``v2_full_k3_0_26``, what the device runs):

* runner V2, uniform decode, k speculative tokens: the target replays one FULL graph
  through ``ModelCudaGraphManager.run_fullgraph`` (which calls the base
  ``CudaGraphManager.run_fullgraph``; no ``set_forward_context`` on the FULL path); the
  speculator's ``propose`` replays the FULL draft-prefill graph (the first pass) through
  ``run_fullgraph`` and calls ``_fused_multi_step_decode`` with six positional arguments,
  which replays one FULL graph covering k-1 drafter steps. Each graph replay goes through
  ``torch.cuda.CUDAGraph.replay``; the graphs were captured outside any forward scope
  (as vLLM's manager does, ``torch.cuda.graph`` before the forward context), which marks
  them whole.
* runner V1, PIECEWISE: each forward enters its module's ``set_forward_context`` with
  ``cudagraph_runtime_mode=PIECEWISE`` and calls ``pieces`` PIECEWISE ``CUDAGraphWrapper``
  instances, each replaying one graph; one target forward, then a ``propose`` of k drafter
  forwards.
"""

from __future__ import annotations

import contextlib
import enum
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from engine_ext.internals import install as inst
from engine_ext.probes.ledger import ROLE_DRAFT, ROLE_TARGET, Ledger


class Mode(enum.Enum):
    """Stands for vLLM's ``CUDAGraphMode``: the wrappers read only its ``name``."""

    NONE = 0
    PIECEWISE = 1
    FULL = 2


class CUDAGraph:
    """Stands for ``torch.cuda.CUDAGraph``: ``replay`` is what the probe wraps."""

    def replay(self) -> None:
        return None

    def capture_begin(self) -> None:
        return None


def _forward_context_module(name: str) -> types.ModuleType:
    """A module holding a ``set_forward_context`` with vLLM's parameter names (the label
    reader works them out from the signature, as it does on vLLM's)."""
    mod = types.ModuleType(name)

    @contextlib.contextmanager
    def set_forward_context(attn_metadata: object, vllm_config: object, virtual_engine: int = 0,
                            num_tokens: int | None = None,
                            num_tokens_across_dp: object = None,
                            cudagraph_runtime_mode: Mode = Mode.NONE,
                            batch_descriptor: object = None) -> Iterator[None]:
        yield None

    mod.set_forward_context = set_forward_context
    return mod


@contextlib.contextmanager
def _torch_standin(graph_cls: type) -> Iterator[None]:
    """``install._graph_probes`` imports ``torch`` and wraps ``torch.cuda.CUDAGraph``:
    for the call, ``torch`` is a module whose ``cuda.CUDAGraph`` is ``graph_cls``, so the
    real factory wraps the stand-in; the real torch (if imported) is put back after."""
    real = sys.modules.get("torch")
    fake = types.ModuleType("torch")
    fake.cuda = types.SimpleNamespace(CUDAGraph=graph_cls)
    sys.modules["torch"] = fake
    try:
        yield
    finally:
        if real is None:
            del sys.modules["torch"]
        else:
            sys.modules["torch"] = real


@dataclass(frozen=True)
class Table:
    """The one field of ``InternalsTable`` that ``install._piece_probes`` reads."""

    cudagraph_wrapper: tuple[str, str]


def v2_step(ledger: Ledger, probed: bool, k: int = 3, fused: bool = True
            ) -> Callable[[], None]:
    """One runner V2 decode step at ``k`` speculative tokens (see the module docstring).
    ``fused`` False is vLLM 0.26's shape (the version the device runs): no fused
    multi-step decode, its ``_multi_step_decode`` replays one FULL graph per drafter step
    2..k through ``run_fullgraph``."""
    graph_cls = type("CUDAGraph", (CUDAGraph,), {})

    class CudaGraphManager:
        def __init__(self, role: str) -> None:
            g = graph_cls()
            # As vLLM's manager captures: in its capture, outside any forward scope, under
            # the role the runner's or the speculator's capture names.
            with ledger.suppressed(role), ledger.whole_captures():
                g.capture_begin()
            self.graphs = {"desc": g}

        def run_fullgraph(self, desc: str) -> None:
            self.graphs[desc].replay()

    class ModelCudaGraphManager(CudaGraphManager):
        def run_fullgraph(self, desc: str) -> str:
            super().run_fullgraph(desc)
            return "hidden_states"

    class Speculator:
        def __init__(self) -> None:
            self.prefill_cudagraph_manager = CudaGraphManager(ROLE_DRAFT)
            self.decode_cudagraph_manager = CudaGraphManager(ROLE_DRAFT)
            self.draft_tokens = "draft_tokens"

        def propose(self, num_reqs: int) -> str:
            self.prefill_cudagraph_manager.run_fullgraph("desc")
            if fused:
                self._fused_multi_step_decode(num_reqs, False, "desc", None, None, k)
            else:
                for _ in range(1, k):
                    self.decode_cudagraph_manager.run_fullgraph("desc")
            return self.draft_tokens

        def _fused_multi_step_decode(self, num_reqs: int, skip_attn: bool, batch_desc: str,
                                     num_tokens_across_dp: object,
                                     seq_lens_cpu_upper_bound: object,
                                     num_speculative_steps: int) -> None:
            self.decode_cudagraph_manager.run_fullgraph(batch_desc)

    n0 = len(inst._PATCHES)
    if probed:  # as install() and _graph_probes() apply them
        with _torch_standin(graph_cls):
            inst._graph_probes(ledger)
        inst._wrap_attr(Speculator, "propose", inst._propose_probe(ledger),
                        "v2.draft.propose", ledger, "propose")
        inst._wrap_attr(Speculator, "_fused_multi_step_decode", inst._fused_probe(ledger),
                        "v2.draft._fused_multi_step_decode", ledger, "fused")
    del inst._PATCHES[n0:]  # stand-ins only: install.set_enabled must not switch them
    target, spec = ModelCudaGraphManager(ROLE_TARGET), Speculator()

    def step() -> None:
        target.run_fullgraph("desc")
        spec.propose(8)

    return step


def v1_step(ledger: Ledger, probed: bool, k: int = 3, target_pieces: int = 5,
            draft_pieces: int = 2) -> Callable[[], None]:
    """One runner V1 PIECEWISE step: a target forward of ``target_pieces`` pieces, a
    propose of ``k`` drafter forwards of ``draft_pieces`` pieces each."""
    graph_cls = type("CUDAGraph", (CUDAGraph,), {})
    runner_mod = _forward_context_module("standin_v1_runner")
    draft_mod = _forward_context_module("standin_v1_proposer")
    wrapper_mod = types.ModuleType(f"standin_cuda_graph_{id(ledger)}_{int(probed)}")

    class CUDAGraphWrapper:
        def __init__(self, runnable: object, runtime_mode: Mode) -> None:
            self.runnable, self.runtime_mode, self.graph = runnable, runtime_mode, graph_cls()

        def __call__(self, *args: object) -> None:
            self.graph.replay()

    class Proposer:
        def propose(self, pieces: list[CUDAGraphWrapper]) -> str:
            for _ in range(k):
                with draft_mod.set_forward_context(None, None,
                                                   cudagraph_runtime_mode=Mode.PIECEWISE):
                    for p in pieces:
                        p("hidden_states")
            return "draft_tokens"

    wrapper_mod.CUDAGraphWrapper = CUDAGraphWrapper
    n0 = len(inst._PATCHES)
    if probed:  # as install(), _graph_probes() and _piece_probes() apply them
        with _torch_standin(graph_cls):
            inst._graph_probes(ledger)
        inst._wrap_attr(runner_mod, "set_forward_context",
                        inst._forward_context_probe(ROLE_TARGET, ledger),
                        "v1.target.set_forward_context", ledger, "forward_context")
        inst._wrap_attr(Proposer, "propose", inst._propose_probe(ledger), "v1.draft.propose",
                        ledger, "propose")
        inst._wrap_attr(draft_mod, "set_forward_context",
                        inst._forward_context_probe(ROLE_DRAFT, ledger),
                        "v1.draft.set_forward_context", ledger, "forward_context")
        sys.modules[wrapper_mod.__name__] = wrapper_mod  # _piece_probes imports it by name
        try:
            inst._piece_probes(Table((wrapper_mod.__name__, "CUDAGraphWrapper")), ledger)
        finally:
            del sys.modules[wrapper_mod.__name__]
    del inst._PATCHES[n0:]  # stand-ins only: install.set_enabled must not switch them
    backend = types.SimpleNamespace(vllm_backend=types.SimpleNamespace(prefix="model"))
    tpieces = [CUDAGraphWrapper(backend, Mode.PIECEWISE) for _ in range(target_pieces)]
    dpieces = [CUDAGraphWrapper(backend, Mode.PIECEWISE) for _ in range(draft_pieces)]
    proposer = Proposer()

    def step() -> None:
        with runner_mod.set_forward_context(None, None, cudagraph_runtime_mode=Mode.PIECEWISE):
            for p in tpieces:
                p("input_ids")
        proposer.propose(dpieces)

    return step


STEPS: dict[str, Callable[..., Callable[[], None]]] = {
    "v2_full_k3": v2_step,
    "v2_full_k3_0_26": lambda ledger, probed: v2_step(ledger, probed, fused=False),
    "v1_piecewise_k3": v1_step}
