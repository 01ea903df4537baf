"""CPU engine start time and tokens/s: the bundled pair against the pair it replaced.

Issue #15 asks for "CPU engine start no slower than today, CPU tokens/s within 30% of
today's"; ``benchmarks/model_quality.py`` measured each pair's start once. Here both pairs
are started ``--reps`` times each in one run, in alternating order (A B, B A, ...), every
start a real ``specgw serve`` (vLLM CPU engine, EAGLE-3, k=3) on 127.0.0.1, timed from
process launch to ``/ready`` answering 200 (what a user waits for). The compile-cache
state is the same for both pairs and named per phase:

* ``warm``: one fresh ``VLLM_CACHE_ROOT`` per pair, filled by one discarded start of that
  pair; then every measured start finds its compiled graphs there (a user's second and
  later starts);
* ``cold``: a fresh, empty ``VLLM_CACHE_ROOT`` for every start (a user's first start;
  vLLM keeps its inductor cache under that root too). The OS page cache and Python's
  bytecode caches are warm in both phases.

In the warm phase each start also runs the issue's tokens/s workload (the fixed code
prompts of ``model_quality``, 128 tokens each, temperature 0, batch 1, after one warm-up
request), so each pair gets ``--reps`` tokens/s samples. Medians, min-max and verdicts
(ratio of medians against the issue's targets) are computed here from the raw samples in
``docs/model_quality_start.json``; the report is ``docs/model_quality_start.md``.
Run under the engine lock:
``flock /tmp/specgw-engine.lock python -m benchmarks.start_speed``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import time
from pathlib import Path

from benchmarks.harness import MODEL, ROOT, Server
from benchmarks.model_quality import PROMPTS, TARGETS, acceptance_pass, checkout, pair_mb
from benchmarks.report import Spread, Target, beats, md_table, num, verdict, write

K = 3
START_TARGET = Target("engine start, bundled / old (ratio of medians)", "<=",
                      TARGETS["max_start_ratio"])
TOKS_TARGET = Target("CPU tokens/s, bundled / old (ratio of medians)", ">=",
                     TARGETS["min_tok_s_ratio"])
OLD_PAIR_REV = "202d578"  # the last commit whose models/tiny-code-llama is the cpu-5m pair


def pair_digest(pair: Path) -> str:
    """Which weights were measured: sha256 over the pair's safetensors files."""
    h = hashlib.sha256()
    for f in sorted(pair.rglob("*.safetensors")):
        h.update(f.relative_to(pair).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def one_start(label: str, pair: Path, cache_root: Path, tokens: bool) -> dict:
    """Launch, wait for /ready, optionally run the tokens/s workload, stop."""
    from openai import OpenAI

    load = os.getloadavg()[0]  # other work on this shared 2-core machine shows up here
    t0 = time.perf_counter()
    srv = Server(f"start-{label}", ["--log-format", "text", "--method", "eagle3", "-k", str(K)],
                 env={"SPECGW_BUNDLED_DIR": str(pair.resolve()),
                      "VLLM_CACHE_ROOT": str(cache_root)})
    row: dict = {"pair": label, "loadavg_1m_before": round(load, 2)}
    try:
        srv.wait_ready()
        row["start_s"] = round(time.perf_counter() - t0, 2)
        if tokens:
            c = OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0, timeout=600)
            c.completions.create(model=MODEL, prompt="def warmup():", max_tokens=16)
            acc = acceptance_pass(c, srv.url, 0.0)
            row |= {"tokens_per_s": acc["tokens_per_s"],
                    "completion_tokens": acc["completion_tokens"],
                    "acceptance_length": acc["acceptance_length"]}
    finally:
        srv.stop()
    print(json.dumps(row), flush=True)
    return row


def run_phase(result: dict, pairs: dict[str, Path], scratch: Path, save) -> None:
    """One cache state: ``reps`` measured starts per pair, order alternating per round.

    Fills ``result`` (already in the raw data) and saves after every start, so an
    interrupted run keeps what it measured."""
    phase, reps, labels = result["cache"], result["reps"], list(pairs)
    samples, discarded = result["samples"], result["discarded"]
    tokens = phase == "warm"
    if phase == "warm":
        roots = {label: scratch / f"cache-warm-{label}" for label in labels}
        for label in labels:
            shutil.rmtree(roots[label], ignore_errors=True)
            roots[label].mkdir(parents=True)
            # Fills this pair's compile cache; its time is a cold start, not reported here.
            discarded.append(one_start(label, pairs[label], roots[label], tokens=False))
            save()
    for rep in range(reps):
        order = labels if rep % 2 == 0 else labels[::-1]
        result["order"].append(order)
        for pos, label in enumerate(order):
            if phase == "warm":
                root = roots[label]
            else:
                root = scratch / f"cache-cold-{label}-{rep}"
                shutil.rmtree(root, ignore_errors=True)
                root.mkdir(parents=True)
            row = one_start(label, pairs[label], root, tokens)
            samples.append({**row, "rep": rep, "position": pos})
            if phase == "cold":
                shutil.rmtree(root, ignore_errors=True)
            save()
    result["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def values(phase: dict, label: str, key: str) -> list[float]:
    return [s[key] for s in phase["samples"] if s["pair"] == label and key in s]


def sample(phase: dict, rep: int, label: str) -> dict:
    """``label``'s measured start in round ``rep``."""
    return next(s for s in phase["samples"] if s["rep"] == rep and s["pair"] == label)


def paired(phase: dict, label: str, key: str) -> list[float]:
    """``key`` of ``label`` per round, in round order."""
    return [sample(phase, rep, label)[key] for rep in range(len(phase["order"]))]


def checks(data: dict) -> list[dict]:
    """Per phase: start medians, their ratio and the verdict; tokens/s where measured."""
    new, old = data["new"], data["old"]
    out = []
    for phase in data["phases"].values():
        for key, target in (("start_s", START_TARGET), ("tokens_per_s", TOKS_TARGET)):
            a, b = values(phase, new, key), values(phase, old, key)
            if not a or not b:
                continue
            sa, sb = Spread.of(a), Spread.of(b)
            r = sa.median / sb.median
            # Is the difference larger than the spread? (every sample of one side beyond
            # every sample of the other); the verdict itself is the issue's: medians.
            sep = beats(a, b) if key == "tokens_per_s" else beats(b, a)
            # Each round starts both pairs back to back: the per-round difference
            # cancels what drifts between rounds (other work on the machine).
            diffs = [x - y for x, y in zip(paired(phase, new, key), paired(phase, old, key),
                                           strict=True)]
            sd = Spread.of(diffs)
            out.append({"cache": phase["cache"], "metric": key,
                        "target": f"{target.op} {target.threshold:g}",
                        "new": [sa.median, sa.lo, sa.hi, sa.n],
                        "old": [sb.median, sb.lo, sb.hi, sb.n],
                        "paired_diff": [round(sd.median, 2), round(sd.lo, 2), round(sd.hi, 2),
                                        sd.n],
                        "ratio": round(r, 3), "met": target.met(r),
                        "new_better_beyond_spread": sep})
    return out


def report(data: dict) -> list[str]:
    meta = data["meta"]
    new, old = data["new"], data["old"]
    fmt = {"start_s": "{:.1f}", "tokens_per_s": "{:.0f}"}
    rows = []
    for c in data["checks"]:
        f = fmt[c["metric"]]
        rows.append([f"{c['metric'].replace('_', ' ')} ({c['cache']} cache)",
                     Spread(*c["new"]).text(f), Spread(*c["old"]).text(f), c["new"][3],
                     Spread(*c["paired_diff"]).text("{:+.1f}"), num(c["ratio"]), c["target"],
                     verdict(c["met"]), c["new_better_beyond_spread"]])
    lines = [
        "# Bundled pair vs the pair it replaced: CPU engine start and tokens/s", "",
        f"vLLM {meta['vllm']}, {meta['cpus']} CPU cores ({meta['machine']}); each cache "
        "state measured in its own run (" + ", ".join(
            f"{p['cache']}: started {p['started']}" for p in data["phases"].values())
        + f"). `{new}`: {data['pairs'][new]['source']} (preset "
        f"{data['pairs'][new]['preset']}, {data['pairs'][new]['mb']} MB); `{old}`: "
        f"{data['pairs'][old]['source']} (preset {data['pairs'][old]['preset']}, "
        f"{data['pairs'][old]['mb']} MB), restored from git into a scratch directory. "
        "Produced by `python -m benchmarks.start_speed`; every sample (with the 1-minute "
        "load average before its start) in `model_quality_start.json`.", "",
        "Start = launch of `specgw serve` (EAGLE-3, k=3) to `/ready` answering 200, "
        "`import vllm` included. Pairs alternate order each round (A B, B A, ...). "
        "Cache states: **warm** = one fresh `VLLM_CACHE_ROOT` per pair, filled by one "
        "discarded start of that pair (a user's second start); **cold** = a fresh empty "
        "`VLLM_CACHE_ROOT` for every start (a user's first start). Tokens/s = the "
        f"issue's workload, {len(PROMPTS)} fixed code prompts x 128 tokens, temperature 0, "
        "batch 1, measured in each warm start. Per-round difference = bundled minus old "
        "within a round (the two starts back to back). Verdict = the issue's target on "
        "the ratio of medians; the last column says whether every sample of the bundled "
        "pair is better than every sample of the old one ('within noise' when the "
        "ranges overlap). These machines are shared: read ratios, not absolute "
        "figures.", "",
        *md_table(["metric", f"`{new}` median (min-max)", f"`{old}` median (min-max)",
                   "n each", "per-round difference, median (min to max)", "ratio",
                   "target", "met", "bundled better beyond spread"],
                  rows),
        "",
    ]
    for phase in data["phases"].values():
        lines += [f"## {phase['cache'].capitalize()} cache: every start", "",
                  *md_table(["round", "order", *[f"`{p}` start s" for p in (new, old)],
                             *([f"`{p}` tok/s" for p in (new, old)]
                               if phase["cache"] == "warm" else []),
                             "load avg before (new / old)"],
                            [[rep, " ".join(order),
                              *[sample(phase, rep, p)["start_s"] for p in (new, old)],
                              *([sample(phase, rep, p).get("tokens_per_s") for p in (new, old)]
                                if phase["cache"] == "warm" else []),
                              " / ".join(str(sample(phase, rep, p)["loadavg_1m_before"])
                                         for p in (new, old))]
                             for rep, order in enumerate(phase["order"])]), ""]
        if phase["discarded"]:
            lines += ["Discarded cache-filling starts (cold, one each): " + ", ".join(
                f"`{d['pair']}` {d['start_s']} s" for d in phase["discarded"]) + ".", ""]
    if "cold" not in data["phases"]:
        lines += ["Cold cache (a user's first start): not measured by this run. The "
                  "discarded cache-filling starts above are cold starts, one per pair in a "
                  "fixed order: no comparison. `--cache cold` measures it.", ""]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--new", default=f"bundled={ROOT / 'models' / 'tiny-code-llama'}",
                    metavar="LABEL=DIR|git:REV")
    ap.add_argument("--old", default=f"old-cpu-5m=git:{OLD_PAIR_REV}",
                    metavar="LABEL=DIR|git:REV")
    ap.add_argument("--cache", action="append", choices=["warm", "cold"],
                    help="cache states to measure, in this order (default: warm)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/old-pair"),
                    help="outside the repo: the restored old pair and the compile caches")
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    ap.add_argument("--report-only", action="store_true")
    a = ap.parse_args()
    raw = a.out / "model_quality_start.json"
    data = json.loads(raw.read_text()) if raw.exists() else {"phases": {}}

    def save() -> None:
        raw.write_text(json.dumps(data, indent=2) + "\n")

    if not a.report_only:
        specs = dict(s.split("=", 1) for s in (a.new, a.old))
        data["new"], data["old"] = list(specs)
        pairs: dict[str, Path] = {}
        for label, spec in specs.items():
            into = a.scratch / label
            if spec.startswith("git:"):
                shutil.rmtree(into, ignore_errors=True)
            pairs[label] = checkout(spec, into)
        data["pairs"] = {}
        for label, pair in pairs.items():
            info_path = pair / "build_info.json"
            info = json.loads(info_path.read_text()) if info_path.exists() else {}
            data["pairs"][label] = {
                "source": specs[label] if specs[label].startswith("git:")
                else str(Path(specs[label]).resolve().relative_to(ROOT)),
                # build_info.json of the first pair has no preset key: it is cpu-5m's.
                "preset": info.get("preset", "cpu-5m"),
                "hidden_size": info.get("config", {}).get("hidden_size"),
                "mb": pair_mb(pair),
                "weights_sha256_16": pair_digest(pair)}
        data["meta"] = {"date": dt.date.today().isoformat(), "machine": platform.machine(),
                        "cpus": os.cpu_count(), "python": platform.python_version(),
                        "vllm": __import__("vllm").__version__, "k": K}
        for phase in a.cache or ["warm"]:
            data["phases"][phase] = {
                "cache": phase, "reps": a.reps, "order": [], "samples": [], "discarded": [],
                "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
            run_phase(data["phases"][phase], pairs, a.scratch, save)
            save()
    data["checks"] = checks(data)
    save()
    lines = report(data)
    write(a.out / "model_quality_start.md", lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
