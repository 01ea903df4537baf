"""Every Prometheus metric the gateway exports, in one place.

Naming follows prometheus-client conventions: ``specgw_`` namespace, base units,
``_total`` for counters, low-cardinality labels (``model``, ``role`` = target|draft,
``phase``, ``mode``, ``rank``, ``endpoint``, ``status``). vLLM's own ``vllm:*`` metrics
(including ``vllm:spec_decode_*``) are registered by vLLM's PrometheusStatLogger in the
same default registry and exported unchanged next to these.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Iterable
from typing import NamedTuple

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
TOKEN_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28)

# ---------------------------------------------------------------- gateway (HTTP) metrics
REQUESTS = Counter(
    "specgw_requests", "HTTP requests answered, by outcome.", ["model", "endpoint", "status"]
)
REQUEST_LATENCY = Histogram(
    "specgw_request_duration_seconds", "End-to-end request latency seen by the gateway.",
    ["model", "endpoint"], buckets=LATENCY_BUCKETS,
)
TTFT = Histogram(
    "specgw_time_to_first_token_seconds", "Time from request arrival to the first token.",
    ["model", "endpoint"], buckets=LATENCY_BUCKETS,
)
ITL = Histogram(
    "specgw_inter_token_latency_seconds",
    "Time between successive streamed outputs divided by the tokens they carried.",
    ["model", "endpoint"], buckets=TOKEN_LATENCY_BUCKETS,
)
def record_request(model: str, endpoint: str, status: str, seconds: float) -> None:
    """One answered request: its outcome and its end-to-end latency."""
    REQUESTS.labels(model, endpoint, status).inc()
    REQUEST_LATENCY.labels(model, endpoint).observe(seconds)


IN_FLIGHT = Gauge("specgw_requests_in_flight", "Requests being served now.", ["model"])
ABORTS = Counter(
    "specgw_client_disconnects", "Requests aborted in the engine because the client left.",
    ["model"],
)

RATE_LIMITED = Counter(
    "specgw_rate_limited_requests", "Requests refused with 429 by a per-key rate limit.",
    ["reason"],
)

# ------------------------------------------------------------ remote backends (router)
BACKEND_REQUESTS = Counter(
    "specgw_backend_requests", "Requests proxied to a backend, by outcome.",
    ["backend", "status"],
)
BACKEND_LATENCY = Histogram(
    "specgw_backend_request_duration_seconds", "Time a proxied request spent on a backend.",
    ["backend"], buckets=LATENCY_BUCKETS,
)
# Where a proxied stream's first byte spends its time: on the way to and in the backend
# (from the send, connecting included, to its first byte) or in the gateway before the
# send (reading and validating the request, routing, admission, and any backend that
# failed first and was failed over from). Finer buckets than LATENCY_BUCKETS: the
# gateway's share is expected well under a millisecond.
ADDED_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                 0.25, 1)
BACKEND_TTFB = Histogram(
    "specgw_backend_time_to_first_byte_seconds",
    "Time from sending a streamed request to a backend to the first byte of its body.",
    ["backend"], buckets=LATENCY_BUCKETS,
)
GATEWAY_ADDED = Histogram(
    "specgw_gateway_added_latency_seconds",
    "A proxied stream's time to first byte at the gateway less the backend's own.",
    ["backend"], buckets=ADDED_BUCKETS,
)
BACKEND_IN_FLIGHT = Gauge("specgw_backend_requests_in_flight",
                          "Requests outstanding on a backend.", ["backend"])
BACKEND_UP = Gauge("specgw_backend_up",
                   "1 if the backend passes health checks and is not ejected.", ["backend"])
EJECTIONS = Counter("specgw_backend_ejections",
                    "Times a backend was taken out of rotation after failed requests.",
                    ["backend"])
FAILOVERS = Counter("specgw_backend_failovers",
                    "Requests retried on another backend before their first byte.", ["model"])



def _event_loop_tasks() -> float:
    """Tasks alive on the serving event loop, read at scrape time (the /metrics handler
    runs on that loop): a count that only grows is a task leak."""
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:  # scraped outside the loop (no running loop in this thread)
        return math.nan


EVENT_LOOP_TASKS = Gauge("specgw_event_loop_tasks",
                         "asyncio tasks alive on the gateway's event loop at scrape time.")
EVENT_LOOP_TASKS.set_function(_event_loop_tasks)

# Engine-side token and acceptance series (specgw_generation_tokens_total,
# specgw_spec_decode_accepted_tokens_per_draft, ...) are derived from vLLM's own counters
# at scrape time by engine_ext.vllm_series, the same way under both front ends.

# ------------------------------------------------------------------ start-up self-check
DRAFTER_EXPECTED_MODE = Gauge(
    "specgw_drafter_expected_graph",
    "1 if the start-up check expects the drafter phase to replay a CUDA graph in steady "
    "decode at the given batch size class, else 0 (eager).",
    ["model", "phase", "batch"],
)
ENGINE_READY = Gauge(
    "specgw_engine_ready", "1 once the engine is up and its self-check ran, else 0.", ["model"]
)
STARTUP_WARNINGS = Gauge(
    "specgw_startup_check_warnings",
    "Number of start-up self-check warnings (drafting expected to run eager, ...).", ["model"],
)


class ProbeCollector(Collector):
    """Mirrors the worker ledgers (fetched with ``collective_rpc``) as counters.

    The worker owns the counts; the API process only re-exports the latest snapshot, so
    the values are cumulative since the worker started, exactly like a counter.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._model = ""
        self._snapshots: list[dict] = []

    def update(self, model: str, snapshots: list[dict]) -> None:
        with self._lock:
            self._model, self._snapshots = model, list(snapshots)

    def collect(self) -> Iterable:
        with self._lock:
            model, snaps = self._model, list(self._snapshots)
        f = _families()
        if model:
            f.ranks.add_metric([model], len(snaps))
        totals: dict[tuple[str, str], list[float]] = {}  # [graph, all]
        piece_totals: dict[tuple[str, str], list[float]] = {}  # [replayed, expected]
        for snap in snaps:
            _add_snapshot(f, model, snap, totals, piece_totals)
        cov = coverage_by_role(snaps)
        for role, ok in cov.items():
            f.coverage.add_metric([model, role], 1.0 if ok else 0.0)
        _add_ratios(f.hit, model, totals, cov)
        _add_ratios(f.piece_cov, model, piece_totals, cov)
        yield from (f.forwards, f.replayed, f.partial, f.eager, f.silent, f.unknown,
                    f.pieces_replayed, f.pieces_expected, f.replays, f.captures,
                    f.unattributed, f.hit, f.piece_cov, f.coverage, f.ranks)


class _Families(NamedTuple):
    forwards: Metric
    replayed: Metric
    partial: Metric
    eager: Metric
    silent: Metric
    unknown: Metric
    pieces_replayed: Metric
    pieces_expected: Metric
    replays: Metric
    captures: Metric
    unattributed: Metric
    hit: Metric
    piece_cov: Metric
    coverage: Metric
    ranks: Metric


def _families() -> _Families:
    """The probe series, built fresh per scrape (custom-collector pattern)."""
    replayed = CounterMetricFamily(
        "specgw_cudagraph_replayed_forwards",
        "Model forwards that replayed their whole CUDA graph (every piece of a "
        "PIECEWISE split graph, or the FULL graph), counted in the worker.",
        labels=["model", "rank", "role", "phase", "mode"],
    )
    partial = CounterMetricFamily(
        "specgw_partial_graph_forwards",
        "PIECEWISE forwards where some split-graph pieces replayed and others ran eager "
        "(not a hit).",
        labels=["model", "rank", "role", "phase", "mode"],
    )
    unknown = CounterMetricFamily(
        "specgw_unknown_forwards",
        "Forwards whose dispatch label could not be read (not a hit, not a fallback).",
        labels=["model", "rank", "role", "phase"],
    )
    pieces_replayed = CounterMetricFamily(
        "specgw_cudagraph_pieces_replayed",
        "CUDA graphs replayed by forwards dispatched as graphs: split-graph pieces for "
        "PIECEWISE, 1 per FULL forward.",
        labels=["model", "rank", "role", "phase"],
    )
    pieces_expected = CounterMetricFamily(
        "specgw_cudagraph_pieces_expected",
        "CUDA graphs those forwards should have replayed: all pieces of the split graph "
        "(at least 1) per PIECEWISE forward, 1 per FULL forward.",
        labels=["model", "rank", "role", "phase"],
    )
    piece_cov = GaugeMetricFamily(
        "specgw_cudagraph_piece_coverage",
        "Pieces replayed / pieces expected since start (1.0 = every dispatched graph "
        "fully replayed; NaN when nothing was dispatched as a graph or coverage is "
        "unknown).",
        labels=["model", "role", "phase"],
    )
    eager = CounterMetricFamily(
        "specgw_eager_forwards",
        "Model forwards that ran eager; mode is what the dispatcher had chosen "
        "(none = eager by decision, piecewise/full = silent fallback).",
        labels=["model", "rank", "role", "phase", "mode"],
    )
    silent = CounterMetricFamily(
        "specgw_silent_eager_forwards",
        "Forwards dispatched as a CUDA graph that ran eager (PR #25109's failure).",
        labels=["model", "rank", "role", "phase"],
    )
    forwards = CounterMetricFamily(
        "specgw_model_forwards",
        "All probed model forwards (graph or eager): the hit-rate denominator.",
        labels=["model", "rank", "role", "phase"],
    )
    replays = CounterMetricFamily(
        "specgw_cudagraph_replays", "Raw torch CUDAGraph.replay() calls per scope.",
        labels=["model", "rank", "role", "phase"],
    )
    captures = CounterMetricFamily(
        "specgw_cudagraph_captures", "CUDA graphs captured (start-up).",
        labels=["model", "rank", "role"],
    )
    unattributed = CounterMetricFamily(
        "specgw_unattributed_cudagraph_replays",
        "Replays outside any probed forward: an unprobed code path.",
        labels=["model", "rank"],
    )
    hit = GaugeMetricFamily(
        "specgw_cudagraph_hit_ratio",
        "Share of forwards that replayed a graph (NaN when coverage is unknown).",
        labels=["model", "role", "phase"],
    )
    ranks = GaugeMetricFamily(
        "specgw_probe_ranks",
        "Worker ranks whose probe ledgers the last collective_rpc returned (TP x PP "
        "when all report).", labels=["model"],
    )
    coverage = GaugeMetricFamily(
        "specgw_probe_coverage",
        "1 if every forward path of this role is probed, 0 if some path is not or the "
        "probes are switched off (then hit ratios are unknown, never assumed 100%).",
        labels=["model", "role"],
    )
    return _Families(forwards, replayed, partial, eager, silent, unknown, pieces_replayed,
                     pieces_expected, replays, captures, unattributed, hit, piece_cov,
                     coverage, ranks)


def _add_snapshot(f: _Families, model: str, snap: dict,
                  totals: dict[tuple[str, str], list[float]],
                  piece_totals: dict[tuple[str, str], list[float]]) -> None:
    """One rank's ledger into the families; graph/all and piece sums into the totals."""
    rank = str(snap.get("rank", 0))
    per_phase: dict[tuple[str, str], list[float]] = {}  # [all, silent, partial, unknown]
    by_kind = {"graph": f.replayed, "partial": f.partial, "eager": f.eager}
    pieces = {(r, ph): (rep, exp) for r, ph, rep, exp in snap.get("pieces", [])}
    for role, phase, dispatched, executed, n in snap.get("forwards", []):
        acc = per_phase.setdefault((role, phase), [0.0, 0.0, 0.0, 0.0])
        acc[0] += n
        if executed in by_kind:
            by_kind[executed].add_metric([model, rank, role, phase, dispatched], n)
        if executed == "eager" and dispatched != "none":
            acc[1] += n
        elif executed == "partial":
            acc[2] += n
        elif executed == "unknown":
            acc[3] += n
        tot = totals.setdefault((role, phase), [0.0, 0.0])
        tot[1] += n
        if executed == "graph":
            tot[0] += n
    # Emitted with zeros too, so "no fallback" reads 0 rather than "no data".
    for (role, phase), (n_all, n_silent, n_partial, n_unknown) in sorted(per_phase.items()):
        labels = [model, rank, role, phase]
        f.forwards.add_metric(labels, n_all)
        f.silent.add_metric(labels, n_silent)
        f.unknown.add_metric(labels, n_unknown)
        if not n_partial:  # partial_graph_forwards carries a mode label
            f.partial.add_metric([*labels, "piecewise"], 0)
        rep, exp = pieces.get((role, phase), (0, 0))
        f.pieces_replayed.add_metric(labels, rep)
        f.pieces_expected.add_metric(labels, exp)
        pt = piece_totals.setdefault((role, phase), [0.0, 0.0])
        pt[0] += rep
        pt[1] += exp
    for role, phase, n in snap.get("replays", []):
        f.replays.add_metric([model, rank, role, phase], n)
    for role, n in snap.get("captures", {}).items():
        f.captures.add_metric([model, rank, role], n)
    f.unattributed.add_metric([model, rank], snap.get("unattributed_replays", 0))


def _add_ratios(gauge: GaugeMetricFamily, model: str,
                totals: dict[tuple[str, str], list[float]], cov: dict[str, bool]) -> None:
    """num/den per (role, phase); NaN where the role is not fully probed or den is 0."""
    for (role, phase), (num, den) in sorted(totals.items()):
        ok = cov.get(role, False)
        gauge.add_metric([model, role, phase], num / den if ok and den else math.nan)


def coverage_by_role(snaps: list[dict]) -> dict[str, bool]:
    """A role is covered when its probes for the running runner are installed, every
    ``propose()`` produced at least one counted forward, and no replay escaped a scope."""
    if not snaps:
        return {}
    out = {"target": True, "draft": True}
    for snap in snaps:
        if not snap.get("enabled", True):  # switched off: no path is probed right now
            out["target"] = out["draft"] = False
        runner = snap.get("runner", "v1")
        inst = snap.get("installed", {})
        # Piece probes serve both roles: without them pieces cannot be told apart; nor
        # can a graph replay be counted at all without torch's replay and capture probes.
        if not all(ok for k, ok in inst.items() if k.startswith("graph.")) or not all(
                inst.get(f"torch.cuda.CUDAGraph.{m}") for m in ("replay", "capture_begin")):
            out["target"] = out["draft"] = False
        if runner == "v2" and not inst.get("v2.capture"):  # FULL graphs not told apart
            out["target"] = out["draft"] = False
        target_keys = [k for k in inst if k.startswith(f"{runner}.target")]
        draft_keys = [k for k in inst if k.startswith(f"{runner}.draft")]
        if not target_keys or not all(inst[k] for k in target_keys):
            out["target"] = False
        if not draft_keys or not all(inst[k] for k in draft_keys):
            out["draft"] = False
        if not snap.get("draft_propose_probed", True):
            out["draft"] = False
        if snap.get("proposes_without_forward", 0) > 0:
            out["draft"] = False
        if snap.get("unattributed_replays", 0) > 0:
            out["target"] = out["draft"] = False
    return out


PROBES = ProbeCollector()
REGISTRY.register(PROBES)
