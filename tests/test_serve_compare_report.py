"""The serve_compare report on the committed H200 run sets: ratios paired by repetition,
never across run sets, verdicts that follow the data, the router's failures placed in the
run they happened in. Pure Python over the raw JSON and logs; no engine."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest

from benchmarks.serve_compare_data import RunSet, engine_evidence
from benchmarks.serve_compare_report import T_ROUTER, pair_stats, router_section, targets

DATA = Path(__file__).resolve().parent.parent / "docs" / "gpu" / "serve_compare"


def raw(src: Path, v: str, c: int, rep: int) -> dict:
    return json.loads((src / "runs" / f"{v}_c{c}_r{rep}.json").read_text())["bench"]


def test_ratios_are_paired_by_repetition():
    rs = RunSet.load(DATA / "run1")
    s = pair_stats(rs)[("specgw", "vllm", 64)]
    want = [raw(rs.src, "specgw", 64, i)["output_throughput"]
            / raw(rs.src, "vllm", 64, i)["output_throughput"] for i in range(5)]
    assert s["ratios"] == want
    assert s["ratio"].median == statistics.median(want)


def test_servers_of_different_run_sets_are_never_divided():
    sets = [RunSet.load(DATA / "run1"), RunSet.load(DATA / "run2_router")]
    stats = {rs.label: pair_stats(rs) for rs in sets}
    assert not any(a == "specgw" for a, _, _ in stats["run2_router"])
    assert not any(a == "router" for a, _, _ in stats["run1"])
    rows = targets(sets, stats)
    poll = [r for r in rows if r[0] == "probe overhead at poll 1 s"]
    assert poll and poll[0][4] == "no data"


def test_every_engine_logged_the_same_configuration():
    digests = set()
    for d in ("run1", "run2_router"):
        rs = RunSet.load(DATA / d)
        for v in rs.meta["servers"]:
            e = engine_evidence(rs.log_lines(v))
            if v == "router":
                assert e["config_digest"] is None
            else:
                assert e["config_digest"] and e["async_scheduling"]
                digests.add(e["config_digest"])
    assert len(digests) == 1


def test_router_failures_are_counted_and_placed():
    rs = RunSet.load(DATA / "run2_router")
    failed = sum(raw(rs.src, "router", c, i)["failed"] for c in rs.conc() for i in range(5))
    assert rs.requests("router")[1] == failed > 0
    lines = router_section(rs, pair_stats(rs))
    ejected = [ln for ln in lines if " ejected for " in ln]
    assert len(ejected) == 1 and ejected[0].endswith("(c=128 rep 1)")


def test_router_verdict_follows_the_data(tmp_path: Path):
    src = tmp_path / "run2_router"
    shutil.copytree(DATA / "run2_router", src)
    for i in range(5):  # the router as fast as the engine directly, in every repetition
        f = src / "runs" / f"router_c64_r{i}.json"
        r = json.loads(f.read_text())
        r["bench"]["output_throughput"] = raw(src, "vllm", 64, i)["output_throughput"]
        f.write_text(json.dumps(r))

    def router_row(rs: RunSet) -> list:
        return next(r for r in targets([rs], {rs.label: pair_stats(rs)}) if r[0] == str(T_ROUTER))

    assert router_row(RunSet.load(DATA / "run2_router"))[4] == "**no**"
    assert router_row(RunSet.load(src))[4] == "yes"


def test_summarise_keeps_per_request_ttft_and_errors():
    from benchmarks.serve_compare import summarise

    res = {"output_throughput": 10.0, "median_ttft_ms": 5.0, "generated_texts": ["x", ""],
           "start_times": [100.0, 100.25], "ttfts": [0.0123, 0.0],
           "errors": ["", "Traceback (most recent call last):\n  ...\nReadError: boom\n"]}
    out = summarise(res)
    assert out["request_start_ms"] == [0.0, 250.0]
    assert out["request_ttft_ms"] == [12.3, 0.0]
    assert out["error_counts"] == {"ReadError: boom": 1}
    assert "generated_texts" not in out and out["output_throughput"] == 10.0


def test_per_request_timings_place_a_ttft_tail(tmp_path: Path):
    from benchmarks.serve_compare_report import swing_findings

    src = tmp_path / "run1"
    shutil.copytree(DATA / "run1", src)
    f = src / "runs" / "specgw_c128_r2.json"  # a run whose TTFT p99 exceeds every vllm run's
    r = json.loads(f.read_text())
    r["bench"]["request_start_ms"] = [0.0, 5.0, 900.0]
    r["bench"]["request_ttft_ms"] = [600.0, 550.0, 40.0]
    f.write_text(json.dumps(r))
    text = "\n".join(swing_findings([RunSet.load(src)], [128]))
    assert "specgw rep 2 p90/p99 546/552 ms" in text
    assert "2 requests over 318 ms, started 0-5 ms after the run's first request" in text


def test_engine_timing_is_the_delta_of_vllms_own_histogram():
    """The engine core's mean inter-token latency over one run: the histogram's sum over its
    count between two scrapes, not since the server started."""
    from benchmarks.harness import parse_metrics
    from benchmarks.serve_compare import engine_timing

    def scrape_text(s: float, n: float, it: float, gen: float, q: float = 0.0) -> str:
        return (f'vllm:inter_token_latency_seconds_sum{{model_name="bench"}} {s}\n'
                f'vllm:inter_token_latency_seconds_count{{model_name="bench"}} {n}\n'
                f'vllm:iteration_tokens_total_count{{model_name="bench"}} {it}\n'
                f'vllm:generation_tokens_total{{model_name="bench"}} {gen}\n'
                f'vllm:request_queue_time_seconds_sum{{model_name="bench"}} {q}\n'
                f'vllm:request_queue_time_seconds_count{{model_name="bench"}} {gen / 128}\n')

    before = parse_metrics(scrape_text(10.0, 1000, 500, 2000))
    after = parse_metrics(scrape_text(10.3, 1100, 540, 2128, q=0.05))
    t = engine_timing(before, after)
    assert t == {"itl_mean_ms": 3.0, "itl_count": 100, "iterations": 40,
                 "generation_tokens": 128, "queue_mean_ms": 50.0, "ttft_mean_ms": None,
                 "prefill_mean_ms": None, "decode_mean_ms": None}
    assert engine_timing(before, before)["itl_mean_ms"] is None


def test_instance_pairs_are_paired_like_every_other_pair():
    rs = RunSet.load(DATA / "run5_instance")
    st = pair_stats(rs)
    for a, b in (("specgw-2", "specgw"), ("vllm-2", "vllm")):
        for c in rs.conc():
            got = st[(a, b, c)]["ratios"]
            want = [x / y for x, y in rs.paired(a, b, c, "output_throughput")]
            assert got == want and len(got) == 5


def test_pin_plan_gives_each_server_its_own_cpus_and_the_client_the_rest():
    import pytest

    from benchmarks.serve_compare import cpu_plan

    plan, rest = cpu_plan(["specgw", "vllm", "router"], 3, list(range(16)))
    assert plan == {"specgw": [0, 1, 2], "vllm": [3, 4, 5], "router": [6, 7, 8]}
    assert rest == list(range(9, 16))
    with pytest.raises(SystemExit, match="leave none for the client"):
        cpu_plan(["specgw", "vllm"], 8, list(range(16)))


def test_stock_vllm_serve_runs_no_plugin_and_the_report_says_which_sets_did(tmp_path: Path):
    """The ``vllm`` variant is what a user without specgw runs: under its env vLLM's own
    plugin loader (real vLLM, a fresh process) loads nothing of ours, while under the
    runner-V1 plugin variant's env it does. The report reads which a run set used from its
    ``servers.json``; sets that recorded no env ran ``SPECGW_PROBES=0``."""
    import os
    import subprocess
    import sys

    from benchmarks.serve_compare import vllm_env

    probe = ("from vllm.plugins import load_general_plugins; load_general_plugins(); "
             "import sys; print('engine_ext.plugin' in sys.modules)")

    def loaded(env: dict[str, str]) -> str:
        return subprocess.run([sys.executable, "-c", probe], env={**os.environ, **env},
                              capture_output=True, text=True, timeout=300,
                              check=True).stdout.strip().splitlines()[-1]

    assert loaded(vllm_env("vllm")) == "False"
    assert loaded(vllm_env("vllm-v1-piecewise")) == "True"

    old = RunSet.load(DATA / "run7_pinned")
    assert "SPECGW_PROBES=0" in old.stock_vllm_text()
    new = RunSet("new", tmp_path, {**old.meta, "servers": {
        **old.meta["servers"], "vllm": {**old.meta["servers"]["vllm"], "env": vllm_env("vllm")}}},
        old.cells)
    assert new.stock_vllm_text().startswith("no plugin loaded")


def test_a_pinned_server_and_what_it_starts_stay_on_its_cpus(tmp_path: Path):
    """A real process on 127.0.0.1 started with ``cpus``: its mask is set before exec, so
    a child it starts later inherits it."""
    import os
    import sys

    import httpx

    from benchmarks.harness import Server

    cpu = min(os.sched_getaffinity(0))
    child = ("import http.server, subprocess, sys;"
             "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
             "open(sys.argv[2], 'w').write(str(p.pid));"
             "http.server.test(http.server.SimpleHTTPRequestHandler, port=int(sys.argv[1]),"
             " bind='127.0.0.1')")
    srv = Server("pinned", [str(tmp_path / "child.pid")], cmd=[sys.executable, "-c", child,
                                                                "{port}"],
                 ready_path="/", log_dir=tmp_path, cpus=[cpu])
    try:
        srv.wait_ready(30)
        assert httpx.get(srv.url + "/").status_code == 200
        assert os.sched_getaffinity(srv.proc.pid) == {cpu}
        kid = int((tmp_path / "child.pid").read_text())
        assert os.sched_getaffinity(kid) == {cpu}
    finally:
        srv.stop()


def test_ttft_stages_split_the_clients_ttft_on_vllms_clocks(tmp_path: Path):
    """Client TTFT against vLLM's own TTFT, split into the span before the scheduler, the
    queue and prefill, each per run before the median; runs that lack a term are left out;
    absent from run sets that did not record them."""
    from benchmarks.serve_compare_report import ttft_stage_table

    assert ttft_stage_table(RunSet.load(DATA / "run5_instance")) == []
    src = tmp_path / "run5_instance"
    shutil.copytree(DATA / "run5_instance", src)
    for f in (src / "runs").glob("*.json"):
        r = json.loads(f.read_text())
        r["engine_timing"].update(ttft_mean_ms=r["bench"]["mean_ttft_ms"] - 1.5,
                                  queue_mean_ms=2.0, prefill_mean_ms=4.0 + r["rep"])
        if r["rep"] == 0 and r["variant"] == "vllm-2":
            r["engine_timing"]["prefill_mean_ms"] = None
        f.write_text(json.dumps(r))
    rs = RunSet.load(src)
    st = rs.ttft_stages("vllm", 64)
    runs = rs.runs("vllm", 64)
    assert st["reps"] == len(runs) == 5 and st["front"] == pytest.approx(1.5)
    assert st["outside_core"] == pytest.approx(statistics.median(
        r["bench"]["mean_ttft_ms"] - 1.5 - 2.0 - (4.0 + r["rep"]) for r in runs))
    assert st["steps"] == statistics.median(r["engine_timing"]["iterations"] for r in runs)
    assert rs.ttft_stages("vllm-2", 64)["reps"] == 4
    table = ttft_stage_table(rs)
    client = statistics.median(rs.values("vllm", 64, "mean_ttft_ms"))
    server = statistics.median(rs.record_values("vllm", 64, "engine_timing", "ttft_mean_ms"))
    assert (f"| 64 | vllm | 5 | {client:.1f} | {server:.1f} | +1.5 | {st['outside_core']:.1f} "
            f"| 2.0 | 6.0 | {st['steps']:.0f} |") in table


def test_placement_times_each_process_of_a_server_over_a_run(tmp_path: Path):
    """A real server whose child burns 0.3 s of CPU when asked: ``placement`` with the
    ``cpu_seconds`` taken before charges that CPU to the child, not to the server process,
    and not what either used before."""
    import sys
    import time

    from benchmarks.harness import Server
    from benchmarks.serve_compare import cpu_seconds, placement

    flag = tmp_path / "burn"
    burner = ("import os, sys, time\n"
              "while True:\n"
              "    if os.path.exists(sys.argv[1]):\n"
              "        end = time.process_time() + 0.3\n"
              "        while time.process_time() < end: pass\n"
              "        os.remove(sys.argv[1])\n"
              "    time.sleep(0.02)\n")
    server = ("import http.server, subprocess, sys;"
              f"subprocess.Popen([sys.executable, '-c', {burner!r}, sys.argv[2]]);"
              "http.server.test(http.server.SimpleHTTPRequestHandler, port=int(sys.argv[1]),"
              " bind='127.0.0.1')")
    srv = Server("burner", [str(flag)], cmd=[sys.executable, "-c", server, "{port}"],
                 ready_path="/", log_dir=tmp_path)
    try:
        srv.wait_ready(30)
        time.sleep(0.5)  # the child's own start-up CPU falls before the window
        before = cpu_seconds(srv)
        assert len(before) == 2
        flag.write_text("")
        deadline = time.time() + 20
        while flag.exists() and time.time() < deadline:
            time.sleep(0.05)
        procs = {p["pid"]: p for p in placement(srv, before)}
        root, child = procs.pop(srv.proc.pid), procs.popitem()[1]
        assert 0.25 <= child["cpu_s"] < 1.0
        assert root["cpu_s"] < 0.1
        assert "cpu_s" not in placement(srv)[0]
    finally:
        srv.stop()


def test_cpu_per_token_splits_front_end_and_engine_core(tmp_path: Path):
    """Per run: vLLM's engine processes' CPU seconds against every other process's, per
    generated token, then the median; runs without the record are left out, and the table
    is only there when some run has it."""
    from benchmarks.serve_compare_report import cpu_table

    assert cpu_table(RunSet.load(DATA / "run7_pinned")) == []
    src = tmp_path / "run7_pinned"
    shutil.copytree(DATA / "run7_pinned", src)
    for f in (src / "runs").glob("*_c16_*.json"):
        r = json.loads(f.read_text())
        for p in r["placement"]:
            p["cpu_s"] = (2.0 if p["name"] == "VLLM::EngineCore" else 0.5) * (1 + r["rep"])
        if r["rep"] == 4:
            r["placement"] = [{k: v for k, v in p.items() if k != "cpu_s"}
                              for p in r["placement"]]
        f.write_text(json.dumps(r))
    rs = RunSet.load(src)
    assert rs.cpu_per_token("vllm", 1) is None
    st = rs.cpu_per_token("vllm", 16)
    runs = [r for r in rs.runs("vllm", 16) if r["rep"] != 4]
    fronts = [sum(0.5 * (1 + r["rep"]) for p in r["placement"]
                  if p["name"] != "VLLM::EngineCore")
              / r["engine_timing"]["generation_tokens"] for r in runs]
    assert st["reps"] == 4
    assert st["front"] == pytest.approx(1000 * statistics.median(fronts))
    assert st["engine"] == pytest.approx(4 * st["front"] / sum(
        p["name"] != "VLLM::EngineCore" for p in runs[0]["placement"]))
    # A worker process of its own (the CPU engine's) is engine, not front end.
    cpu = RunSet.load(DATA.parent.parent / "cpu" / "serve_compare_cputime")
    runs = cpu.runs("specgw", 8)
    assert any(p["name"] == "VLLM::Worker" for p in runs[0]["placement"])
    engine = [1000 * sum(p["cpu_s"] for p in r["placement"]
                         if p["name"] in ("VLLM::EngineCore", "VLLM::Worker"))
              / r["engine_timing"]["generation_tokens"] for r in runs]
    assert cpu.cpu_per_token("specgw", 8)["engine"] == pytest.approx(
        statistics.median(engine))
    table = cpu_table(rs)
    assert any(ln.startswith(f"| 16 | vllm | 4 | {st['front']:.3f} |") for ln in table)


def test_router_timing_reads_a_histogram_as_prometheus_would():
    """``histogram_quantile`` over prometheus-client's own exposition: the median
    interpolated inside its bucket, only the observations between the two scrapes."""
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from benchmarks.harness import parse_metrics
    from benchmarks.serve_compare import histogram_quantile, router_timing

    reg = CollectorRegistry()
    added = Histogram("specgw_gateway_added_latency_seconds", "", ["backend"],
                      buckets=(0.001, 0.01, 0.1), registry=reg)
    ttfb = Histogram("specgw_backend_time_to_first_byte_seconds", "", ["backend"],
                     buckets=(0.01, 0.1, 1), registry=reg)
    for _ in range(7):  # before the run: not in it
        added.labels("engine").observe(0.05)
        ttfb.labels("engine").observe(0.5)
    before = parse_metrics(generate_latest(reg).decode())
    for v in [0.0005] * 10 + [0.005] * 10 + [0.05] * 5:
        added.labels("engine").observe(v)
        ttfb.labels("engine").observe(0.05)
    after = parse_metrics(generate_latest(reg).decode())
    # 25 observations, rank 12.5: 2.5 of the 10 in (0.001, 0.01].
    p50 = histogram_quantile(before, after, "specgw_gateway_added_latency_seconds", 0.5)
    assert p50 == pytest.approx(0.001 + 0.009 * 2.5 / 10)
    t = router_timing(before, after)
    assert t["requests"] == 25
    assert t["added_mean_ms"] == pytest.approx(1000 * (10 * 0.0005 + 10 * 0.005 + 5 * 0.05) / 25)
    assert t["backend_ttfb_mean_ms"] == pytest.approx(50.0)
    assert t["backend_ttfb_p50_ms"] == pytest.approx(1000 * (0.01 + 0.09 * 12.5 / 25))
    assert router_timing(after, after) is None
