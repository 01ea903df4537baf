"""The soak's verdicts and report, from its raw JSON only (``benchmarks/soak.py``).

Verdicts (computed here, used by the soak's exit status, the CI test and the report):
no lost request; the ledger adds up (every request sent has exactly one verdict, and the
router's own counters saw as many requests); every scheduled fault ran to its end; no
leak: router and backend RSS after warm-up within ``RSS_GROWTH_MAX`` of the post-warm-up
median, the router's task count and open fds back at their idle level when the load is
over, and every in-flight gauge back to 0.

    python -m benchmarks.soak_report docs/soak/soak.json.gz --md docs/soak.md --plot docs/soak.png
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path

from benchmarks.report import md_table, num, write
from benchmarks.soak_workload import BURST, FAULT_GRACE_S, LIMITED_RPM

VERDICTS = ("succeeded", "failed_expected", "aborted", "lost")
RSS_GROWTH_MAX = 0.10  # final-window median RSS vs the first window after warm-up
IDLE_TASKS_SLACK = 2  # router tasks at the end, idle, vs idle before the load
IDLE_FDS_SLACK = 8  # pooled keep-alive connections may still be open


KIND_TEXT = {"specgw": "`specgw serve`", "vllm": "`vllm serve` + specgw plugin"}


def backends(res: dict) -> dict[str, str]:
    """{name: kind}; runs before the vllm serve backend existed had two specgw ones."""
    return res.get("backends") or {"a": "specgw", "b": "specgw"}


def _check(what: str, value: object, ok: bool, gate: bool = True) -> dict:
    return {"what": what, "value": value, "ok": bool(ok), "gate": gate}


def ledger_checks(res: dict) -> list[dict]:
    t = res["totals"]
    lost = t["by_verdict"].get("lost", 0)
    judged = sum(t["by_verdict"].get(v, 0) for v in VERDICTS)
    acc = res["router_accounting"]
    done = [f for f in res["faults"] if f.get("t_end") is not None]
    return [
        _check("lost requests", lost, lost == 0),
        _check("ledger adds up (judged = sent)", f"{judged} = {t['sent']}",
               judged == t["sent"] == len(res["ledger"]["rows"])),
        _check("router counters saw every delivered request (delivered <= counted <= "
               "sent; undelivered only client aborts)",
               f"{acc.get('delivered', acc.get('sent'))} <= {acc.get('router_counted')} <= "
               f"{acc.get('sent')}; undelivered non-aborts "
               f"{acc.get('undelivered_not_aborted', 0)}", acc.get("ok", False)),
        _check("scheduled faults completed", f"{len(done)}/{len(res['faults'])}",
               len(done) == len(res["faults"]) and len(done) > 0),
        _5xx_check(res),
        _kill_check(res["faults"]),
    ]


def _5xx_check(res: dict) -> dict:
    """5xx answers and error events inside streams: each must be explained by a fault
    (the judge calls an unexplained one lost; counted here on their own)."""
    f = res["ledger"]["fields"]
    rows = [dict(zip(f, r, strict=True)) for r in res["ledger"]["rows"]]
    bad = [r for r in rows if (r["status"] or 0) >= 500 or r["mid_stream"]]
    unexplained = [r for r in bad if r["verdict"] != "failed_expected"]
    n5xx = sum((r["status"] or 0) >= 500 for r in bad)
    return _check("unexplained 5xx or in-stream errors",
                  f"{len(unexplained)} of {n5xx} 5xx answers + {len(bad) - n5xx} in-stream "
                  "error events (the rest while a fault was active)", not unexplained)


def _kill_check(faults: list[dict]) -> dict:
    """A SIGKILL of a backend's process group must take its whole tree (vllm serve's
    engine core too); a survivor would hold the core, memory and maybe the port."""
    kills = [f for f in faults if f["kind"] == "kill"]
    left = [s for f in kills for s in f.get("survivors", [])]
    procs = [f.get("killed_procs") for f in kills]
    return _check("no process outlived a backend kill",
                  f"{len(left)} survivors of {len(kills)} kills (processes per tree {procs})",
                  not left)


def series(res: dict, proc: str, key: str = "rss_mib") -> dict[int, list[tuple[float, float]]]:
    """{pid: [(t, value)]}: one series per process incarnation (a restart is a new pid)."""
    out: dict[int, list[tuple[float, float]]] = {}
    for s in res["samples"]:
        p = s["procs"].get(proc)
        if p:
            out.setdefault(p["pid"], []).append((s["t"], p[key]))
    return out


def growth(points: list[tuple[float, float]], start: float, end: float, window: float
           ) -> dict | None:
    """Median of the last window before ``end`` over the median of the first window
    after ``start`` (None when there is not two windows' worth of data)."""
    if end - start < 2 * window:
        return None
    first = [v for t, v in points if start <= t < start + window]
    last = [v for t, v in points if end - window <= t <= end]
    if not first or not last:
        return None
    base, final = statistics.median(first), statistics.median(last)
    xs = [(t, v) for t, v in points if start <= t <= end]
    return {"base": base, "final": final, "growth": final / base - 1,
            "slope_mib_per_h": _slope(xs) * 3600}


def _slope(xs: list[tuple[float, float]]) -> float:
    if len(xs) < 2:
        return 0.0
    mt = statistics.fmean(t for t, _ in xs)
    mv = statistics.fmean(v for _, v in xs)
    den = sum((t - mt) ** 2 for t, _ in xs)
    return sum((t - mt) * (v - mv) for t, v in xs) / den if den else 0.0


def rss_checks(res: dict) -> list[dict]:
    cfg = res["config"]
    out = []
    for proc in ("router", *backends(res)):
        for pid, pts in series(res, proc).items():
            # A restarted backend warms up again from when it was ready (its engine
            # loads for minutes first); a killed one ends at its last sample.
            start = max(cfg["warmup_s"], _ready_at(res, proc, pts[0][0]) + cfg["warmup_s"])
            g = growth(pts, start, min(res["load_s"], pts[-1][0]), cfg["window_s"])
            name = f"RSS growth, {proc} (pid {pid})"
            if g is None:
                out.append(_check(name, "not judged: under two windows after warm-up",
                                  True, gate=False))
                continue
            out.append(_check(name, f"{g['base']:.0f} -> {g['final']:.0f} MiB "
                              f"({g['growth']:+.1%}, slope {g['slope_mib_per_h']:+.0f} MiB/h)",
                              g["growth"] <= RSS_GROWTH_MAX))
    return out


def _ready_at(res: dict, proc: str, first_t: float) -> float:
    """When the incarnation first sampled at ``first_t`` was ready: the end of the kill
    that restarted it (0 for the first one)."""
    kills = [f for f in res["faults"] if f["kind"] == "kill" and f["backend"] == proc
             and f["t_start"] <= first_t and f.get("t_end") is not None]
    return max((f["t_end"] for f in kills), default=0.0)


def idle_checks(res: dict) -> list[dict]:
    start, end = res["idle"]["start"], res["idle"]["end"]
    rs, re_ = start["router"], end["router"]
    out = []
    if rs["router"] and re_["router"]:
        t0, t1 = rs["router"]["specgw_event_loop_tasks"], re_["router"]["specgw_event_loop_tasks"]
        out.append(_check("router asyncio tasks, idle before -> after", f"{t0:.0f} -> {t1:.0f}",
                          t1 <= t0 + IDLE_TASKS_SLACK))
        gauges = {k: re_["router"][k] for k in ("specgw_requests_in_flight",
                                                 *(f"in_flight_{b}" for b in backends(res)))}
        out.append(_check("router in-flight gauges at the end", gauges,
                          not any(gauges.values())))
    else:
        out.append(_check("router /metrics scraped when idle", "no", False))
    f0, f1 = rs["procs"]["router"]["fds"], re_["procs"]["router"]["fds"]
    out.append(_check("router open fds, idle before -> after", f"{f0} -> {f1}",
                      f1 <= f0 + IDLE_FDS_SLACK))
    # vllm serve: the plugin's request gauge (API server) and the engine's own
    # running + waiting requests must both be back to 0.
    # specgw's in-flight gauge is labelled by model and has no sample until the first
    # request: absent on a restarted backend that served nothing yet (nothing in flight).
    back = {f"{n}.{k}": v for n, b in end["backends"].items() for k, v in b.items()
            if k in ("in_flight", "engine_requests", "error")}
    out.append(_check("backends' own in-flight gauges at the end (in_flight None: no "
                      "request served since a restart)", back,
                      all(v == 0 or (v is None and k.endswith(".in_flight"))
                          for k, v in back.items())))
    tasks = {n: (start["backends"].get(n, {}).get("tasks"), b.get("tasks"))
             for n, b in end["backends"].items()}
    out.append(_check("backend asyncio tasks, idle before -> after (last incarnation; "
                      "vllm serve exports none)", ", ".join(
                          f"{n}: {_num(t0)} -> {_num(t1)}" for n, (t0, t1) in tasks.items()),
                      True, gate=False))
    return out


def _num(v: float | None) -> str:
    return "n/a" if v is None or v != v else f"{v:.0f}"


def verdicts(res: dict) -> list[dict]:
    return [*ledger_checks(res), *rss_checks(res), *idle_checks(res)]


# ------------------------------------------------------------------------------ report
def counters(res: dict) -> dict:
    """Failovers and ejections over the run (last sample minus the idle start)."""
    first = res["idle"]["start"]["router"]["router"] or {}
    last = next((s["router"] for s in reversed(res["samples"]) if s["router"]), {})
    keys = ("specgw_backend_failovers_total", *(f"ejections_{b}" for b in backends(res)))
    return {k: int(last.get(k, 0) - first.get(k, 0)) for k in keys}


def header(res: dict) -> list[str]:
    cfg, t = res["config"], res["totals"]
    kills = sum(f["kind"] == "kill" for f in res["faults"])
    stalls = sum(f["kind"] == "stall" for f in res["faults"])
    first = cfg["warmup_s"] if cfg.get("first_fault_s") is None else cfg["first_fault_s"]
    bs = backends(res)
    listing = ", ".join(f"{n}: {KIND_TEXT[k]}" for n, k in bs.items())
    return [
        f"# Reliability soak: router + {len(bs)} backends, faults on a schedule",
        "",
        f"Generated by `python -m benchmarks.soak_report` from `{res.get('_path', '?')}` "
        "(raw data, written by `benchmarks/soak.py`); every verdict below is computed from it.",
        "",
        f"Run started {res['started_utc']}: **{res['load_s']:.0f} s of load** "
        f"(configured {cfg['duration_s']:.0f} s), seed {cfg['seed']}, {cfg['clients']} "
        f"concurrent clients on a {res['host_cpus']}-core machine. The router "
        f"(`specgw serve --backends-file`, backend timeout {cfg['backend_timeout_s']:g} s, "
        f"--max-concurrency {cfg['max_concurrency']}, --max-queue {cfg['max_queue']}, "
        f"one API key with a {LIMITED_RPM} rpm budget) in front of {len(bs)} backends "
        f"({listing}; each the bundled tiny-code-llama + EAGLE-3 pair on the vLLM CPU "
        f"engine, pinned to one core). "
        f"{t['sent']} requests; {kills} backend kill(s) (SIGKILL to the backend's process "
        f"group, restart on the same port) and {stalls} stall(s) (SIGSTOP to the group for "
        f"{cfg['stall_s']:g} s, then SIGCONT), one every {cfg['fault_every_s']:g} s from "
        f"{first:g} s, in the order `{cfg.get('faults', 'stall:b,kill:a,stall:a,kill:b')}` "
        "(fault:backend, repeated).",
        "",
    ]


def verdict_lines(checks: list[dict], window_s: float) -> list[str]:
    rows = [(c["what"], c["value"] if not isinstance(c["value"], dict)
             else ", ".join(f"{k}={_num(v)}" for k, v in c["value"].items()),
             ("yes" if c["ok"] else "**no**") + ("" if c["gate"] else " (info)"))
            for c in checks]
    ok = all(c["ok"] for c in checks if c["gate"])
    return ["## Verdicts", "", f"**Overall: {'PASS' if ok else 'FAIL'}.** Bounds: RSS "
            f"growth <= {RSS_GROWTH_MAX:.0%} (median of the last {window_s:g} s of load vs the "
            f"first {window_s:g} s after warm-up, per process incarnation), router tasks <= idle + "
            f"{IDLE_TASKS_SLACK}, router fds <= idle + {IDLE_FDS_SLACK}.", "",
            *md_table(["check", "value", "met"], rows), ""]


def ledger_lines(res: dict) -> list[str]:
    t = res["totals"]
    rows = [(k, *(v.get(x, 0) for x in VERDICTS)) for k, v in sorted(t["by_kind"].items())]
    rows.append(("**all**", *(t["by_verdict"].get(x, 0) for x in VERDICTS)))
    errs = sorted(t["errors"].items(), key=lambda kv: -kv[1])
    lost = [dict(zip(res["ledger"]["fields"], r, strict=True)) for r in res["ledger"]["rows"]
            if r[res["ledger"]["fields"].index("verdict")] == "lost"]
    out = ["## Ledger", "", *md_table(["kind", *VERDICTS], rows), "",
           "OpenAI errors the clients got (all judged against the request kind and the "
           "faults active while the request ran):", "",
           *md_table(["status type/code", "requests"], errs), ""]
    if lost:
        out += ["Lost requests:", "", *md_table(
            ["request id", "kind", "t (s)", "reason"],
            [(x["rid"], x["kind"], x["t"], x["reason"]) for x in lost[:50]]), ""]
    return out


def fault_lines(res: dict) -> list[str]:
    bs = backends(res)
    rows = [(f["kind"], f"{f['backend']} ({KIND_TEXT[bs[f['backend']]]})", f["t_start"],
             f["t_end"], f.get("killed_procs"), f.get("restart_s")) for f in res["faults"]]
    c = counters(res)
    ej = ", ".join(f"{b}={c[f'ejections_{b}']}" for b in bs)
    return ["## Faults", "", *md_table(["fault", "backend", "start (s)", "end (s)",
                                         "processes killed", "restart to ready (s)"], rows),
            "", "A kill and a stall signal the backend's whole process group (both kinds "
            "run an API server, vLLM's resource tracker, an engine core and a worker "
            "process).", "",
            f"Router counters over the run: {c['specgw_backend_failovers_total']} failovers "
            f"(retried on another backend before the first byte), ejections {ej}.", ""]


def window_lines(res: dict) -> list[str]:
    rows = [(f"{w['t0']:.0f}-{w['t1']:.0f}", w["sent"], w["verdicts"]["succeeded"],
             w["verdicts"]["failed_expected"], w["verdicts"]["lost"], num(w["ok_per_s"]),
             num(w["tokens_per_s"], "{:.1f}"), num(w["latency_p50_s"]),
             num(w["latency_p99_s"]), num(w["ttft_p50_s"]), num(w["ttft_p99_s"]))
            for w in res["windows"]]
    return ["## Over time", "", "![soak](soak.png)", "",
            *md_table(["window (s)", "sent", "ok", "expected errors", "lost", "ok/s",
                       "tokens/s", "p50 latency (s)", "p99 latency (s)", "p50 TTFT (s)",
                       "p99 TTFT (s)"], rows), ""]


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ws = res["windows"]
    mid = [(w["t0"] + w["t1"]) / 2 for w in ws]
    fig, ax = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
    ax[0].plot(mid, [w["ok_per_s"] for w in ws], "o-", label="succeeded/s")
    ax[0].plot(mid, [w["verdicts"]["failed_expected"] / (w["t1"] - w["t0"]) for w in ws],
               "s-", label="expected errors/s")
    ax[0].plot(mid, [w["verdicts"]["lost"] for w in ws], "x-", color="red", label="lost")
    ax[1].plot(mid, [w["latency_p50_s"] for w in ws], "o-", label="latency p50")
    ax[1].plot(mid, [w["latency_p99_s"] for w in ws], "o--", label="latency p99")
    ax[1].plot(mid, [w["ttft_p50_s"] for w in ws], "s-", label="TTFT p50")
    ax[1].plot(mid, [w["ttft_p99_s"] for w in ws], "s--", label="TTFT p99")
    ax[1].set_ylabel("s")
    bs = backends(res)
    for j, proc in enumerate(("router", *bs)):
        for i, pts in enumerate(series(res, proc).values()):
            label = proc if proc == "router" else f"{proc} ({bs[proc]})"
            ax[2].plot(*zip(*pts, strict=True), label=label if i == 0 else None,
                       color=f"C{j}")
    ax[2].set_ylabel("RSS MiB")
    ax[2].set_yscale("log")
    rs = [s for s in res["samples"] if s["router"]]
    ax[3].plot([s["t"] for s in rs], [s["router"]["specgw_event_loop_tasks"] for s in rs],
               label="router asyncio tasks")
    ax[3].plot([s["t"] for s in rs], [s["procs"]["router"]["fds"] for s in rs],
               label="router open fds")
    ax[3].plot([s["t"] for s in rs], [s["router"]["specgw_requests_in_flight"] for s in rs],
               label="router in flight")
    ax[3].set_xlabel("seconds since start")
    for a in ax:
        for f in res["faults"]:
            a.axvspan(f["t_start"], f["t_end"] or res["end_s"], alpha=0.12,
                      color="red" if f["kind"] == "kill" else "orange")
        a.legend(fontsize=8, loc="upper right")
    ax[0].set_title("soak: red = backend killed until ready again, orange = stalled")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def notes_lines(res: dict) -> list[str]:
    cfg = res["config"]
    return [
        "## How requests are judged", "",
        "Each request carries its own `x-request-id` and ends in exactly one ledger entry "
        "(client exceptions are recorded on it, never raised). **succeeded**: HTTP 200 "
        "with every choice finished (`finish_reason` set), and for a stream `[DONE]` with "
        "no error event. **failed_expected**: an OpenAI error body (or error event) that "
        "the request kind or a fault explains: bad input -> 4xx with an OpenAI error type "
        "(`invalid_request_error` or `not_found_error`; some refused by the router's own "
        "validation, some - a prompt over the 2048-token context, `max_tokens` over it - only "
        "by a backend, whose 4xx the router passes on in OpenAI's shape, also while a fault "
        "is active 502/503/504); 429 `server_overloaded` "
        f"(router slots + queue full, provoked by bursts of {BURST}); 429 "
        f"`rate_limit_exceeded` on the key with a {LIMITED_RPM} rpm budget; 502/503/504 or an "
        "error event inside a stream only while a fault was active (from its start to "
        f"{FAULT_GRACE_S:g} s after it ended: passive ejection lasts 10 s, health checks "
        "run every 2 s). **aborted**: the client left on purpose (right after the "
        "headers, after 1 or 3 events, or on a 0.02-0.5 s client timeout, often before "
        "the headers). **lost**: anything else: no end within "
        f"{cfg['deadline_s']:g} s (hung), a stream or body cut short without an error "
        "event, a 5xx or error event with no fault active, a 4xx on a good request, a "
        "dropped connection. The slow SSE reader (0.3 s per event) is part of the mix "
        "all along rather than a scheduled fault.", "",
        "## What this does not show", "",
        "A 2-core CPU machine and the bundled tiny pair: the throughput and latency "
        "figures describe this harness on this machine, not the gateway's capacity. "
        "Backend RSS and fds are summed over each backend's process tree (API server, "
        "vLLM's resource tracker, engine core and worker, for both kinds; the raw samples "
        "keep each process). Memory is judged per process incarnation: a "
        "killed and restarted backend starts a new series and warms up again, so a "
        "backend that lives for less than two windows after its warm-up is not judged. "
        "Task counts are the router's (gated) and `specgw serve`'s (information); `vllm "
        "serve` has none to read (the plugin's gauge is NaN there, its `/metrics` renders "
        "off the event loop). `vllm serve` has no queue bound of its own, so the only "
        "queue-bound 429s are the router's. The router reshapes a backend's 4xx body into "
        "OpenAI's error shape; an error event inside a backend's stream is relayed as the "
        f"backend wrote it (error events in this run, by type: {_stream_errors(res)}; "
        "`backend_error` is the router's own, for a stream cut before `[DONE]`).",
        "",
        "Runs not used here (a failed first 20-minute run with the vllm serve backend, and "
        "why): `docs/soak/README.md`.",
        "",
    ]


def _stream_errors(res: dict) -> str:
    f = res["ledger"]["fields"]
    kinds: dict[str, int] = {}
    for r in res["ledger"]["rows"]:
        if r[f.index("mid_stream")]:
            t = str(r[f.index("err_type")])
            kinds[t] = kinds.get(t, 0) + 1
    return ", ".join(f"`{k}` {v}" for k, v in sorted(kinds.items())) or "none"


def report(res: dict) -> list[str]:
    return [*header(res), *verdict_lines(verdicts(res), res["config"]["window_s"]),
            *ledger_lines(res), *fault_lines(res), *window_lines(res), *notes_lines(res)]


def load(path: Path) -> dict:
    """The raw result, plain or gzipped (the committed copy is ``soak.json.gz``)."""
    raw = path.read_bytes()
    res = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    res["_path"] = str(path)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", type=Path)
    ap.add_argument("--md", type=Path, default=Path("docs/soak.md"))
    ap.add_argument("--plot", type=Path, default=Path("docs/soak.png"))
    a = ap.parse_args(argv)
    res = load(a.json)
    write(a.md, report(res))
    plot(res, a.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
