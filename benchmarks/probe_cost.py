"""What the worker probes' bookkeeping costs per forward, timed alone: the ``Ledger`` calls
the installed wrappers make on the hot path (a forward scope with a graph replay in it, a
drafter ``propose`` of several forwards, a PIECEWISE piece), against the same loop
without them. Pure Python, no vLLM and no GPU: it times exactly the work the probes add to
a forward, which end-to-end runs on the device cannot resolve below their noise.

It also times the whole probe path of one engine step (``probe_path.py``): the real wrapper
factories of ``install.py`` applied to stand-ins of the vLLM functions, composed as one
runner V2 FULL step and one runner V1 PIECEWISE step at k=3, each against the same
stand-ins unwrapped; the cost is the probed step minus the bare step of the same
repetition (``--step-n`` steps per case).

``python -m benchmarks.probe_cost --baseline REV --out docs/probe_cost.json``: ``--reps``
repetitions of ``--n`` iterations per case and ledger, the order rotated per repetition;
microseconds per call, median and min-max over the repetitions. ``--baseline`` also times
the ledger as it was at git revision REV, in the same run. ``benchmarks_report.py`` turns
it into a bound per engine step with the forwards per step the device runs counted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

from benchmarks.probe_path import STEPS
from engine_ext.probes import ledger as current
from engine_ext.probes.ledger import ROLE_DRAFT, ROLE_TARGET, Ledger

LEDGER_PATH = "engine_ext/probes/ledger.py"


def noop() -> None:
    return None


def case_scope(ledger: Ledger, n: int) -> None:
    """One target forward: a scope, one graph replay reported into it."""
    for _ in range(n):
        with ledger.forward(ROLE_TARGET, "full"):
            ledger.on_replay()
            noop()


def case_piece(ledger: Ledger, n: int) -> None:
    """One split-graph piece run through the ledger inside an open scope."""
    with ledger.forward(ROLE_TARGET, "piecewise"):
        for _ in range(n):
            ledger.piece(noop)


def case_propose(ledger: Ledger, n: int) -> None:
    """One drafter propose: a first pass and a fused FULL step covering k-1 = 2 steps."""
    for _ in range(n):
        with ledger.propose():
            with ledger.forward(ROLE_DRAFT, "full"):
                ledger.on_replay()
                noop()
            with ledger.covering(2), ledger.forward(ROLE_DRAFT, "full",
                                                    weight=ledger.fused_steps or 1):
                ledger.on_replay()
                noop()


def case_bare(_: Ledger, n: int) -> None:
    """The loop and the call the probed cases wrap, without the ledger."""
    for _ in range(n):
        noop()


CASES: dict[str, Callable[[Ledger, int], None]] = {
    "bare": case_bare, "forward_scope": case_scope, "piece": case_piece,
    "propose_2_forwards": case_propose}


def ledger_at(rev: str) -> types.ModuleType:
    """The ledger module as committed at ``rev`` (pure Python, so it loads alone)."""
    src = subprocess.run(["git", "show", f"{rev}:{LEDGER_PATH}"], check=True,
                         capture_output=True, text=True).stdout
    mod = types.ModuleType(f"ledger_{rev}")
    sys.modules[mod.__name__] = mod  # dataclasses resolve annotations through it
    exec(compile(src, f"{rev}:{LEDGER_PATH}", "exec"), mod.__dict__)
    return mod


def time_step(name: str, probed: bool, n: int) -> float:
    """Microseconds per engine step of ``STEPS[name]``, probed or bare, fresh stand-ins
    and a fresh ledger (built outside the timed loop)."""
    step = STEPS[name](Ledger(), probed)
    t = time.perf_counter()
    for _ in range(n):
        step()
    return 1e6 * (time.perf_counter() - t) / n


def measure(impls: dict[str, types.ModuleType], n: int, reps: int,
            step_n: int) -> tuple[dict[str, dict], dict[str, dict]]:
    """Ledger cases per implementation and whole-path steps (current code only), all in
    one order rotated per repetition."""
    us: dict[str, dict[str, list[float]]] = {i: {k: [] for k in CASES} for i in impls}
    steps: dict[str, dict[str, list[float]]] = {
        s: {"bare": [], "probed": []} for s in STEPS}
    runs = [(i, k) for i in impls for k in CASES] + [
        ("step", f"{s}:{v}") for s in STEPS for v in ("bare", "probed")]
    for rep in range(reps):
        for impl, name in runs[rep % len(runs):] + runs[:rep % len(runs)]:  # rotated
            if impl == "step":
                s, v = name.split(":")
                steps[s][v].append(time_step(s, v == "probed", step_n))
                continue
            ledger = impls[impl].Ledger()
            t = time.perf_counter()
            CASES[name](ledger, n)
            us[impl][name].append(1e6 * (time.perf_counter() - t) / n)
        print(f"rep {rep + 1}/{reps}: " + "; ".join(
            f"{i}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in c.items())
            for i, c in us.items()) + "; steps: " + ", ".join(
            f"{s} {v['probed'][-1] - v['bare'][-1]:.2f}" for s, v in steps.items())
            + " (us)", flush=True)
    return us, steps


def step_costs(steps: dict[str, dict[str, list[float]]]) -> dict[str, dict]:
    """Per step kind: probed minus bare, paired by repetition; median and min-max."""
    out = {}
    for s, v in steps.items():
        d = [p - b for p, b in zip(v["probed"], v["bare"], strict=True)]
        out[s] = {"per_rep": d, "median": statistics.median(d), "min": min(d), "max": max(d),
                  "bare_median": statistics.median(v["bare"]),
                  "probed_median": statistics.median(v["probed"])}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("docs/probe_cost.json"))
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--step-n", type=int, default=50_000,
                    help="engine steps per whole-path case and repetition")
    ap.add_argument("--baseline", metavar="REV", help="also time the ledger at this revision")
    a = ap.parse_args()
    impls = {"current": current, **({f"at {a.baseline}": ledger_at(a.baseline)}
                                    if a.baseline else {})}
    us, steps = measure(impls, a.n, a.reps, a.step_n)
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "machine": {"python": sys.version.split()[0], "cpu": platform.processor() or
                       platform.machine(), "cpu_count": os.cpu_count()},
           "head": rev, "baseline": a.baseline, "n": a.n, "reps": a.reps,
           "us_per_call": us,
           "median_us": {i: {k: statistics.median(v) for k, v in c.items()}
                         for i, c in us.items()},
           "step_n": a.step_n, "step_us": steps, "step_cost_us": step_costs(steps)}
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["median_us"]))
    print(json.dumps({s: {k: v[k] for k in ("median", "min", "max")}
                      for s, v in out["step_cost_us"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
