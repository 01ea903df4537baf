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
    # compiled drafters / worker inspection: the InternalsTable defaults (AST-checked
    # against these sources by tests/test_version_guard.py).
    # ---- OpenAI layer: no VLLMClientError (validation raises ValueError), and no
    # per-request spec-decode counts on CompletionOutput.
    client_error_class=None,
    spec_metrics_output_attr=None,
    spec_metrics_engine_arg=None,
    cpu_expand_fn=None,  # a CUDA build: the Triton expand kernel, no CPU stand-in
    # ---- `vllm serve` + plugin: the InternalsTable defaults.
)
