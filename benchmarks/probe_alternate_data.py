"""Reads ``probe_alternate.py``'s raw records: pairs of neighbouring engine steps, the
probes' overhead per step with bootstrap intervals, the price of a probe read, and target
2's verdict per concurrency and poll interval. Also writes that run's own report; the
issue's page (``benchmarks_report.py``) takes its rows from :func:`verdicts`."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks.report import md_table, num

THRESHOLD_PCT = 1.0  # issue #14, target 2
POLL_INTERVALS_S = (5.0, 1.0)  # the default and the shortest accepted
NEIGHBOURS = 20  # steps each side a probe read's step is compared with
BOOTSTRAP = 1000


@dataclass(frozen=True)
class Estimate:
    """An overhead in % with its bootstrap 95% interval."""

    value: float
    lo: float
    hi: float

    def text(self, fmt: str = "{:+.2f}") -> str:
        return f"{fmt.format(self.value)} ({fmt.format(self.lo)} to {fmt.format(self.hi)})"


def intervals(rec: dict) -> list[int]:
    """Each step's duration in ns: its start to the next step's start."""
    t = rec["t_ns"]
    return [t[i + 1] - t[i] for i in range(len(t) - 1)]


def rpc_steps(rec: dict, kind: str | None = None) -> dict[int, str]:
    """The steps one of our RPCs fell into (``kind`` None: any kind), step -> kind."""
    t = rec["t_ns"]
    out: dict[int, str] = {}
    for k, t0, _t1 in rec["rpc_spans"]:
        if kind is not None and k != kind:
            continue
        i = int(np.searchsorted(t, t0, side="right")) - 1
        if 0 <= i < len(t) - 1:
            out[i] = k
    return out


def step_pairs(rec: dict) -> tuple[list[tuple[int, int]], int]:
    """(in_ns, out_ns) of every pair of neighbouring steps that did the same work (the same
    scheduled tokens and requests, neither empty) with no RPC of ours in either; and how
    many pairs there were. In an ``aa`` record 'in' and 'out' are the schedule's labels
    (the probes were in on both)."""
    d, hit = intervals(rec), rpc_steps(rec)
    tokens, reqs, state = rec["tokens"], rec["reqs"], rec["state"]
    pairs, total = [], 0
    for a in range(0, len(d) - 1, 2):
        b = a + 1
        total += 1
        if a in hit or b in hit or not tokens[a]:
            continue
        if tokens[a] != tokens[b] or reqs[a] != reqs[b]:
            continue
        on, off = (a, b) if state[a] == 1 else (b, a)
        pairs.append((d[on], d[off]))
    return pairs, total


def overhead(pairs: list[tuple[int, int]], seed: int = 0) -> tuple[Estimate, Estimate]:
    """(sum of 'in' over sum of 'out' - 1, median of the paired ratios - 1), in %, each with
    a bootstrap 95% interval over the pairs."""
    a = np.asarray(pairs, dtype=float)
    on, off = a[:, 0], a[:, 1]
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), size=(BOOTSTRAP, len(a)))
    sums = 100 * (on[idx].sum(axis=1) / off[idx].sum(axis=1) - 1)
    ratios = on / off - 1
    meds = 100 * np.median(ratios[idx], axis=1)

    def est(value: float, boot: np.ndarray) -> Estimate:
        lo, hi = np.percentile(boot, [2.5, 97.5])
        return Estimate(float(value), float(lo), float(hi))

    return (est(100 * (on.sum() / off.sum() - 1), sums),
            est(100 * float(np.median(ratios)), meds))


def read_costs(rec: dict) -> list[float]:
    """What each probe read (the poller's ``specgw_probe_snapshot``) cost the engine's
    loop, in ns: the step it fell into less the median of its neighbours that did the
    same work with no RPC in them."""
    d, hit = intervals(rec), rpc_steps(rec)
    tokens = rec["tokens"]
    out = []
    for i in rpc_steps(rec, "snapshot"):
        near = [d[j] for j in range(max(0, i - NEIGHBOURS), min(len(d), i + NEIGHBOURS + 1))
                if j != i and j not in hit and tokens[j] == tokens[i]]
        if near:
            out.append(d[i] - statistics.median(near))
    return out


@dataclass(frozen=True)
class Cell:
    """One concurrency's reading."""

    concurrency: int
    ab: Estimate  # sum-based, what throughput sees
    ab_median: Estimate
    aa: Estimate
    aa_median: Estimate
    pairs: dict[str, tuple[int, int]]  # mode -> (counted, all)
    step_ms: float  # median 'out' step of the ab pairs
    read_ms: float | None  # mean cost of one probe read
    reads: int

    def poll_pct(self, interval_s: float) -> float:
        return 0.0 if self.read_ms is None else 100 * self.read_ms / 1000 / interval_s

    @property
    def control_ok(self) -> bool:
        return self.aa.lo <= 0 <= self.aa.hi

    def verdict(self, interval_s: float) -> tuple[str, Estimate]:
        """'yes' / 'no' / 'not resolved' against 1%, and the total: the step overhead
        plus the poll's share of the loop at that interval."""
        p = self.poll_pct(interval_s)
        total = Estimate(self.ab.value + p, self.ab.lo + p, self.ab.hi + p)
        if total.hi <= THRESHOLD_PCT:
            return "yes", total
        if total.lo > THRESHOLD_PCT:
            return "no", total
        return "not resolved", total


def records(cell: dict, mode: str, group: str | None = None) -> list[dict]:
    """The records of ``mode``'s blocks that switched every probe (``group`` None) or
    ``group``'s wrappers alone."""
    want = None if group is None else [group]
    return [rank["record"] for blk in cell["blocks"]
            if blk["mode"] == mode and blk.get("groups") == want for rank in blk["ranks"]]


def pooled_pairs(recs: list[dict]) -> tuple[list[tuple[int, int]], int]:
    """:func:`step_pairs` of several records together: (counted pairs, all pairs)."""
    pairs, total = [], 0
    for rec in recs:
        p, n = step_pairs(rec)
        pairs += p
        total += n
    return pairs, total


def group_readings(cell: dict) -> dict[str, tuple[Estimate, tuple[int, int]]]:
    """Each kind of wrapper priced alone (``probe_alternate --groups``): its step
    overhead (sum-based) and (pairs counted, pairs)."""
    groups = sorted({g for blk in cell["blocks"] for g in blk.get("groups") or []})
    out = {}
    for g in groups:
        pairs, total = pooled_pairs(records(cell, "ab", g))
        if pairs:
            out[g] = (overhead(pairs, seed=cell["concurrency"])[0], (len(pairs), total))
    return out


ITERATIONS = "vllm:iteration_tokens_total_count"  # one observation per engine step


def profile_stem(window: str, c: int) -> str:
    """``probe_alternate --py-spy``'s profile names (as ``profile_data`` reads them)."""
    return f"probes-{window}_c{c}_r0"


def profile_reading(src, cell: dict, top: int = 8) -> dict | None:
    """What the engine's processes ran with the probes in vs out (``--py-spy``): per
    window the engine's samples per step and specgw's own share (``profile_data.is_ours``),
    and the functions whose self time per step grew most with the probes in."""
    from benchmarks.profile_data import load_run

    prof = cell.get("profiles")
    if not prof:
        return None
    win = {}
    for w in ("in", "out"):
        p = prof[w]
        if not p["iterations"]:  # no engine step in the window: nothing per step
            return None
        loaded = load_run(src, p["stem"], p["iterations"], None, p["rate"])
        if "engine" not in loaded:
            return None
        win[w] = loaded["engine"]
        win[w].step_ms = 1000 * p["wall_s"] / p["iterations"]
    names = set(win["in"].self_) | set(win["out"].self_)
    grew = sorted(((fn, win["in"].ms_per_step(win["in"].self_.get(fn, 0)),
                    win["out"].ms_per_step(win["out"].self_.get(fn, 0))) for fn in names),
                  key=lambda r: (r[2] - r[1], r[0]))[:top]
    return {"windows": {w: {"step_ms": sp.step_ms, "sampled_ms": sp.total_ms,
                            "ours_ms": sp.ms_per_step(sp.ours), "ours_pct": sp.ours_share}
                        for w, sp in win.items()},
            "grew": grew}


def cell_reading(cell: dict) -> Cell:
    found: dict[str, tuple] = {}
    counts: dict[str, tuple[int, int]] = {}
    for mode in ("ab", "aa"):
        pairs, total = pooled_pairs(records(cell, mode))
        counts[mode] = (len(pairs), total)
        found[mode] = (overhead(pairs, seed=cell["concurrency"]), pairs)
    costs = [c for mode in ("ab", "aa") for rec in records(cell, mode) for c in read_costs(rec)]
    (ab, ab_med), ab_pairs = found["ab"]
    (aa, aa_med), _ = found["aa"]
    return Cell(cell["concurrency"], ab, ab_med, aa, aa_med, counts,
                statistics.median(off for _, off in ab_pairs) / 1e6,
                statistics.fmean(costs) / 1e6 if costs else None, len(costs))


def verdicts(data: dict) -> list[Cell]:
    return [cell_reading(c) for c in data["cells"]]


DEFAULT_CONCURRENCY = (1, 16, 64, 128)  # probe_alternate.py's --concurrency default


def requested(data: dict) -> list[int]:
    """The concurrencies the run was asked for (meta, else its command line): a run cut
    short by its time limit has fewer cells, and the missing ones are no verdict."""
    m = data.get("meta")
    if m is None:  # a record without its run's meta: what it holds is all it says
        return [c["concurrency"] for c in data["cells"]]
    if "concurrency" in m:
        return list(m["concurrency"])
    words = m.get("command", "").split()
    for i, w in enumerate(words):  # --concurrency 1,16 or --concurrency=1,16
        if w == "--concurrency" and i + 1 < len(words):
            return [int(x) for x in words[i + 1].split(",")]
        if w.startswith("--concurrency="):
            return [int(x) for x in w.split("=", 1)[1].split(",")]
    return list(DEFAULT_CONCURRENCY)


SAME_PROTOCOL = ("device_name", "vllm", "torch", "steps", "poll_s", "warmup_s",
                 "prompt_words", "output_len", "load_client")


def protocol_difference(runs: Sequence[dict]) -> str | None:
    """The first ``SAME_PROTOCOL`` key the runs' metas differ in, None if none."""
    return next((key for key in SAME_PROTOCOL
                 if any(r["meta"].get(key) != runs[0]["meta"].get(key) for r in runs[1:])),
                None)


def counting(data: dict) -> str:
    """The ledger's counting design the run measured (engine_ext.probes.ledger.COUNTING).
    Runs before the meta had it: each cell's ledger snapshot came in with whole-graph
    counting (4a00e34 and af788f2, 2026-12-07), so a run whose cells all carry one measured
    it, any other the scoped design."""
    if "probe_counting" in data.get("meta", {}):
        return data["meta"]["probe_counting"]
    cells = data.get("cells", [])
    return "whole-graph" if cells and all("ledger" in c for c in cells) else "scoped"


COUNTING_TEXT = {"whole-graph-inline": "whole-graph counting, inline (runner V2's FULL "
                                       "replays counted in the replay wrapper's own frame, "
                                       "no object per propose; the probes as they are now)",
                 "whole-graph": "whole-graph counting (runner V2's FULL replays counted "
                                "with no forward scope, through three calls per replay; "
                                "the probes from 4a00e34 to 82c7572)",
                 "scoped": "scoped counting (a forward scope around each of runner V2's "
                           "FULL graph runs; the probes before 4a00e34)"}


def check_same_measurement(runs: Sequence[dict]) -> None:
    """Raise ValueError unless the runs are one measurement on separate engine starts: one
    engine configuration, one protocol (what a cell's numbers also depend on), one probe
    counting."""
    if any(r["config"] != runs[0]["config"] for r in runs[1:]):
        raise ValueError("probe_alternate runs with different engine configurations")
    if (key := protocol_difference(runs)) is not None:
        raise ValueError(f"probe_alternate runs with different {key}: "
                         f"{[r['meta'].get(key) for r in runs]}")
    if len({counting(r) for r in runs}) > 1:
        raise ValueError("probe_alternate runs of different probe counting: "
                         f"{[counting(r) for r in runs]}")


def merge(runs: list[dict]) -> dict:
    """Several runs as one: each concurrency's cell from the last run that has it. A cell
    is measured inside one engine (its pairs are neighbouring steps), so cells of runs on
    separate engine starts stand side by side; the runs must share one engine
    configuration, and ``meta['runs']`` says which run gave which cells."""
    if len(runs) == 1:
        return runs[0]
    check_same_measurement(runs)
    cells: dict[int, dict] = {}
    asked: list[int] = []
    for r in runs:
        cells |= {c["concurrency"]: c for c in r["cells"]}
        asked += [c for c in requested(r) if c not in asked]
    meta = dict(runs[0]["meta"])
    meta |= {"command": " and ".join(f"`{r['meta']['command']}`" for r in runs),
             "date": " and ".join(r["meta"]["date"] for r in runs),
             "concurrency": sorted(asked),
             "runs": [{"date": r["meta"]["date"],
                       "device_name": r["meta"].get("device_name", r["meta"]["device"]),
                       "cells": sorted(c for c, cell in cells.items()
                                       if any(cell is x for x in r["cells"]))}
                      for r in runs]}
    return {"meta": meta, "config": runs[0]["config"],
            "cells": [cells[c] for c in sorted(cells)]}


def missing_text(data: dict) -> str | None:
    done = {c["concurrency"] for c in data["cells"]}
    missing = [c for c in requested(data) if c not in done]
    return ("c=" + ", ".join(map(str, missing)) + ": not measured (asked for, but the run "
            "ended before their cells were complete)") if missing else None


def report(data: dict) -> list[str]:
    return ["# Probe cost step by step inside one engine (#14, target 2)", "",
            *report_body(data)]


def report_body(data: dict) -> list[str]:
    """The report below its title (the issue's page sets it under a heading of its own)."""
    m = data["meta"]
    cells = verdicts(data)
    command = m["command"] if "runs" in m else f"`{m['command']}`"
    lines = [
        f"{command}, {m['date']}, {m.get('device_name', m['device'])}, vLLM "
        f"{m['vllm']}, torch {m['torch']}; the probes with "
        f"{COUNTING_TEXT.get(counting(data), counting(data) + ' counting')}. "
        f"One `specgw serve`{' per run' if 'runs' in m else ''} "
        f"(serve_compare's engine configuration); per concurrency {m['blocks']} "
        f"alternations of {m['steps']} engine steps, `ab` and `aa`"
        f"{' and one `ab` per kind of wrapper' if m.get('groups') else ''} in turn, under "
        f"closed-loop greedy load of {m['output_len']} "
        f"tokens per request; the probe poller read the ledgers every {m['poll_s']:g} s. "
        "Protocol and analysis: `benchmarks/probe_alternate.py`, "
        "`benchmarks/probe_alternate_data.py`; raw records: `probe_alternate.json`"
        + ("" if "runs" not in m else " of each run. Runs on separate engine starts, one "
           "engine configuration: " + "; ".join(
               f"{r['date']} ({r['device_name']}): c={', '.join(map(str, r['cells']))}"
               for r in m["runs"])) + ".", "",
        "Overhead = sum of the steps with the probes in / sum of their neighbours with the "
        "probes out - 1, over pairs of neighbouring steps that did the same work "
        "(bootstrap 95% interval over pairs); `aa` is the control, the probes in on both "
        "sides of every pair (it must read zero within its interval).", "",
        *md_table(["concurrency", "step ms (out, median)", "ab pairs counted",
                   "ab overhead % (sum)", "ab overhead % (median of pairs)",
                   "aa pairs counted", "aa 'overhead' % (sum)", "control reads zero?",
                   "probe reads priced", "one read costs ms (mean)"],
                  [[c.concurrency, num(c.step_ms, "{:.3f}"),
                    f"{c.pairs['ab'][0]} of {c.pairs['ab'][1]}", c.ab.text(),
                    c.ab_median.text(), f"{c.pairs['aa'][0]} of {c.pairs['aa'][1]}",
                    c.aa.text(), "yes" if c.control_ok else "**no**", c.reads,
                    num(c.read_ms, "{:.3f}")] for c in cells]), "",
        "Target 2: probe overhead <= 1% at every concurrency, with the poll's share of the "
        "engine loop (one read's mean cost / interval) added to the step overhead and to "
        "both ends of its interval:", "",
        *md_table(["concurrency", *(f"poll every {p:g} s: overhead % (95% interval)"
                                    for p in POLL_INTERVALS_S),
                   *(f"<= 1% (poll {p:g} s)?" for p in POLL_INTERVALS_S)],
                  [[c.concurrency, *(c.verdict(p)[1].text() for p in POLL_INTERVALS_S),
                    *(c.verdict(p)[0] for p in POLL_INTERVALS_S)] for c in cells]),
    ]
    if (gap := missing_text(data)) is not None:
        lines += ["", f"Concurrencies {gap}."]
    return lines + where_lines(data)


def block_frame_envs(cell: dict) -> list[dict]:
    """Each block's ``alternate.frame_environment`` record (rank 0), timed or failed; runs
    before it had none."""
    return [env for b in cell["blocks"]
            if (env := b["ranks"][0]["record"].get("frame_environment"))]


def frame_environments(cell: dict) -> list[dict]:
    """The blocks' timings that ran (a failed one holds only its error)."""
    return [env for env in block_frame_envs(cell) if "error" not in env]


def frame_lines(data: dict) -> list[str]:
    """What a Python call costs on the model's thread inside the engine, and which frame
    hooks run there: the scale the probes' few frames per step are paid at."""
    rows, calls = [], set()
    for c in data["cells"]:
        envs = frame_environments(c)
        calls |= {e["calls"] for e in envs}
        if not envs:
            continue
        hooks = sorted({f"trace {e['trace']}, profile {e['profile']}, sys.monitoring "
                        f"{e.get('monitoring_tools') or 'none'}, dynamo callback "
                        f"{e['eval_frame_callback']}" for e in envs})
        rows.append([c["concurrency"], len(envs), *(
            num(statistics.median(e[k] for e in envs), "{:.0f}")
            for k in ("first_call_through_wrapper_ns", "call_ns", "call_through_wrapper_ns")),
            "; ".join(hooks)])
    failed = sorted({env["error"] for c in data["cells"] for env in block_frame_envs(c)
                     if "error" in env})
    tail = [] if not failed else ["", "The timing failed in some blocks: " + "; ".join(
        f"`{e}`" for e in failed) + "."]
    if not rows:
        return tail
    return ["", "A Python call on the model's thread, timed in the first step of each "
            "block (`alternate.frame_environment`; that step is left out of the pairs): "
            "one call of a no-op through a `*args, **kwargs` wrapper first, as the step "
            f"finds it, then {' or '.join(map(str, sorted(calls)))} calls of the no-op and "
            "as many through the "
            "wrapper, per call; median over the blocks, and the hooks every frame there "
            "runs:", "",
            *md_table(["concurrency", "blocks", "first call through the wrapper ns",
                       "call ns", "call through the wrapper ns", "frame hooks"], rows), *tail]


def where_lines(data: dict) -> list[str]:
    """Where the cost comes from: each kind of wrapper priced alone, and the py-spy
    windows (present only in runs that asked for them)."""
    lines: list[str] = []
    rows = [[c["concurrency"], g, est.text(), f"{n} of {total}"]
            for c in data["cells"] for g, (est, (n, total)) in group_readings(c).items()]
    if rows:
        lines += ["", "Each kind of wrapper alone (`--groups`: on the 'in' steps only that "
                  "kind is in, every other probe out through the block; "
                  "`engine_ext.internals.install.GROUPS`), step overhead % with its "
                  "bootstrap 95% interval, as above:", "",
                  *md_table(["concurrency", "kind", "overhead % (sum)", "pairs counted"],
                            rows)]
    lines += frame_lines(data)
    for c in data["cells"]:
        for snap in c.get("ledger") or []:
            fw = {(r[0], r[1], r[2], r[3]): r[4] for r in snap["forwards"]}
            lines += ["", f"The probes' ledger at the end of c={c['concurrency']} (rank "
                      f"{snap.get('rank', 0)}, runner {snap.get('runner')}; since the engine "
                      "started, every step the probes were in on, less the grouped blocks', "
                      "which count apart): " + ", ".join(
                          f"{' '.join(k)} {v}" for k, v in sorted(fw.items())) +
                      f"; proposes {snap['proposes']}, of them without a counted forward "
                      f"{snap['proposes_without_forward']}; replays no forward claimed "
                      f"{snap['unattributed_replays']}."]
        pr = c.get("profile_reading")
        if not pr:
            continue
        w = pr["windows"]
        lines += ["", f"py-spy at c={c['concurrency']} ({c['profiles']['in']['rate']} "
                  f"samples/s, {c['profiles']['in']['wall_s']:g} s with the probes in, then "
                  "as long out; the engine's processes; `profiles/`): specgw's own time "
                  "(`profile_data.is_ours`) and all sampled time per engine step:", "",
                  *md_table(["probes", "step ms (wall / steps)", "sampled ms per step",
                             "specgw's own ms per step", "specgw's own % of the step"],
                            [[k, num(v["step_ms"], "{:.3f}"), num(v["sampled_ms"], "{:.3f}"),
                              num(v["ours_ms"], "{:.4f}"), num(v["ours_pct"], "{:.2f}")]
                             for k, v in w.items()]),
                  "", "Self time per step that grew most with the probes in:", "",
                  *md_table(["function", "in, ms per step", "out, ms per step"],
                            [[f"`{fn}`", num(a_, "{:.4f}"), num(b_, "{:.4f}")]
                             for fn, a_, b_ in pr["grew"]])]
    return lines
