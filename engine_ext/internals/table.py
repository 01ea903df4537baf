"""The vLLM internals the probes wrap, as data: one :class:`InternalsTable` per vLLM
version range (see ``vllm_0_26.py`` and ``vllm_0_27_0_32.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    # Methods that only warm up, profile or capture (never counted as serving work).
    suppressed_runner_methods: tuple[str, ...] = ("_dummy_run", "profile_run", "capture_model")
    suppressed_proposer_methods: tuple[str, ...] = ("dummy_run",)
    forward_context_name: str = "set_forward_context"
    # ---- `vllm serve` + plugin (engine_ext.endpoint_plugin / engine_ext.collector).
    # The front-end protocol our endpoint plugin implements (attach_router, init_state).
    endpoint_plugin_protocol: tuple[str, str] = field(kw_only=True)
    # EngineClient (AsyncLLM) -> its engine-core client, which lists one identity per
    # data-parallel engine and calls a utility on one of them. vLLM's own collective_rpc
    # returns engine 0's workers only under DP, so the collector calls every engine.
    engine_client_core_attr: str = field(kw_only=True)
    core_client_class: tuple[str, str] = field(kw_only=True)
    core_engines_attr: str = field(kw_only=True)
    core_utility_method: str = field(kw_only=True)
    # Where the running config names the worker extension (checked before any RPC).
    worker_extension_config: tuple[str, str] = field(kw_only=True)
    # The registry vLLM's /metrics serves (a multiprocess one with several API servers).
    prometheus_registry_fn: tuple[str, str] = field(kw_only=True)
    # vLLM's own Prometheus families our derived series are computed from.
    vllm_metric_names: tuple[str, ...] = field(kw_only=True)

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
