"""Markdown for a profiled run set (``serve_compare --py-spy``): each server's sampled CPU
per engine step, engine core and front end apart, and the functions whose time per step
differs most between two servers at the same load (``profile_data.Profiles``)."""

from __future__ import annotations

from benchmarks.profile_data import OURS, Profiles, StepProfile
from benchmarks.report import Spread, md_table

# A function on (nearly) every sampled stack of both servers is a root (the process's
# main, the busy loop), not a place where one spends more than the other.
ROOT_SHARE = 0.9


def per_step(pr: Profiles, v: str, c: int, kind: str, pick) -> Spread | None:
    vals = pr.per_step(v, c, kind, pick)
    return Spread.of(vals) if vals else None


def overview_rows(pr: Profiles, variants: list[str], c: int) -> list[list[object]]:
    rows = []
    for v in variants:
        runs = pr.cells.get((v, c), [])
        if not runs:
            continue
        eng = per_step(pr, v, c, "engine", lambda sp: sp.samples)
        front = per_step(pr, v, c, "front", lambda sp: sp.samples)
        ours = per_step(pr, v, c, "engine", lambda sp: sp.ours)
        steps = Spread.of([next(iter(p.values())).steps for _, p in runs])
        share = [s for _, p in runs if "engine" in p and (s := p["engine"].ours_share) is not None]
        rows.append([c, v, len(runs), f"{steps.median:.0f}",
                     eng.text("{:.3f}") if eng else None,
                     front.text("{:.3f}") if front else None,
                     ours.text("{:.4f}") if ours else None,
                     Spread.of(share).text("{:.2f}") if share else None])
    return rows


def _roots(pr: Profiles, v: str, c: int, kind: str) -> set[str]:
    out: set[str] | None = None
    for _, p in pr.cells.get((v, c), []):
        sp: StepProfile | None = p.get(kind)
        if sp is None or not sp.samples:
            continue
        here = {fn for fn, n in sp.inclusive.items() if n >= ROOT_SHARE * sp.samples}
        out = here if out is None else out & here
    return out or set()


def difference_rows(pr: Profiles, a: str, b: str, c: int, kind: str, table: str,
                    top: int) -> list[list[object]]:
    skip = _roots(pr, a, c, kind) & _roots(pr, b, c, kind) if table == "inclusive" else set()
    rows = []
    for fn, ma, mb in pr.differences(a, b, c, kind, table, 4 * top + len(skip)):
        # A probe wrapper's subtree is the function it wraps: only its self time is its own.
        if fn in skip or (table == "inclusive" and OURS in fn):
            continue
        rows.append([f"`{fn}`", f"{ma:.3f}", f"{mb:.3f}", f"{ma - mb:+.3f}"])
    return rows[:top]


def profile_lines(pr: Profiles, variants: list[str], pairs: list[tuple[str, str]],
                  concurrency: list[int], top: int = 8) -> list[str]:
    rs = pr.runs
    lines = [f"py-spy sampled every process of each server over each run of `{rs.label}` "
             f"({pr.rate} Hz, `--nonblocking`, idle threads not sampled; "
             "`benchmarks/py_spy.py`), set against the engine's own count of steps in the "
             "same run: milliseconds of sampled CPU per engine step, median (min-max) over "
             "the repetitions. Engine core: vLLM's `VLLM::EngineCore` / `VLLM::Worker` "
             "processes (the model runs there, and specgw's probes); front end: every other "
             "process of the server. `engine_ext` self: samples whose innermost Python frame "
             "is specgw's engine extension (the probes' own work, an upper bound: \
`profile_data.is_ours`), also in % of the step's length on the engine core's clock \
(vLLM's inter-token latency), per run.", ""]
    for c in concurrency:
        rows = overview_rows(pr, variants, c)
        if rows:
            lines += [*md_table(["concurrency", "server", "runs", "engine steps",
                                 "engine core ms/step", "front end ms/step",
                                 "`engine_ext` self ms/step", "`engine_ext` % of the step"],
                                rows), ""]
    for a, b in pairs:
        for c in concurrency:
            if not (pr.cells.get((a, c)) and pr.cells.get((b, c))):
                continue
            for table, what in (("inclusive", "with everything it calls"),
                                ("self_", "its own Python lines")):
                rows = difference_rows(pr, a, b, c, "engine", table, top)
                if rows:
                    lines += [f"Engine core, c={c}: the functions whose time per step "
                              f"({what}) differs most, `{a}` against `{b}` (medians over "
                              "the runs):", "",
                              *md_table(["function", f"{a} ms/step", f"{b} ms/step",
                                         "difference"], rows), ""]
    return lines
