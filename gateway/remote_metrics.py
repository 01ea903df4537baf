"""Re-export, on the router's /metrics, the engine-extension series of remote backends
that run our plugin (specgw gateways, or a stock ``vllm serve`` with the specgw endpoint
plugin: both export the same families with the same labels), labelled by backend.

Only the engine-side families are taken (graph replays, eager forwards, coverage,
acceptance, tokens): the backends' HTTP metrics describe their own clients, not ours.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable

import httpx
from prometheus_client import REGISTRY
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

ENGINE_FAMILIES = (
    "specgw_model_forwards", "specgw_cudagraph_replayed_forwards", "specgw_eager_forwards",
    "specgw_silent_eager_forwards", "specgw_cudagraph_replays", "specgw_cudagraph_captures",
    "specgw_unattributed_cudagraph_replays", "specgw_cudagraph_hit_ratio",
    "specgw_probe_coverage", "specgw_spec_decode_accepted_tokens_per_draft",
    "specgw_spec_decode_acceptance_length", "specgw_generation_tokens",
    "specgw_generation_tokens_per_second", "specgw_drafter_expected_graph",
    "specgw_engine_ready", "specgw_probe_ranks", "specgw_startup_check_warnings",
)


def _relabel(fam: Metric, backend: str) -> Metric:
    out = Metric(f"specgw_backend_{fam.name.removeprefix('specgw_')}",
                 f"{fam.documentation} (from backend)", fam.type)
    for s in fam.samples:
        name = f"specgw_backend_{s.name.removeprefix('specgw_')}"
        out.add_sample(name, {**s.labels, "backend": backend}, s.value, s.timestamp)
    return out


class RemoteEngineCollector(Collector):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: list[Metric] = []

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            return list(self._families)

    async def refresh(self, backends: list, timeout: float = 3.0) -> None:
        async def one(b) -> list[Metric]:
            if not b.healthy:
                return []
            try:
                r = await b.client.get("/metrics", timeout=timeout)
                r.raise_for_status()
            except httpx.HTTPError:
                return []
            return [_relabel(f, b.name) for f in text_string_to_metric_families(r.text)
                    if f.name in ENGINE_FAMILIES]

        fams = [f for chunk in await asyncio.gather(*(one(b) for b in backends)) for f in chunk]
        with self._lock:
            self._families = fams


REMOTE_ENGINES = RemoteEngineCollector()
REGISTRY.register(REMOTE_ENGINES)
