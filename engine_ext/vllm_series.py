"""specgw's token and acceptance series, derived from vLLM's own Prometheus counters.

Both front ends (``specgw serve`` and a stock ``vllm serve`` with our endpoint plugin)
run vLLM's PrometheusStatLogger in the API process, so its ``vllm:*`` counters are in
the default registry. Deriving our series from them at scrape time, instead of keeping
a second tally in a stat logger, gives one implementation for both front ends and
values that can never drift from vLLM's: the acceptance histogram is exact because
vLLM's per-position counts determine it (see :func:`accepted_histogram`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from prometheus_client import REGISTRY
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

ACCEPTED_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16)

# vLLM's family names (the table in engine_ext.internals lists them per vLLM range and
# the version guard checks them); the exposition adds `_total` to counter samples.
GEN, PROMPT = "vllm:generation_tokens", "vllm:prompt_tokens"
DRAFTS, ACCEPTED = "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_accepted_tokens"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def accepted_histogram(num_drafts: float, accepted_per_pos: list[float]) -> list[float]:
    """Exact per-draft distribution of accepted tokens from vLLM's per-position counts.

    Acceptance is a prefix (position i is accepted only if 0..i-1 were), so the drafts
    with >= i accepted tokens number ``accepted_per_pos[i-1]`` and those with exactly j
    number ``ge(j) - ge(j+1)``. The map is linear, so it holds for cumulative counts
    summed over steps and engines as well as for one step.
    """
    ge = [num_drafts, *accepted_per_pos, 0]
    return [ge[j] - ge[j + 1] for j in range(len(accepted_per_pos) + 1)]


def read_vllm_counters(model: str, families: Iterable) -> dict:
    """Sum vLLM's counters for ``model`` over engines (``engine`` label) and positions."""
    out: dict = {GEN: 0.0, PROMPT: 0.0, DRAFTS: 0.0, ACCEPTED: 0.0, PER_POS: {}}
    for fam in families:
        if fam.name not in out:
            continue
        for s in fam.samples:
            if not s.name.endswith("_total") or s.labels.get("model_name") != model:
                continue
            if fam.name == PER_POS:
                pos = int(s.labels["position"])
                out[PER_POS][pos] = out[PER_POS].get(pos, 0.0) + s.value
            else:
                out[fam.name] += s.value
    return out


class VllmDerivedCollector(Collector):
    """Exports the ``specgw_*`` token/acceptance families of the served models."""

    def __init__(self, registry=REGISTRY) -> None:
        self._registry = registry
        self._models: set[str] = set()
        self._local = threading.local()  # re-entrancy: we read the registry we live in
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, float, float]] = {}  # model -> (t, tokens, tps)

    def add_model(self, model: str) -> None:
        with self._lock:
            self._models.add(model)

    def collect(self) -> Iterable:
        if getattr(self._local, "busy", False) or not self._models:
            return []
        self._local.busy = True
        try:
            families = list(self._registry.collect())
        finally:
            self._local.busy = False
        gen = CounterMetricFamily("specgw_generation_tokens",
                                  "Output tokens produced by the engine (vLLM's counts).",
                                  labels=["model"])
        prompt = CounterMetricFamily("specgw_prompt_tokens", "Prompt tokens prefilled.",
                                     labels=["model"])
        tps = GaugeMetricFamily(
            "specgw_generation_tokens_per_second",
            "Output tokens/s between the last two scrapes (>= 1 s apart), from engine counts.",
            labels=["model"])
        hist = HistogramMetricFamily(
            "specgw_spec_decode_accepted_tokens_per_draft",
            "Draft tokens accepted per draft (acceptance length = 1 + mean).", labels=["model"])
        al = GaugeMetricFamily("specgw_spec_decode_acceptance_length",
                               "Mean acceptance length (1 + accepted/drafts) since start.",
                               labels=["model"])
        for model in sorted(self._models):
            c = read_vllm_counters(model, families)
            gen.add_metric([model], c[GEN])
            prompt.add_metric([model], c[PROMPT])
            tps.add_metric([model], self._rate(model, c[GEN]))
            per_pos = [c[PER_POS][p] for p in sorted(c[PER_POS])]
            counts = accepted_histogram(c[DRAFTS], per_pos)
            buckets = [(floatToGoString(b), sum(counts[: b + 1])) for b in ACCEPTED_BUCKETS]
            hist.add_metric([model], [*buckets, ("+Inf", c[DRAFTS])], sum_value=c[ACCEPTED])
            if c[DRAFTS]:
                al.add_metric([model], 1 + c[ACCEPTED] / c[DRAFTS])
        return [gen, prompt, tps, hist, al]

    def _rate(self, model: str, total: float) -> float:
        now = time.monotonic()
        with self._lock:
            prev = self._last.get(model)
            if prev is None:
                self._last[model] = (now, total, 0.0)
                return 0.0
            t_prev, n_prev, rate = prev
            if now - t_prev >= 1.0:
                rate = (total - n_prev) / (now - t_prev)
                self._last[model] = (now, total, rate)
            return rate

VLLM_DERIVED = VllmDerivedCollector()
REGISTRY.register(VLLM_DERIVED)
