"""The Grafana dashboard, generated from one list of panels so that the JSON, the
Prometheus query test and the PNG preview all use the very same PromQL.

Run ``python -m monitoring.dashboard`` to rewrite ``monitoring/grafana/specgw.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DASHBOARD_PATH = Path(__file__).parent / "grafana" / "specgw.json"
SEL = 'model=~"$model_name",instance=~"$instance"'
VSEL = 'model_name=~"$model_name",instance=~"$instance"'
R = "$__rate_interval"


def piece_coverage(role: str) -> str:
    """CUDA graphs replayed / graphs the dispatcher asked for (every piece of a PIECEWISE
    split graph, one per FULL forward): below 1 means some pieces or forwards ran eager.
    NaN (no data point drawn) where nothing was dispatched as a graph, e.g. on CPU."""
    rep = (f'sum by (phase) (rate(specgw_cudagraph_pieces_replayed_total'
           f'{{{SEL},role="{role}"}}[{R}]))')
    exp = (f'sum by (phase) (rate(specgw_cudagraph_pieces_expected_total'
           f'{{{SEL},role="{role}"}}[{R}]))')
    return f"{rep} / {exp}"


def hit_rate(role: str, by: str = "phase") -> str:
    """Graph replays / all forwards, by phase (or rank). The `or ... * 0` keeps a series
    (value 0) where nothing ever replayed, e.g. on CPU, instead of returning no data."""
    replayed = (f'sum by ({by}) (rate(specgw_cudagraph_replayed_forwards_total'
                f'{{{SEL},role="{role}"}}[{R}]))')
    total = f'sum by ({by}) (rate(specgw_model_forwards_total{{{SEL},role="{role}"}}[{R}]))'
    return f"({replayed} or {total} * 0) / {total}"


def quantiles(metric: str, extra: str = "", vllm_fallback: str = "") -> list[tuple[str, str]]:
    """p50/p90/p99 of ``metric``; where a target lacks it (a plain ``vllm serve`` with our
    plugin measures no per-token gateway latency), of vLLM's own ``vllm_fallback``."""
    buckets = f"sum by (le) (rate({metric}_bucket{{{SEL}{extra}}}[{R}]))"
    if vllm_fallback:
        buckets = f"({buckets} or sum by (le) (rate({vllm_fallback}_bucket{{{VSEL}}}[{R}])))"
    return [(f"p{int(q * 100)}", f"histogram_quantile({q}, {buckets})")
            for q in (0.5, 0.9, 0.99)]


@dataclass(frozen=True)
class Panel:
    title: str
    targets: list[tuple[str, str]]  # (legend, expr)
    unit: str = "short"
    kind: str = "timeseries"
    description: str = ""


PANELS: list[Panel] = [
    Panel("Drafter CUDA-graph hit rate", [("{{phase}}", hit_rate("draft"))], "percentunit",
          description="Drafter forwards that replayed their whole graph (every piece), "
          "counted in the worker; partial and unknown forwards are misses."),
    Panel("Drafter CUDA-graph piece coverage", [("{{phase}}", piece_coverage("draft"))],
          "percentunit", description="Split-graph pieces (or FULL graphs) replayed / "
          "expected by the dispatch: 100% = every dispatched graph fully replayed."),
    Panel("Target CUDA-graph hit rate", [("{{phase}}", hit_rate("target"))], "percentunit"),
    Panel("Drafter CUDA-graph hit rate by rank", [("rank {{rank}}", hit_rate("draft", "rank"))],
          "percentunit", description="One line per tensor/pipeline-parallel worker: a "
          "rank that falls back alone shows here, not in the pooled rate."),
    Panel("Eager fallbacks (dispatched as graph, ran eager or partly eager)", [
        ("silent eager {{role}} {{phase}}",
         f"sum by (role, phase) (rate(specgw_silent_eager_forwards_total{{{SEL}}}[{R}]))"),
        ("partial {{role}} {{phase}}",
         f"sum by (role, phase) (rate(specgw_partial_graph_forwards_total{{{SEL}}}[{R}]))"),
        ("unknown label {{role}} {{phase}}",
         f"sum by (role, phase) (rate(specgw_unknown_forwards_total{{{SEL}}}[{R}]))"),
    ], "ops", description="The failure mode of vLLM PR #25109: should stay at 0 "
        "(alert SpecgwDrafterEagerFallback)."),
    Panel("Probe coverage", [("{{role}}", f"min by (role) (specgw_probe_coverage{{{SEL}}})")],
          kind="stat", description="0 = some forward path is unprobed: hit rates unknown."),
    Panel("Mean acceptance length", [(
        "acceptance length",
        f"1 + sum(rate(vllm:spec_decode_num_accepted_tokens_total{{{VSEL}}}[{R}])) / "
        f"sum(rate(vllm:spec_decode_num_drafts_total{{{VSEL}}}[{R}]))")]),
    Panel("Acceptance rate per draft position", [(
        "position {{position}}",
        f"sum by (position) (rate(vllm:spec_decode_num_accepted_tokens_per_pos_total"
        f"{{{VSEL}}}[{R}])) / scalar(sum(rate(vllm:spec_decode_num_drafts_total{{{VSEL}}}"
        f"[{R}])))")], "percentunit"),
    Panel("Generated tokens per second", [
        ("gateway (engine counts)",
         f"sum(rate(specgw_generation_tokens_total{{{SEL}}}[{R}]))"),
        ("vLLM", f"sum(rate(vllm:generation_tokens_total{{{VSEL}}}[{R}]))"),
    ]),
    Panel("Requests per second by status", [(
        "{{endpoint}} {{status}}",
        f"sum by (endpoint, status) (rate(specgw_requests_total{{{SEL}}}[{R}]))")], "reqps"),
    Panel("Error rate (non-2xx share)", [(
        "errors",
        f'(sum(rate(specgw_requests_total{{{SEL},status!~"2.."}}[{R}])) or vector(0)) / '
        f"sum(rate(specgw_requests_total{{{SEL}}}[{R}]))")], "percentunit"),
    Panel("Time to first token", quantiles("specgw_time_to_first_token_seconds",
                                           vllm_fallback="vllm:time_to_first_token_seconds"),
          "s", description="At the gateway; on a vllm serve target, vLLM's own measure."),
    Panel("Inter-token latency", quantiles("specgw_inter_token_latency_seconds",
                                           vllm_fallback="vllm:inter_token_latency_seconds"),
          "s", description="At the gateway; on a vllm serve target, vLLM's own measure."),
    Panel("End-to-end request latency", quantiles("specgw_request_duration_seconds"), "s"),
    Panel("Queue depth and in-flight requests", [
        ("waiting (engine)", f"sum(vllm:num_requests_waiting{{{VSEL}}})"),
        ("running (engine)", f"sum(vllm:num_requests_running{{{VSEL}}})"),
        ("in flight (gateway)", f"sum(specgw_requests_in_flight{{{SEL}}})"),
    ]),
]


def all_queries() -> list[tuple[str, str]]:
    return [(p.title, expr) for p in PANELS for _, expr in p.targets]


def build() -> dict:
    ds = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    panels = []
    for i, p in enumerate(PANELS):
        panels.append({
            "id": i + 1,
            "type": p.kind,
            "title": p.title,
            "description": p.description,
            "datasource": ds,
            "gridPos": {"h": 8, "w": 12, "x": (i % 2) * 12, "y": (i // 2) * 8},
            "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
            "options": {},
            "targets": [
                {"refId": chr(ord("A") + j), "datasource": ds, "expr": expr,
                 "legendFormat": legend}
                for j, (legend, expr) in enumerate(p.targets)
            ],
        })

    def query_var(name: str, query: str) -> dict:
        return {"name": name, "type": "query", "datasource": ds, "refresh": 2,
                "query": {"query": query, "refId": name}, "definition": query,
                "includeAll": True, "multi": True, "allValue": ".*",
                "current": {"text": "All", "value": "$__all"}}

    return {
        "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "type": "datasource",
                      "pluginId": "prometheus", "pluginName": "Prometheus"}],
        "title": "specgw: speculative decoding on vLLM",
        "uid": "specgw-spec-decode",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "tags": ["vllm", "speculative-decoding", "cuda-graphs"],
        "templating": {"list": [
            {"name": "DS_PROMETHEUS", "label": "Prometheus", "type": "datasource",
             "query": "prometheus", "current": {}},
            query_var("model_name", "label_values(specgw_requests_in_flight, model)"),
            query_var("instance", "label_values(specgw_requests_in_flight, instance)"),
        ]},
        "panels": panels,
    }


def main() -> None:
    DASHBOARD_PATH.parent.mkdir(parents=True, exist_ok=True)
    DASHBOARD_PATH.write_text(json.dumps(build(), indent=2) + "\n")
    print(f"wrote {DASHBOARD_PATH}")


if __name__ == "__main__":
    main()
