"""The probes' step-by-step A/B (``/v1/engine/probes/alternate``,
``engine_ext.probes.alternate``) on the real CPU engine, in ``specgw serve`` and in a
stock ``vllm serve`` with the plugin; and its analysis (``probe_alternate_data``) on
records whose answer is known."""

from __future__ import annotations

import itertools
import random
import threading
import time

import httpx
import pytest
from conftest import MODEL, Server, metric_sum, scrape

from benchmarks import probe_alternate_data as pad

ROUTE = "/v1/engine/probes/alternate"


class _Load:
    """Greedy completions one after another in the background until stopped: engine
    steps keep coming whatever the machine's speed."""

    def __init__(self, client, model: str):
        self.stop = threading.Event()

        def loop() -> None:
            while not self.stop.is_set():
                client.completions.create(model=model, prompt="def f(x):\n", max_tokens=64,
                                          temperature=0, extra_body={"ignore_eos": True})

        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()

    def __enter__(self) -> _Load:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=120)


def _run(url: str, steps: int, mode: str, timeout: float = 120, **extra: object) -> dict:
    r = httpx.post(url + ROUTE, json={"steps": steps, "mode": mode, "seed": 7, **extra},
                   timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["ranks"][0]["started"] is True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = httpx.get(url + ROUTE, timeout=60).json()
        if got["done"]:
            return got["ranks"][0]["record"]
        time.sleep(0.3)
    raise AssertionError(f"alternation not done: {got}")


def _check_alternation(url: str, client, model: str) -> None:
    with _Load(client, model):
        for mode in ("ab", "aa"):
            rec = _run(url, 40, mode)
            assert rec["done"] and rec["mode"] == mode and rec["recorded"] == 40
            t, state = rec["t_ns"], rec["state"]
            assert len(t) == 41 and all(b > a for a, b in itertools.pairwise(t))
            # Pairs of steps, one in and one out each, in a seeded random order.
            assert all(sorted(state[i:i + 2]) == [0, 1] for i in range(0, 40, 2))
            assert 0 < sum(state[i] for i in range(0, 40, 2)) < 20
            # A step can schedule nothing (between one request's end and the next's
            # arrival); under steady load most schedule the running request.
            busy = [tok > 0 for tok in rec["tokens"]]
            assert sum(busy) >= 30
            assert all(r > 0 for r, b in zip(rec["reqs"], busy, strict=True) if b)
            # The switch reached the worker: the ledger counted the drafter's propose on
            # exactly the busy steps the probes were in on (every busy step in the control).
            on = [s if mode == "ab" else 1 for s in state]
            counted = sum(o for o, b in zip(on, busy, strict=True) if b)
            assert rec["proposes_counted"] == counted, rec
            # What a Python call costs on the model's thread, timed in the first step,
            # which the pairs then leave out.
            env = rec["frame_environment"]
            assert env["calls"] > 0 and 0 < env["call_ns"] < 1e5
            assert env["call_through_wrapper_ns"] > 0 and "eval_frame_callback" in env
            assert list(pad.rpc_steps(rec, "frame_environment")) == [0]
    probes = httpx.get(url + "/v1/engine/probes", timeout=60).json()
    assert probes[0]["enabled"] is True  # put back as they were


def test_alternation_switches_the_probes_step_by_step(base_url, client):
    _check_alternation(base_url, client, MODEL)


def test_a_second_alternation_is_refused_and_delete_ends_the_first(base_url):
    # No load: the first waits for engine steps that do not come.
    r = httpx.post(base_url + ROUTE, json={"steps": 1000}, timeout=60)
    assert r.status_code == 200, r.text
    try:
        again = httpx.post(base_url + ROUTE, json={"steps": 10, "mode": "aa"}, timeout=60)
        assert again.status_code == 409, again.text
        assert again.json()["error"]["type"] == "conflict_error"
        assert httpx.get(base_url + ROUTE, timeout=60).json()["done"] is False
    finally:
        stopped = httpx.delete(base_url + ROUTE, timeout=60)
    assert stopped.status_code == 200 and stopped.json()["done"] is True
    assert httpx.post(base_url + ROUTE, json={"steps": 2}, timeout=60).status_code == 200
    httpx.delete(base_url + ROUTE, timeout=60)


def test_the_gateway_bound_on_steps_is_the_workers():
    from engine_ext.probes.alternate import MAX_STEPS
    from gateway.protocol import ALTERNATE_MAX_STEPS

    assert ALTERNATE_MAX_STEPS == MAX_STEPS


def test_the_gateway_names_the_workers_probe_groups():
    import typing

    from engine_ext.internals.install import GROUPS
    from gateway.protocol import ProbeGroup

    assert typing.get_args(ProbeGroup) == GROUPS


def test_one_group_alone_is_switched_and_the_rest_stay_out(base_url, client):
    """``groups``: on the 'in' steps only the named kinds of wrapper are in. With only
    ``propose`` in, the scratch ledger counts the drafter's proposes on the busy 'in'
    steps; with only ``forward_context`` in, no propose at all (that wrapper is out). The
    server's own ledger counts none of it: its coverage stays whole."""
    before = httpx.get(base_url + "/v1/engine/probes", timeout=60).json()[0]
    with _Load(client, MODEL):
        rec = _run(base_url, 40, "ab", groups=["propose"])
        busy = [tok > 0 for tok in rec["tokens"]]
        assert rec["groups"] == ["propose"] and sum(busy) >= 30
        assert rec["proposes_counted"] == sum(
            s for s, b in zip(rec["state"], busy, strict=True) if b), rec
        rec = _run(base_url, 40, "aa", groups=["forward_context", "replay"])
        assert rec["groups"] == ["forward_context", "replay"]
        assert rec["proposes_counted"] == 0, rec
    after = httpx.get(base_url + "/v1/engine/probes", timeout=60).json()[0]
    assert after["enabled"] is True
    assert after["proposes_without_forward"] == before["proposes_without_forward"]
    assert after["unattributed_replays"] == before["unattributed_replays"]
    client.completions.create(model=MODEL, prompt="def f(x):\n", max_tokens=8,
                              temperature=0, extra_body={"ignore_eos": True})
    # Every group back in, counting into the server's ledger again.
    again = httpx.get(base_url + "/v1/engine/probes", timeout=60).json()[0]
    assert again["proposes"] > after["proposes"]
    assert again["proposes_without_forward"] == before["proposes_without_forward"]
    assert metric_sum(scrape(base_url), "specgw_probe_coverage", role="draft") == 1


@pytest.mark.parametrize("body", [{"steps": 41}, {"steps": 0}, {"steps": "40"},
                                  {"steps": 40.0}, {"steps": 400_002}, {"steps": 40, "mode": "x"},
                                  {"steps": 40, "seed": -1}, {"steps": 40, "extra": 1}, {},
                                  {"steps": 40, "groups": []}, {"steps": 40, "groups": ["x"]},
                                  {"steps": 40, "groups": "replay"}])
def test_alternation_refuses_bad_bodies_with_a_400(base_url, body):
    r = httpx.post(base_url + ROUTE, json=body, timeout=60)
    assert r.status_code == 400, (body, r.status_code, r.text)
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_alternation_inside_vllm_serve(vllm_serve: Server):
    from conftest import openai_client

    from engine_ext.vllm_serve import SERVED_MODEL

    _check_alternation(vllm_serve.url, openai_client(vllm_serve.url), SERVED_MODEL)


# ---------------------------------------------------------------- the analysis
def _record(d_on: list[float], d_off: list[float], seed: int = 0,
            tokens: list[int] | None = None, spans: list | None = None) -> dict:
    """A record whose pairs last d_on / d_off ns, in a random order per pair."""
    rng = random.Random(seed)
    state, durs = [], []
    for on, off in zip(d_on, d_off, strict=True):
        if rng.random() < 0.5:
            state += [1, 0]
            durs += [on, off]
        else:
            state += [0, 1]
            durs += [off, on]
    t = [0]
    for d in durs:
        t.append(t[-1] + int(d))
    n = len(durs)
    return {"mode": "ab", "steps": n, "done": True, "state": state, "t_ns": t,
            "tokens": tokens or [16] * n, "reqs": [4] * n, "rpc_spans": spans or []}


def test_overhead_recovers_a_known_cost_and_its_interval_covers_it():
    rng = random.Random(1)
    off = [3e6 * rng.uniform(0.7, 1.6) for _ in range(3000)]  # host swings of +-50%
    on = [x * 1.02 * rng.uniform(0.99, 1.01) for x in off]  # +2% per step
    (total, median) = pad.overhead(pad.step_pairs(_record(on, off))[0])
    assert total.lo < 2.0 < total.hi and total.hi - total.lo < 0.5
    assert median.lo < 2.0 < median.hi
    same = pad.overhead(pad.step_pairs(_record(off, off))[0])[0]
    assert same.value == 0 and same.lo <= 0 <= same.hi


def test_pairs_with_other_work_or_an_rpc_are_left_out():
    rec = _record([1e6] * 4, [1e6] * 4, tokens=[16, 16, 16, 20, 16, 16, 16, 16])
    t = rec["t_ns"]
    rec["rpc_spans"] = [["snapshot", t[4] + 10, t[4] + 20]]  # inside step 4
    pairs, total = pad.step_pairs(rec)
    assert total == 4 and len(pairs) == 2  # pair 1 (tokens differ), pair 2 (the RPC)


def test_a_probe_read_is_priced_from_its_step_and_its_neighbours():
    on, off = [2e6] * 50, [2e6] * 50
    rec = _record(on, off)
    d = pad.intervals(rec)
    # Step 60 lasted 0.5 ms longer, and a probe read fell into it.
    rec["t_ns"] = [0]
    for i, x in enumerate(d):
        rec["t_ns"].append(rec["t_ns"][-1] + int(x + (5e5 if i == 60 else 0)))
    rec["rpc_spans"] = [["snapshot", rec["t_ns"][60] + 1, rec["t_ns"][60] + 2]]
    assert pad.read_costs(rec) == [5e5]


def test_verdict_branches():
    def cell(ab: pad.Estimate, read_ms: float | None = None) -> pad.Cell:
        z = pad.Estimate(0.0, -0.1, 0.1)
        return pad.Cell(1, ab, ab, z, z, {"ab": (1, 1), "aa": (1, 1)}, 2.0, read_ms, 1)

    assert cell(pad.Estimate(0.3, 0.1, 0.5)).verdict(5)[0] == "yes"
    assert cell(pad.Estimate(3.0, 2.0, 4.0)).verdict(5)[0] == "no"
    assert cell(pad.Estimate(0.8, 0.4, 1.2)).verdict(5)[0] == "not resolved"
    # A read of 8 ms: 0.16% of the loop at a 5 s poll, 0.8% at 1 s.
    c = cell(pad.Estimate(0.3, 0.1, 0.5), read_ms=8.0)
    assert c.verdict(5)[0] == "yes" and c.verdict(1)[0] == "not resolved"
    assert c.verdict(1)[1].value == pytest.approx(1.1)


def test_the_issue_page_reads_target_2_from_the_alternation():
    from benchmarks.benchmarks_report import TARGET_CONCURRENCY, alternate_rows
    from engine_ext.probes.ledger import COUNTING

    rng = random.Random(3)
    off = [2e6 * rng.uniform(0.8, 1.2) for _ in range(2000)]

    def block(mode: str, cost: float) -> dict:
        rec = {**_record([x * cost for x in off], off), "mode": mode}
        return {"mode": mode, "ranks": [{"record": rec}]}

    def unledgered(cells: list[dict]) -> list[dict]:  # as a run of the scoped counting
        return [{k: v for k, v in c.items() if k != "ledger"} for c in cells]

    def data(cost: float, cs: tuple[int, ...] = (1,), meta: bool = True) -> dict:
        # A run of the probes' current counting (named in its meta); without the meta,
        # a ledger per cell reads as the earlier whole-graph counting.
        return {**({"meta": {"probe_counting": COUNTING, "concurrency": list(cs)}}
                   if meta else {}),
                "cells": [{"concurrency": c, "blocks": [block("ab", cost), block("aa", 1.0)],
                           "ledger": {}} for c in cs]}

    every = TARGET_CONCURRENCY
    cheap, dear = alternate_rows(data(1.001, every)), alternate_rows(data(1.05, every))
    assert [r[3] for r in cheap] == ["yes", "yes"]
    assert all(r[3].startswith("**no**") and "c=1: above 1%" in r[4] for r in dear)
    # Cheap where measured, but the target's other concurrencies never run: no pass.
    alone = alternate_rows(data(1.001))
    assert all(r[3] == "not resolved (1 of 4 concurrencies met)" and
               "c=16, 64, 128: not measured in this run" in r[4] for r in alone), alone
    # A run of an earlier counting measured other code: no verdict from it.
    old = {"cells": unledgered(data(1.001, every)["cells"])}
    assert all(r[3].startswith("not resolved") and "scoped counting" in r[4]
               for r in alternate_rows(old))
    assert all(r[3].startswith("not resolved") and "measured whole-graph counting" in r[4]
               for r in alternate_rows(data(1.001, every, meta=False)))
    # A run cut short: a concurrency it asked for and never finished is no pass.
    cut = {**data(1.001), "meta": {"command": "python -m benchmarks.probe_alternate "
                                              "--concurrency 1,16 --steps 2000"}}
    rows = alternate_rows(cut)
    assert all(r[3] == "not resolved (1 of 4 concurrencies met)" for r in rows), rows
    assert all("c=16: not measured (asked for" in r[4] for r in rows)
    # The missing concurrency measured by a second run on another engine start: the
    # merged runs answer for both, each cell from the run that measured it.
    second = {"meta": {"command": "python -m benchmarks.probe_alternate --concurrency 16",
                       "date": "d2", "device": "cuda"}, "config": {"k": 3},
              "cells": [{**data(1.05)["cells"][0], "concurrency": 16}]}
    first = {**cut, "config": {"k": 3}}
    first["meta"] = {**cut["meta"], "date": "d1", "device": "cuda"}
    merged = pad.merge([first, second])
    assert [c["concurrency"] for c in merged["cells"]] == [1, 16]
    assert merged["meta"]["concurrency"] == [1, 16]
    assert [r["cells"] for r in merged["meta"]["runs"]] == [[1], [16]]
    rows = alternate_rows(merged)
    assert all(r[3].startswith("**no**") and "c=16: above 1%" in r[4]
               and "c=16: not measured" not in r[4] for r in rows), rows
    with pytest.raises(ValueError):
        pad.merge([first, {**second, "config": {"k": 4}}])
    # One configuration, but another card or another step count: not one measurement.
    for key, value in (("device_name", "NVIDIA H200"), ("steps", 4000)):
        with pytest.raises(ValueError, match=key):
            pad.merge([first, {**second, "meta": {**second["meta"], key: value}}])
    # Nor are runs of two probe countings (named in the meta, or read from the cells: a
    # ledger per cell came in with whole-graph counting).
    assert pad.counting(first) == "whole-graph"
    scoped = {**second, "cells": unledgered(second["cells"])}
    assert pad.counting(scoped) == "scoped"
    named = {**first, "meta": {**first["meta"], "probe_counting": "x"}}
    assert pad.counting(named) == "x"
    with pytest.raises(ValueError, match="counting"):
        pad.merge([first, scoped])
    # The command's --concurrency=1,16 form is read as the spaced one.
    eq = {**data(1.001), "meta": {"command": "python -m benchmarks.probe_alternate "
                                             "--concurrency=1,16"}}
    assert pad.requested(eq) == [1, 16]


def test_each_kind_alone_is_read_apart_from_the_whole():
    rng = random.Random(5)
    off = [2e6 * rng.uniform(0.9, 1.1) for _ in range(2000)]

    def block(mode: str, cost: float, groups: list[str] | None = None) -> dict:
        rec = {**_record([x * cost for x in off], off), "mode": mode}
        return {"mode": mode, "groups": groups, "ranks": [{"record": rec}]}

    cell = {"concurrency": 1, "blocks": [block("ab", 1.05), block("aa", 1.0),
                                         block("ab", 1.0, ["replay"]),
                                         block("ab", 1.04, ["propose"])]}
    whole = pad.cell_reading(cell)
    assert whole.ab.value == pytest.approx(5.0, abs=0.01)  # the grouped blocks left out
    kinds = pad.group_readings(cell)
    assert set(kinds) == {"replay", "propose"}
    assert kinds["replay"][0].value == pytest.approx(0.0, abs=0.01)
    assert kinds["propose"][0].value == pytest.approx(4.0, abs=0.01)
    assert kinds["propose"][1] == (2000, 2000)
    text = "\n".join(pad.where_lines({"cells": [cell]}))
    assert "| 1 | propose | +4.00" in text and "| 1 | replay | +0.00" in text


def test_the_frame_environment_is_reported_per_concurrency():
    """Each block's first-step timing of a Python call (``alternate.frame_environment``),
    median over the blocks, with the frame hooks named; a run without it has no table."""
    off = [2e6] * 10

    def block(call_ns: float, first_ns: float) -> dict:
        env = {"calls": 2000, "call_ns": call_ns, "call_through_wrapper_ns": 3 * call_ns,
               "first_call_through_wrapper_ns": first_ns, "trace": "None",
               "profile": "None", "eval_frame_callback": "None"}
        return {"mode": "ab", "ranks": [{"record": {**_record(off, off),
                                                    "frame_environment": env}}]}

    cell = {"concurrency": 4, "blocks": [block(30, 900), block(40, 1100), block(50, 5000)]}
    text = "\n".join(pad.frame_lines({"cells": [cell]}))
    assert "| 4 | 3 | 1100 | 40 | 120 | trace None, profile None, sys.monitoring none, " \
           "dynamo callback None |" in text, text
    bare = {"concurrency": 4, "blocks": [{"mode": "ab", "ranks": [{"record": _record(off, off)}]}]}
    assert pad.frame_lines({"cells": [bare]}) == []
    # A cell without it after one with it (runs merged across the change) still reads.
    both = "\n".join(pad.frame_lines({"cells": [cell, {**bare, "concurrency": 16}]}))
    assert "2000 calls" in both and "| 16 |" not in both
    failed = {**bare, "blocks": [{"mode": "ab", "ranks": [{"record": {
        **_record(off, off), "frame_environment": {"error": "RuntimeError: x"}}}]}]}
    assert pad.frame_lines({"cells": [failed]}) == [
        "", "The timing failed in some blocks: `RuntimeError: x`."]


def test_two_probe_paths_differ_only_where_every_run_lies_apart():
    from benchmarks import probe_alternate_compare as pac

    rng = random.Random(9)
    off = [2e6 * rng.uniform(0.9, 1.1) for _ in range(2000)]

    def run(path: str, cost: float) -> dict:
        # Each step its own +-3% of noise: one run's interval is about +-0.1%.
        blocks = [{"mode": m, "ranks": [{"record": {**_record(
            [x * c * rng.uniform(0.97, 1.03) for x in off], off), "mode": m}}]}
                  for m, c in (("ab", cost), ("aa", 1.0))]
        return {"meta": {"probe_counting": path, "device_name": "cpu", "vllm": "x",
                         "date": "d"}, "cells": [{"concurrency": 1, "blocks": blocks}]}

    apart = pac.readings([("1", run("old", 1.03)), ("2", run("new", 1.005)),
                          ("3", run("new", 1.004)), ("4", run("old", 1.031))])
    assert pac.difference(apart[1]).startswith("new cheaper")
    close = pac.readings([("1", run("old", 1.010)), ("2", run("new", 1.009))])
    assert pac.difference(close[1]).startswith("no difference resolved")
    # One run of the dearer path within reach of the cheaper one's: not resolved, though
    # the means lie apart.
    one_near = pac.readings([("1", run("old", 1.03)), ("2", run("new", 1.005)),
                             ("3", run("old", 1.006))])
    assert pac.difference(one_near[1]).startswith("no difference resolved")
    # Runs of another protocol are no comparison, whatever their numbers.
    other = run("new", 1.005)
    other["meta"]["steps"] = 4000
    assert "no comparison (the runs differ in steps" in "\n".join(
        pac.report([("1", run("old", 1.03)), ("2", other)]))
    # The same pair from two checkouts is one configuration; another pair is not.
    here, there = run("old", 1.03), run("new", 1.005)
    here["config"] = {"model": "/a/models/p/target", "spec": {"model": "/a/models/p/eagle3"}}
    there["config"] = {"model": "/b/models/p/target", "spec": {"model": "/b/models/p/eagle3"}}
    assert pac.mismatch([("1", here), ("2", there)]) is None
    there["config"]["model"] = "/b/models/q/target"
    assert pac.mismatch([("1", here), ("2", there)]) == "the runs' engine configurations differ"
    one = pac.readings([("1", run("old", 1.01))])
    assert pac.difference(one[1]).startswith("no comparison")
    assert "| 1 | new | 2 |" in "\n".join(pac.report([("1", run("old", 1.03)),
                                                      ("2", run("new", 1.005))]))


def test_a_repeat_run_must_meet_target_2_too_and_an_earlier_path_says_what_else_differs():
    from benchmarks.benchmarks_report import (
        TARGET_CONCURRENCY,
        alternate_rows,
        earlier_vs_lead,
        repeat_spread,
    )
    from engine_ext.probes.ledger import COUNTING

    rng = random.Random(5)
    off = [2e6 * rng.uniform(0.9, 1.1) for _ in range(2000)]

    def run(cost: float, date: str, scale: float = 1.0, cs=TARGET_CONCURRENCY,
            aa: float = 1.0, config: dict | None = None, **meta: object) -> dict:
        def block(mode: str, c: float) -> dict:
            steps = [x * scale for x in off]
            return {"mode": mode, "ranks": [{"record": {
                **_record([x * c for x in steps], steps), "mode": mode}}]}

        return {"meta": {"probe_counting": COUNTING, "concurrency": list(cs),
                         "date": date, "device": "cuda", "output_len": 1536, **meta},
                "config": config or {"k": 3},
                "cells": [{"concurrency": c, "blocks": [block("ab", cost), block("aa", aa)],
                           "ledger": {}} for c in cs]}

    lead = run(1.001, "d1")
    both = alternate_rows(lead, [run(1.002, "d2")])
    assert [r[3] for r in both] == ["yes", "yes"]
    assert all("in each of 2 runs" in r[1] and "c=1: +0.10" in r[2] and ", repeat 1 +0.20"
               in r[2] for r in both), both
    # The lead run meets the target, its repeat does not: no pass, and the cause names
    # the repeat.
    dear = alternate_rows(lead, [run(1.05, "d2")])
    assert all(r[3] == "**no** (0 of 4 concurrencies met)" and "repeat 1 (d2): c=1: above 1%"
               in r[4] for r in dear), dear
    assert [r[3] for r in alternate_rows(lead)] == ["yes", "yes"]
    # A repeat that never asked for some of the target's concurrencies: no pass, and why.
    short = alternate_rows(lead, [run(1.002, "d2", cs=(1, 16))])
    assert all(r[3] == "not resolved (2 of 4 concurrencies met)" and
               "repeat 1 (d2): c=64, 128: not measured in this run" in r[4] for r in short)
    assert all("c=64: +0.10" in r[2] and "repeat 1 not measured" in r[2] for r in short)
    # A concurrency only the repeat measured, above 1% there: no pass either.
    extra = alternate_rows(lead, [run(1.002, "d2"), run(1.05, "d3", cs=(32,))])
    assert all(r[3].startswith("**no**") and "repeat 2 (d3): c=32: above 1%" in r[4]
               and "c=32: not measured in this run" in r[4] for r in extra), extra
    # A biased control is named with its run.
    biased = alternate_rows(lead, [run(1.002, "d2", aa=1.05)])
    assert all(r[3].startswith("not resolved") and "repeat 1 (d2): the control (aa) does "
               "not read zero at c=1, 16, 64, 128" in r[4] for r in biased), biased
    # A repeat is the same measurement on another engine start: another protocol or
    # configuration is refused, and so is the lead run given again as its own repeat.
    with pytest.raises(ValueError, match="output_len"):
        alternate_rows(lead, [run(1.001, "d2", output_len=128)])
    with pytest.raises(ValueError, match="engine configurations"):
        alternate_rows(lead, [run(1.001, "d2", config={"k": 4})])
    with pytest.raises(ValueError, match="given twice"):
        alternate_rows(lead, [lead])
    # Run to run: named where two starts lie further apart than either run's interval.
    assert "lie no further apart than the wider" in repeat_spread(lead, run(1.001, "d2"))
    assert "Further apart than either run's own 95% interval half-width: c=1 (" in \
        repeat_spread(lead, run(1.03, "d2"))
    # An earlier path's runs: their steps beside the lead's, and the protocol they differ in;
    # nothing when neither differs.
    text = earlier_vs_lead(run(1.03, "d0", scale=2.0, output_len=128), lead)
    assert text.startswith(". Here a step without the probes (median) lasted 3.989 ms at "
                           "c=1 against the lead run's 1.994"), text
    assert "output_len (128 vs 1536)" in text
    assert earlier_vs_lead(run(1.03, "d0"), lead) == ""
    assert earlier_vs_lead(lead, None) == ""
