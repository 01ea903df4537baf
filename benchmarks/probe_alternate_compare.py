"""Two probe paths side by side: ``probe_alternate`` runs of each, on separate engine
starts, in the order they ran (alternate them: A B B A ...).

Why: one alternation prices the probes inside one engine against themselves taken out;
whether one probe path costs less than another is a comparison across engine starts, and
runs of the same code on this kind of machine differ by more than a single run's interval
says. So each path is read over several runs, and a difference is called resolved only
where every run of one path lies apart from every run of the other: the highest 95% bound
of the cheaper path's runs below the lowest bound of the other's.

``python -m benchmarks.probe_alternate_compare --out DIR RUN_DIR...`` (each RUN_DIR holds
a ``probe_alternate.json``; the path is the run's ``meta.probe_counting``): writes
``DIR/probe_alternate_compare.md``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks import probe_alternate_data as pad
from benchmarks.report import md_table


def comparable(config: object) -> object:
    """An engine configuration with each absolute path cut to its last two parts (the
    pair's folder and the model's): two checkouts of one revision serve the same files
    from two places, and the runs of two probe paths come from two checkouts."""
    if isinstance(config, dict):
        return {k: comparable(v) for k, v in config.items()}
    if isinstance(config, list):
        return [comparable(v) for v in config]
    if isinstance(config, str) and config.startswith("/"):
        return "/".join(Path(config).parts[-2:])
    return config


def mismatch(runs: list[tuple[str, dict]]) -> str | None:
    """What keeps these runs from being one comparison: another engine configuration or
    protocol (``probe_alternate_data.SAME_PROTOCOL``, as its ``merge`` checks)."""
    first = comparable(runs[0][1].get("config"))
    if any(comparable(d.get("config")) != first for _, d in runs[1:]):
        return "the runs' engine configurations differ"
    if (key := pad.protocol_difference([d for _, d in runs])) is not None:
        return f"the runs differ in {key}: " + ", ".join(
            f"{name} {d['meta'].get(key)}" for name, d in runs)
    return None


def readings(runs: list[tuple[str, dict]]) -> dict[int, dict[str, list[tuple[str, pad.Cell]]]]:
    """concurrency -> probe path -> [(run name, its reading)], in run order."""
    out: dict[int, dict[str, list[tuple[str, pad.Cell]]]] = {}
    for name, data in runs:
        for cell in pad.verdicts(data):
            out.setdefault(cell.concurrency, {}).setdefault(pad.counting(data), []).append(
                (name, cell))
    return out


def difference(paths: dict[str, list[tuple[str, pad.Cell]]]) -> str:
    """Which path is cheaper, read from every run's interval (see the module doc)."""
    if len(paths) != 2:
        return f"no comparison ({len(paths)} probe path(s) at this concurrency)"
    (a, ra), (b, rb) = paths.items()
    if any(not c.control_ok for _, c in ra + rb):
        return "no comparison (a control read non-zero)"
    hi = {a: max(c.ab.hi for _, c in ra), b: max(c.ab.hi for _, c in rb)}
    lo = {a: min(c.ab.lo for _, c in ra), b: min(c.ab.lo for _, c in rb)}
    for cheap, dear in ((a, b), (b, a)):
        if hi[cheap] < lo[dear]:
            return f"{cheap} cheaper: every run of it lies below every run of {dear}"
    return "no difference resolved: the runs of the two paths overlap"


def report(runs: list[tuple[str, dict]]) -> list[str]:
    m = runs[0][1]["meta"]
    apart = mismatch(runs)
    rows, verdicts = [], []
    for c, paths in sorted(readings(runs).items()):
        for path, cells in paths.items():
            for name, cell in cells:
                rows.append([c, path, name, cell.ab.text(), cell.aa.text(),
                             f"{cell.pairs['ab'][0]} of {cell.pairs['ab'][1]}",
                             f"{cell.step_ms:.3f}"])
        verdicts.append(f"* c={c}: {f'no comparison ({apart})' if apart else difference(paths)}.")
    return ["# Two probe paths, run by run (`benchmarks/probe_alternate_compare.py`)", "",
            f"{len(runs)} runs of `benchmarks/probe_alternate.py` on "
            f"{m.get('device_name', m.get('device'))}, "
            f"vLLM {m['vllm']}, in this order: " + ", ".join(
                f"{name} ({pad.counting(d)}, {d['meta']['date']})" for name, d in runs)
            + ". Each run is its own engine start; its overhead is the probes in vs out "
            "step by step inside it, with its bootstrap 95% interval, and `aa` its control.",
            "", *md_table(["concurrency", "probe path", "run", "ab overhead % (sum)",
                           "aa 'overhead' %", "ab pairs counted", "step ms (out, median)"],
                          rows), "", *verdicts]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, nargs="+", help="run folders, in the order they ran")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    runs = [(d.name, json.loads((d / "probe_alternate.json").read_text())) for d in a.runs]
    a.out.mkdir(parents=True, exist_ok=True)
    text = "\n".join(report(runs))
    (a.out / "probe_alternate_compare.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
