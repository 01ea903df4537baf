"""A vLLM ``StatLoggerBase`` that feeds the gateway's token and acceptance metrics.

It runs in the API process on every engine step's stats, so counts come from the
engine (never from SSE chunks). vLLM's own PrometheusStatLogger keeps running beside
it and exports the ``vllm:*`` series unchanged.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase

from monitoring import metrics as m


def accepted_histogram(num_drafts: int, accepted_per_pos: list[int]) -> list[int]:
    """Exact per-draft distribution of accepted tokens from vLLM's per-position counts.

    Acceptance is a prefix (position i is accepted only if 0..i-1 were), so the drafts
    with >= i accepted tokens number ``accepted_per_pos[i-1]`` and those with exactly j
    number ``ge(j) - ge(j+1)``.
    """
    ge = [num_drafts, *accepted_per_pos, 0]
    return [ge[j] - ge[j + 1] for j in range(len(accepted_per_pos) + 1)]


class GatewayStatLogger(StatLoggerBase):
    model_name = "unknown"  # set by the engine builder before AsyncLLM is created

    def __init__(self, vllm_config: Any, engine_index: int = 0):
        self.model = type(self).model_name
        self.drafts = 0
        self.accepted = 0

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
        if iteration_stats is not None:
            if iteration_stats.num_generation_tokens:
                m.GENERATION_TOKENS.labels(self.model).inc(iteration_stats.num_generation_tokens)
            prompt = getattr(iteration_stats, "num_prompt_tokens", 0)
            if prompt:
                m.PROMPT_TOKENS.labels(self.model).inc(prompt)
        spec = getattr(scheduler_stats, "spec_decoding_stats", None)
        if spec is not None and spec.num_drafts:
            hist = m.ACCEPTED_PER_DRAFT.labels(self.model)
            for accepted, count in enumerate(
                accepted_histogram(spec.num_drafts, spec.num_accepted_tokens_per_pos)
            ):
                for _ in range(count):
                    hist.observe(accepted)
            self.drafts += spec.num_drafts
            self.accepted += spec.num_accepted_tokens
            m.ACCEPTANCE_LENGTH.labels(self.model).set(1 + self.accepted / self.drafts)

    def log_engine_initialized(self) -> None:
        pass


def make_stat_logger(model_name: str) -> type[GatewayStatLogger]:
    """vLLM instantiates logger classes itself; bind the model label into a subclass."""
    return type("GatewayStatLogger", (GatewayStatLogger,), {"model_name": model_name})
