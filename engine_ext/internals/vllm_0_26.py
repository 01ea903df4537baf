"""vLLM 0.26.x (the CUDA build that runs on the H200): MRV2's EAGLE/MTP speculator lives
in ``spec_decode.autoregressive``; no fused multi-step decode graph."""

from engine_ext.internals.table import InternalsTable

TABLE = InternalsTable(
    versions=">=0.26,<0.27",
    # --- issue #13 block (pieces, dispatch rules)
    dispatch_rule_sources=(
        ("vllm.v1.spec_decode.llm_base_proposer",
         "eagle_cudagraph_mode = CUDAGraphMode.PIECEWISE"),
        ("vllm.v1.worker.gpu.spec_decode.autoregressive.speculator",
         "PIECEWISE cudagraphs are not supported for draft decodes"),
        ("vllm.v1.worker.gpu.spec_decode.autoregressive.speculator",
         "prefill_cudagraph_manager.run_pw_graph("),
    ),
    v1_runner_module="vllm.v1.worker.gpu_model_runner",
    v1_runner_class="GPUModelRunner",
    v1_proposer_modules=(
        "vllm.v1.spec_decode.llm_base_proposer",
        "vllm.v1.spec_decode.dflash",
    ),
    v1_proposer_class=("vllm.v1.spec_decode.llm_base_proposer", "SpecDecodeBaseProposer"),
    v2_runner_module="vllm.v1.worker.gpu.model_runner",
    v2_runner_class="GPUModelRunner",
    v2_cudagraph_module="vllm.v1.worker.gpu.cudagraph_utils",
    v2_speculator=(
        "vllm.v1.worker.gpu.spec_decode.autoregressive.speculator",
        "AutoRegressiveSpeculator",
    ),
    v2_fused_decode_method=None,
    # compiled drafters / worker inspection (same names as 0.27-0.32; AST-checked)
    registry_module="vllm.model_executor.models.registry",
    registry_class="_ModelRegistry",
    registry_resolve_method="resolve_model_cls",
    drafter_models_table="_SPECULATIVE_DECODING_MODELS",
    compile_decorator=("vllm.compilation.decorators", "support_torch_compile"),
    compile_wrapper_class=("vllm.compilation.wrapper", "TorchCompileWithNoGuardsWrapper"),
    compile_opt_out_attr="do_not_compile",
    current_config_fn=("vllm.config", "get_current_vllm_config_or_none"),
    v1_drafter_attr="drafter",
    v2_drafter_attr="speculator",
    drafter_model_attr="model",
    v2_draft_model_owner=("vllm.v1.worker.gpu.spec_decode.speculator", "DraftModelSpeculator"),
    v1_drafter_dispatcher_attr="cudagraph_dispatcher",
    dispatcher_class=("vllm.v1.cudagraph_dispatcher", "CudagraphDispatcher"),
    worker_base_class=("vllm.v1.worker.worker_base", "WorkerBase"),
    worker_runner_attr="model_runner",
    worker_rank_attr="rank",
    runner_config_attr="vllm_config",
    # ---- `vllm serve` + plugin
    endpoint_plugin_protocol=("vllm.plugins.endpoint_plugins.interface", "EndpointPlugin"),
    engine_client_core_attr="engine_core",
    core_client_class=("vllm.v1.engine.core_client", "AsyncMPClient"),
    core_engines_attr="core_engines",
    core_utility_method="_call_utility_async",
    worker_extension_config=("parallel_config", "worker_extension_cls"),
    prometheus_registry_fn=("vllm.v1.metrics.prometheus", "get_prometheus_registry"),
    vllm_metric_names=(
        "vllm:generation_tokens", "vllm:prompt_tokens", "vllm:spec_decode_num_drafts",
        "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_accepted_tokens_per_pos",
    ),
)
