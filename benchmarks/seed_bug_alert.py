"""Check the drafter fallback alert with Prometheus's own rule engine on the series a
seed-bug run recorded (``benchmarks/seed_bug_gpu.py``): ``promtool test rules`` with
``input_series`` built from the run's /metrics scrapes and ``monitoring/alerts.yml``.

What it proves, per run: evaluated the way a Prometheus server evaluates
``monitoring/alerts.yml`` (same rule group, same interval, same ``for:``), the recorded
counters make ``SpecgwDrafterEagerFallback`` fire exactly one evaluation interval after
the first evaluation that can see the silent-eager (or partial) counter grow, not before;
and a run whose counters never grow never fires it. What it does not prove: scraping
(the samples are replayed, one per second of the run, held between scrapes) and
Alertmanager delivery.

Usage: ``python benchmarks/seed_bug_alert.py --runs DIR`` (all ``v*_*.json`` there);
writes ``DIR/alert_check.json`` and, with ``--openmetrics``, ``DIR/<run>.om`` (OpenMetrics
with timestamps, for ``promtool tsdb create-blocks-from openmetrics``).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
ALERTS = ROOT / "monitoring" / "alerts.yml"
ALERT = "SpecgwDrafterEagerFallback"
STEP_S = 1  # replay grid: one sample per second of the run
WATCHED = ("specgw_silent_eager_forwards_total", "specgw_partial_graph_forwards_total")


def alert_rule() -> tuple[dict, dict]:
    """(group, rule) of the alert in monitoring/alerts.yml."""
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == ALERT:
                return group, rule
    raise SystemExit(f"{ALERT} not in {ALERTS}")


def seconds(duration: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    return int(duration[:-1]) * units[duration[-1]]


def grid(scrapes: list[dict]) -> tuple[dict[str, list[float | None]], int]:
    """Every specgw_ series on a 1 s grid from the first scrape, each grid point holding
    the last scraped value (None before the series first appears)."""
    t0 = scrapes[0]["t"]
    n = math.floor(scrapes[-1]["t"] - t0) // STEP_S + 1
    series = sorted({k for s in scrapes for k in s["values"] if k.startswith("specgw_")})
    out: dict[str, list[float | None]] = {k: [None] * n for k in series}
    j = 0
    last: dict[str, float] = {}
    for i in range(n):
        while j < len(scrapes) and scrapes[j]["t"] - t0 <= i * STEP_S + 1e-6:
            last.update(scrapes[j]["values"])
            j += 1
        for k in series:
            out[k][i] = last.get(k)
    return out, n


def first_growth(series: dict[str, list[float | None]], n: int) -> int | None:
    """Grid index of the first sample at which a watched drafter counter grew."""
    watched = [v for k, v in series.items() if k.startswith(WATCHED) and 'role="draft"' in k]
    for i in range(1, n):
        for v in watched:
            if v[i] is not None and v[i - 1] is not None and v[i] > v[i - 1]:
                return i
    return None


def render(template: str, labels: dict[str, str]) -> str:
    """The annotation as Prometheus renders it: only ``{{ $labels.x }}`` is supported
    (values would make the expectation depend on the data, not the rule)."""
    out = re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""),
                 template)
    if "{{" in out:
        raise ValueError(f"annotation template not supported here: {template!r}")
    return out


def promtool_test(series: dict, n: int, growth: int | None, group: dict, rule: dict,
                  model: str) -> dict:
    interval, hold = seconds(group.get("interval", "1m")), seconds(rule.get("for", "0s"))
    inputs = [{"series": k, "values": " ".join("_" if x is None else repr(float(x))
                                               for x in v)} for k, v in series.items()]
    alert_labels = {**rule.get("labels", {}), "model": model}
    cases = []
    if growth is None:  # never grew: quiet at every evaluation over the run
        cases = [{"eval_time": f"{t}s", "alertname": ALERT, "exp_alerts": []}
                 for t in range(0, n * STEP_S + interval, interval)]
        expect = {"fires": False}
    else:
        # Evaluations run at multiples of the interval; the first one at or after the
        # grown sample sees increase() > 0 (pending), firing once `for:` has passed.
        seen = math.ceil(growth * STEP_S / interval) * interval
        fire = seen + math.ceil(hold / interval) * interval if hold else seen
        cases = [{"eval_time": f"{t}s", "alertname": ALERT, "exp_alerts": []}
                 for t in range(0, fire, interval)]
        cases.append({"eval_time": f"{fire}s", "alertname": ALERT, "exp_alerts": [
            {"exp_labels": alert_labels,
             "exp_annotations": {k: render(v, alert_labels)
                                 for k, v in rule.get("annotations", {}).items()}}]})
        expect = {"fires": True, "growth_s": growth * STEP_S, "first_eval_seeing_s": seen,
                  "fires_at_s": fire, "after_growth_s": fire - growth * STEP_S}
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(ALERTS, Path(d) / "alerts.yml")
        test = {"rule_files": ["alerts.yml"], "evaluation_interval": f"{interval}s",
                "tests": [{"interval": f"{STEP_S}s", "input_series": inputs,
                           "alert_rule_test": cases}]}
        (Path(d) / "test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
        promtool = shutil.which("promtool") or "promtool"
        proc = subprocess.run([promtool, "test", "rules", "test.yml"], cwd=d,
                              capture_output=True, text=True)
    ok = proc.returncode == 0
    if expect["fires"]:
        summary = (f"counter first grew at {expect['growth_s']} s; promtool: "
                   f"{'fires' if ok else 'does NOT fire'} at {expect['fires_at_s']} s "
                   f"(pending at {expect['first_eval_seeing_s']} s, interval {interval} s, "
                   f"for {hold} s), quiet before")
    else:
        summary = f"counter never grew; promtool: {'quiet' if ok else 'NOT quiet'} throughout"
    return {"ok": ok, **expect, "interval_s": interval, "for_s": hold, "summary": summary,
            "promtool_output": (proc.stdout + proc.stderr)[-3000:]}


def openmetrics(series: dict, scrapes: list[dict]) -> str:
    """The recorded samples (not the grid) as OpenMetrics with timestamps."""
    lines, types = [], {}
    for k in series:
        base = k.split("{")[0]
        fam = base[:-len("_total")] if base.endswith("_total") else base
        types[fam] = "counter" if base.endswith("_total") else "gauge"
    # One sample per timestamp (two threads may have scraped in the same millisecond).
    scrapes = list({round(s["t"], 3): s for s in sorted(scrapes, key=lambda x: x["t"])}
                   .values())
    for fam, kind in sorted(types.items()):
        lines.append(f"# TYPE {fam} {kind}")
        for s in scrapes:
            for k, v in sorted(s["values"].items()):
                if k.split("{")[0] in (fam, f"{fam}_total") and not math.isnan(v):
                    lines.append(f"{k} {v} {s['t']:.3f}")
    return "\n".join([*lines, "# EOF"]) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", required=True)
    p.add_argument("--openmetrics", action="store_true")
    a = p.parse_args(argv)
    group, rule = alert_rule()
    results = {}
    for f in sorted(Path(a.runs).glob("v*_*.json")):
        run = json.loads(f.read_text())
        scrapes = run.get("scrapes") or []
        if len(scrapes) < 2:
            continue
        series, n = grid(scrapes)
        res = promtool_test(series, n, first_growth(series, n), group, rule,
                            run.get("model", "pair"))
        results[run["run"]] = res
        print(f"{run['run']}: {'OK' if res['ok'] else 'FAILED'}: {res['summary']}")
        if not res["ok"]:
            print(res["promtool_output"])
        if a.openmetrics:
            (Path(a.runs) / f"{run['run']}.om").write_text(openmetrics(series, scrapes))
    (Path(a.runs) / "alert_check.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0 if results and all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
