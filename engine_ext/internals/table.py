"""The vLLM internals the probes wrap, as data: one :class:`InternalsTable` per vLLM
version range (see ``vllm_0_26.py`` and ``vllm_0_27_0_32.py``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InternalsTable:
    versions: str
    # Model Runner V1 (target) and its drafter proposers.
    v1_runner_module: str
    v1_runner_class: str
    v1_proposer_modules: tuple[str, ...]  # modules whose `set_forward_context` is drafter work
    v1_proposer_class: tuple[str, str]  # (module, class) of the proposer base
    # Model Runner V2 (target), its graph managers and the EAGLE/MTP speculator.
    v2_runner_module: str
    v2_runner_class: str
    v2_cudagraph_module: str  # holds CudaGraphManager / ModelCudaGraphManager
    v2_speculator: tuple[str, str]  # (module, class) owning propose/_run_model
    # Method that fuses the k-1 drafter decode steps into one FULL graph, if any.
    v2_fused_decode_method: str | None
    # --- issue #13 (per-piece accounting, dispatch rules): one block, keep together.
    # The static graph wrapper whose PIECEWISE instances are the split graph's pieces.
    cudagraph_wrapper: tuple[str, str] = ("vllm.compilation.cuda_graph", "CUDAGraphWrapper")
    # The speculator method capturing its graphs (inside the runner's capture_model).
    v2_speculator_capture_method: str = "capture"
    # CompilationMode member for piecewise compile, and its value (``compilation_config``
    # takes the int).
    compile_mode: tuple[str, str, str] = ("vllm.config.compilation", "CompilationMode",
                                          "VLLM_COMPILE")
    compile_mode_value: int = 3
    # Dispatch rules read from the sources (shared/notes/vllm-internals.md §1.2-1.3):
    # runtime modes a V1 drafter dispatcher can hand out (PIECEWISE keys only) ...
    v1_drafter_modes: tuple[str, ...] = ("PIECEWISE",)
    # ... MRV2's draft decode steps (FULL only: "PIECEWISE cudagraphs are not supported for
    # draft decodes") and its first pass: FULL for uniform decode batches, PIECEWISE mixed.
    v2_draft_step_modes: tuple[str, ...] = ("FULL",)
    v2_first_pass_uniform_mode: str = "FULL"
    v2_first_pass_mixed_mode: str = "PIECEWISE"
    # Source text that must still be there for those rules to hold: (module, snippet).
    dispatch_rule_sources: tuple[tuple[str, str], ...] = ()
    # Methods that only warm up, profile or capture (never counted as serving work).
    suppressed_runner_methods: tuple[str, ...] = ("_dummy_run", "profile_run", "capture_model")
    suppressed_proposer_methods: tuple[str, ...] = ("dummy_run",)
    forward_context_name: str = "set_forward_context"

    def compile_mode_matches(self) -> bool:
        """The installed vLLM's VLLM_COMPILE has the value we hand ``compilation_config``."""
        import importlib

        mod, cls, member = self.compile_mode
        value = getattr(getattr(importlib.import_module(mod), cls), member)
        return int(value) == self.compile_mode_value

    def dispatch_rules_hold(self) -> dict[str, bool]:
        """Each source snippet the dispatch rules rest on, found or not (source text, so
        MRV2 modules count even where they cannot import without Triton)."""
        import importlib.util
        from pathlib import Path

        out: dict[str, bool] = {}
        for mod, snippet in self.dispatch_rule_sources:
            spec = importlib.util.find_spec(mod)
            text = Path(spec.origin).read_text() if spec and spec.origin else ""
            out[f"{mod}: {snippet}"] = snippet in text
        return out

    def resolve_all(self) -> dict[str, bool]:
        """Which named internals exist in the installed vLLM (for the version guard)."""
        import importlib

        found: dict[str, bool] = {}

        def has(mod: str, *attrs: str) -> None:
            key = ".".join((mod, *attrs))
            try:
                obj = importlib.import_module(mod)
                for a in attrs:
                    obj = getattr(obj, a)
                found[key] = True
            except Exception:
                found[key] = False

        # --- issue #13 block: piece probes, capture roles, graph_config's rules
        has(*self.cudagraph_wrapper, "__call__")
        has(*self.cudagraph_wrapper, "__init__")
        has(*self.v2_speculator, self.v2_speculator_capture_method)
        has(*self.compile_mode)
        has("vllm.config.compilation", "CUDAGraphMode", "mixed_mode")
        has("vllm.config.compilation", "CUDAGraphMode", "decode_mode")
        has(self.v1_runner_module, self.forward_context_name)
        for m in self.suppressed_runner_methods:
            has(self.v1_runner_module, self.v1_runner_class, m)
        has(*self.v1_proposer_class, "propose")
        for m in self.suppressed_proposer_methods:
            has(*self.v1_proposer_class, m)
        for mod in self.v1_proposer_modules:
            has(mod, self.forward_context_name)
        has(self.v2_runner_module, self.forward_context_name)
        for m in ("_dummy_run", "capture_model"):
            has(self.v2_runner_module, self.v2_runner_class, m)
        has(self.v2_cudagraph_module, "CudaGraphManager", "run_fullgraph")
        has(self.v2_cudagraph_module, "ModelCudaGraphManager", "run_fullgraph")
        has(*self.v2_speculator, "propose")
        has(self.v2_speculator[0], self.forward_context_name)
        if self.v2_fused_decode_method:
            has(*self.v2_speculator, self.v2_fused_decode_method)
        return found
