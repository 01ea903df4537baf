"""Build and run the in-process vLLM engine (``AsyncLLM``) with speculative decoding.

Start-up: engine args from :class:`EngineSettings` (speculative config, a compilation
config under which the drafter is graphed on CUDA, our worker extension), then the
self-check (:mod:`engine_ext.self_check`), then a poller that mirrors the worker probe
ledgers into Prometheus via ``collective_rpc``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from engine_ext.internals import table_for
from engine_ext.request_params import structured_outputs_config
from engine_ext.settings import EngineSettings

log = logging.getLogger("engine_ext.engine")

WORKER_EXTENSION = "engine_ext.worker_extension.ProbeWorkerExtension"


class EngineStartError(RuntimeError):
    """The engine could not start; the message is meant for the user."""


def detect_device() -> str:
    from vllm.platforms import current_platform

    if current_platform.is_cuda_alike():
        return "cuda"
    return "cpu" if current_platform.is_cpu() else str(current_platform.device_type)


def prepare_environment(settings: EngineSettings, device: str) -> None:
    """Environment vLLM reads at engine creation (inherited by worker processes)."""
    if settings.runner != "auto":
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1" if settings.runner == "v2" else "0"
    if device == "cpu" and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        binding = cpu_thread_binding(settings.tensor_parallel_size, _numa_nodes(),
                                     sorted(os.sched_getaffinity(0)))
        if binding:
            log.info("CPU tensor parallel: VLLM_CPU_OMP_THREADS_BIND=%s", binding)
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = binding


def cpu_thread_binding(world_size: int, numa_nodes: int, cpus: list[int]) -> str | None:
    """Cores per CPU worker when vLLM's NUMA-based auto-binding cannot place them.

    vLLM's "auto" binds one worker per NUMA node and refuses more workers than nodes, so
    TP=2 on a one-node machine fails at start. There, split this process's cores into
    ``world_size`` contiguous groups ("0|1" on two cores). Where there are enough nodes,
    leave vLLM's NUMA-aware choice alone (None).
    """
    if world_size <= 1 or numa_nodes >= world_size:
        return None
    if len(cpus) < world_size:
        raise ValueError(f"tensor parallel size {world_size} needs at least {world_size} "
                         f"CPU cores, this process may use {len(cpus)}")
    per = len(cpus) // world_size
    groups = [cpus[i * per:(i + 1) * per] for i in range(world_size)]
    return "|".join(",".join(map(str, g)) for g in groups)


def _numa_nodes() -> int:
    from pathlib import Path

    return max(1, len(list(Path("/sys/devices/system/node").glob("node[0-9]*"))))


def engine_args(settings: EngineSettings, device: str):
    from vllm.engine.arg_utils import AsyncEngineArgs

    from engine_ext.graph_config import compilation_config

    kwargs: dict[str, Any] = dict(
        model=settings.model,
        served_model_name=settings.model_name,
        max_num_seqs=settings.max_num_seqs,
        max_model_len=settings.max_model_len,
        seed=settings.seed,
        dtype=settings.dtype,
        enforce_eager=settings.enforce_eager,
        tensor_parallel_size=settings.tensor_parallel_size,
        worker_extension_cls=WORKER_EXTENSION,
        disable_log_stats=False,  # keep vLLM's PrometheusStatLogger: vllm:* metrics
        structured_outputs_config=structured_outputs_config(),
    )
    if settings.speculative:
        spec: dict[str, Any] = {
            "method": settings.method,
            "num_speculative_tokens": settings.num_speculative_tokens,
        }
        if settings.draft_model:
            spec["model"] = settings.draft_model
        if settings.draft_enforce_eager:
            spec["enforce_eager"] = True
        kwargs["speculative_config"] = spec
    cc = compilation_config(settings, device)
    if cc is not None:
        kwargs["compilation_config"] = cc
    if device == "cpu":
        kwargs["kv_cache_memory_bytes"] = int(settings.kv_cache_gib * (1 << 30))
    else:
        kwargs["gpu_memory_utilization"] = settings.gpu_memory_utilization
    kwargs.update(settings.extra_engine_args)
    t = table_for()
    if kwargs.get("per_request_spec_decode_metrics", "none") != "none":
        if t.spec_metrics_engine_arg is None:
            raise ValueError(f"--per-request-spec-metrics: vLLM {t.versions} has no "
                             "per-request speculative-decoding counts")
        kwargs[t.spec_metrics_engine_arg] = kwargs.pop("per_request_spec_decode_metrics")
    return AsyncEngineArgs(**kwargs)


class SpecEngine:
    """The in-process engine plus its probe poller. One per gateway process."""

    def __init__(self, settings: EngineSettings, poll_interval_s: float = 5.0):
        self.settings = settings
        self.poll_interval_s = poll_interval_s
        self.engine = None
        self.device: str | None = None
        self.self_check: dict[str, Any] | None = None
        self.start_error: str | None = None
        self._probes = None  # engine_ext.collector.ProbePoller once the engine is up
        self._sampling_defaults: dict[str, Any] | None = None
        self._vocab_size: int | None = None
        from monitoring import metrics as m

        m.ENGINE_READY.labels(self.model_name).set(0)

    @property
    def model_name(self) -> str:
        return self.settings.model_name

    @property
    def ready(self) -> bool:
        return self.engine is not None and self.self_check is not None and not self.errored

    @property
    def errored(self) -> bool:
        return self.engine is not None and bool(getattr(self.engine, "errored", False))

    # ------------------------------------------- the interface the gateway uses
    # (gateway.engine_api.SpecEngine): vLLM types stay on this side of it.
    @property
    def max_model_len(self) -> int:
        return self.settings.max_model_len

    @property
    def speculative(self) -> bool:
        return self.settings.speculative

    @property
    def tokenizer(self) -> Any:
        return self._require_engine().get_tokenizer()

    @property
    def vocab_size(self) -> int:
        # Read once: the model's vocabulary is fixed for the engine's life, and every
        # request asks for it.
        if self._vocab_size is None:
            from engine_ext.request_params import model_vocab_size

            self._vocab_size = model_vocab_size(self._require_engine())
        return self._vocab_size

    def build_sampling_params(self, kwargs: dict[str, Any]) -> Any:
        """Plain keyword arguments -> vLLM ``SamplingParams`` (see
        ``request_params.build_sampling_params``). Raises ValueError/TypeError on bad
        values; vLLM's client errors arrive as ``EngineRequestError`` with ``.param``."""
        from engine_ext.request_params import build_sampling_params

        try:
            return build_sampling_params(kwargs)
        except KeyError as exc:  # an unknown output_kind name
            raise ValueError(str(exc)) from exc

    def sampling_defaults(self) -> dict[str, Any]:
        from engine_ext.request_params import default_sampling_params

        if self._sampling_defaults is None:
            self._sampling_defaults = default_sampling_params(self._require_engine())
            log.info("model sampling defaults: %s", self._sampling_defaults)
        return self._sampling_defaults

    def spec_decode_counts(self, output: Any) -> dict[str, int] | None:
        from engine_ext.request_params import spec_decode_counts

        return spec_decode_counts(output)

    def tool_call_extractor(self, parser: str) -> Any:
        from engine_ext.request_params import tool_call_extractor

        return tool_call_extractor(parser, self.tokenizer)

    async def generate(self, prompt_token_ids: list[int], params: Any,
                       request_id: str) -> AsyncIterator[Any]:
        """vLLM's outputs for one prompt; request errors surface as ValueError."""
        engine = self._require_engine()
        try:
            # aclosing: a caller that stops early closes vLLM's generator now, not at GC.
            async with aclosing(engine.generate({"prompt_token_ids": prompt_token_ids},
                                                params, request_id=request_id)) as outs:
                async for out in outs:
                    yield out
        except Exception as exc:
            from engine_ext.request_params import client_error

            err = client_error(exc)
            if err is None:
                raise
            raise err from exc

    async def abort(self, request_ids: list[str]) -> None:
        if self.engine is not None:
            await self.engine.abort(request_ids)

    def _require_engine(self) -> Any:
        if self.engine is None:
            raise RuntimeError("the engine is not started")
        return self.engine

    async def start(self) -> None:
        from vllm.v1.engine.async_llm import AsyncLLM

        from engine_ext.collector import ProbePoller, all_engines_rpc
        from monitoring import metrics as m

        s = self.settings
        self.device = detect_device()
        prepare_environment(s, self.device)
        args = engine_args(s, self.device)
        log.info(
            "engine starting: model=%s draft=%s method=%s k=%d device=%s runner=%s",
            s.model, s.draft_model, s.method, s.num_speculative_tokens, self.device, s.runner,
        )
        t0 = time.monotonic()
        try:
            # Blocking (loads weights, compiles, captures): keep the event loop serving
            # /health while it runs.
            self.engine = await asyncio.to_thread(AsyncLLM.from_engine_args, args)
        except Exception as exc:
            self.start_error = _readable_start_error(exc, s)
            raise EngineStartError(self.start_error) from exc
        log.info("engine up in %.1fs", time.monotonic() - t0)
        self._probes = ProbePoller(all_engines_rpc(self.engine, table_for()), self.model_name,
                                   self.device, self.poll_interval_s)
        self.self_check = await self._probes.start()
        m.ENGINE_READY.labels(self.model_name).set(1)

    async def collective_rpc(self, method: str, timeout: float | None = None) -> list[Any]:
        assert self._probes is not None
        return await self._probes.collective_rpc(method, timeout)

    async def refresh_probes(self) -> list[dict]:
        """Pull every rank's ledger into the Prometheus collector (also at scrape time)."""
        if self._probes is None:
            return []
        return await self._probes.refresh()

    async def switch_probes(self, enabled: bool, poll_interval_s: float | None = None
                            ) -> dict[str, Any]:
        assert self._probes is not None
        return await self._probes.switch(enabled, poll_interval_s)

    async def alternate_probes(self, steps: int, mode: str, seed: int,
                               groups: list[str] | None = None) -> dict[str, Any]:
        assert self._probes is not None
        return await self._probes.alternate(steps, mode, seed, groups)

    async def probe_alternation(self, stop: bool = False) -> dict[str, Any]:
        assert self._probes is not None
        return await self._probes.alternation(stop)

    async def shutdown(self) -> None:
        from monitoring import metrics as m

        m.ENGINE_READY.labels(self.model_name).set(0)
        if self._probes is not None:
            self._probes.stop()
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None


def _readable_start_error(exc: Exception, s: EngineSettings) -> str:
    text = f"{type(exc).__name__}: {exc}"
    hints = []
    for label, path in (("model", s.model), ("draft model", s.draft_model)):
        if path and not os.path.exists(path) and "/" in path and path.startswith("/"):
            hints.append(f"{label} path {path} does not exist")
    if "Illegal instruction" in text:
        hints.append("vLLM CPU kernels need the +cpu build (pip install -e '.[cpu]')")
    return "; ".join([*hints, text]) if hints else text
