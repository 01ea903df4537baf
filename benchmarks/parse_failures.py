"""Why model_quality's 20-line completions fail to parse, and what real code scores.

Reads the raw completions of a ``model_quality`` run (default: the bundled pair after the
sampler fix, ``docs/model_quality_after_fix/model_quality.json``) and leaves the issue's
metric and verdict exactly as that run computed them (``model_quality.parses``: prompt +
the first 20 complete lines through ``ast.parse``, target >= 50%). Next to them:

* a failure class for every completion, computed from its text: ``fence leak`` (the
  first syntax error is a line starting with a markdown fence), ``cut inside an
  unfinished structure`` (``codeop`` reads the text as a valid but incomplete program:
  the cut fell inside an open bracket, an unterminated string or docstring, or after a
  block header whose body is cut off) or ``syntax error`` (anything else); plus where the
  text ends (the 20-line cut, the token limit, or the model's own end) and the longest
  prefix of the completion, in lines, that parses;
* a calibration of the metric: the same cut, through the same function, applied to
  real code, windows of the CPython standard library starting at a top-level
  ``def``/``class`` line (seeded sample, prompt lengths in lines cycled over the
  benchmark's prompts). The share that parses is what a model that writes exactly the
  standard library's code would score.

Writes ``docs/model_quality_parse.json`` and ``docs/model_quality_parse.md``. No engine:
``python -m benchmarks.parse_failures``.
"""

from __future__ import annotations

import argparse
import ast
import codeop
import datetime as dt
import io
import json
import math
import platform
import random
import re
import sys
import sysconfig
import tokenize
import warnings
from collections import Counter
from pathlib import Path

from benchmarks.harness import ROOT
from benchmarks.model_quality import (
    PARSE_LINES,
    PROMPTS,
    TARGETS,
    kept_text,
    parses,
    parses_text,
)
from benchmarks.report import md_table, write

FENCE = "fence leak"
CUT = "cut inside an unfinished structure"
SYNTAX = "syntax error"
CLASSES = ("parses", FENCE, CUT, SYNTAX)


def open_structure(text: str) -> str:
    """Which structure an incomplete program is left inside."""
    try:
        for _ in tokenize.generate_tokens(io.StringIO(text).readline):
            pass
    except tokenize.TokenError as exc:
        # 3.11: "EOF in multi-line string/statement"; 3.12+: the C tokenizer's words.
        msg = str(exc)
        return "unterminated string or docstring" if "string" in msg else "open bracket"
    except (SyntaxError, IndentationError):
        return "other"
    lines = text.rstrip("\n").split("\n")
    code = [ln.split("#", 1)[0].rstrip() for ln in lines]
    last = next((c for c in reversed(code) if c.strip()), "")
    if last.endswith(":"):
        return "block header without a body"
    if last.lstrip().startswith("@"):
        return "decorator without its definition"
    if last.endswith("\\"):
        return "line continuation"
    for ln in reversed(code):  # a try: whose except/finally is past the cut
        if ln.lstrip().startswith("try:"):
            ind = ln[: len(ln) - len(ln.lstrip())]
            if parses_text(f"{text.rstrip()}\n{ind}finally:\n{ind}    pass\n"):
                return "try without its except/finally"
    return "other"


def classify(prompt: str, completion: str, finished: bool) -> dict:
    """The failure class of one completion under the issue's metric (see module doc)."""
    text, kept = kept_text(prompt, completion, finished)
    ok, _ = parses(prompt, completion, finished)
    row = {"class": "parses" if ok else None, "lines_kept": len(kept),
           "ends_at": ("model's end (eos)" if finished
                       else "20-line cut" if len(kept) == PARSE_LINES else "token limit")}
    # The longest prefix (in complete lines) that parses: how close a failure came.
    row["longest_parsing_prefix"] = next(
        (n for n in range(len(kept), -1, -1) if parses_text(prompt + "\n".join(kept[:n]))), None)
    if ok:
        return row
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            incomplete = codeop.compile_command(text, symbol="exec") is None
            err = None
        except (SyntaxError, ValueError, OverflowError) as exc:
            incomplete, err = False, exc
    if incomplete:
        return row | {"class": CUT, "structure": open_structure(text)}
    line_no = getattr(err, "lineno", None) or 0
    lines = text.split("\n")
    bad = lines[line_no - 1] if 0 < line_no <= len(lines) else ""
    fence_at = next((i + 1 for i, ln in enumerate(lines) if ln.lstrip().startswith("```")),
                    None)
    # A fence is the cause when the text before it is fine: the first error is there.
    cls = FENCE if fence_at is not None and line_no >= fence_at else SYNTAX
    return row | {"class": cls, "error": getattr(err, "msg", str(err)), "error_line": bad,
                  "error_lineno_in_completion": line_no - prompt.count("\n")}


def model_rows(data: dict, label: str) -> list[dict]:
    """Every completion of one pair, classified; the run's own parse flag checked."""
    out = []
    for p in data["results"][label]["parse"]:
        for i, c in enumerate(p["completions"]):
            finished = c["finish_reason"] == "stop"
            row = classify(c["prompt"], c["completion"], finished)
            if (row["class"] == "parses") != c["parses"]:
                raise SystemExit(f"prompt {i} at t={p['temperature']}: recomputed metric "
                                 f"{row['class']} disagrees with the run's {c['parses']}")
            out.append({"temperature": p["temperature"], "prompt_index": i,
                        "finish_reason": c["finish_reason"], **row})
    return out


def stdlib_windows(n: int, seed: int) -> list[dict]:
    """Seeded windows of the standard library at top-level def/class lines, cut exactly
    as model_quality cuts a completion."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    starts = []
    for path in sorted(stdlib.rglob("*.py")):
        if "site-packages" in path.parts:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(text)
        except (SyntaxError, ValueError):  # test data in other Python versions' syntax
            continue
        lines = text.split("\n")
        rel = path.relative_to(stdlib).as_posix()
        # Real top-level definitions (not "def" lines inside string literals); the
        # window starts at the def/class line itself, below any decorators.
        starts += [(rel, lines, node.lineno - 1) for node in tree.body
                   if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    rng = random.Random(seed)
    picks = rng.sample(range(len(starts)), min(n, len(starts)))
    prompt_lines = [p.count("\n") or 1 for p in PROMPTS]
    out = []
    for k, idx in enumerate(picks):
        rel, lines, i = starts[idx]
        p = prompt_lines[k % len(prompt_lines)]
        prompt = "\n".join(lines[i : i + p]) + "\n"
        rest = lines[i + p :]
        # More than PARSE_LINES lines left: a completion cut by the token limit (its
        # last line partial, dropped); else the file's end, kept whole like an eos.
        finished = len(rest) <= PARSE_LINES
        completion = "\n".join(rest[: PARSE_LINES + 1])
        row = classify(prompt, completion, finished)
        out.append({"file": rel, "line": i + 1, "prompt_lines": p,
                    "starts_with": "class" if lines[i].startswith("class") else "def", **row})
    return out, len(starts)


FENCE_CONTEXTS = {
    "as served (nothing before the prompt)": "",
    "after <|eos|> (how every source file starts in training)": "<|eos|>",
    "after 40 lines of stdlib code (shutil.py 101-140)": None,  # filled in fence_probe
    "after a chat header (where a fence belongs)":
        "<|bos|><|user|>\nWrite it in Python.\n<|assistant|>\n```python\n",
}


def fence_probe(rows: list[dict], pair: Path) -> list[dict]:
    """P(the next token opens a fence) after each fence-leak prompt, in the contexts of
    FENCE_CONTEXTS, from the pair's target (transformers, fp32 compute on its weights).
    Where the fence is likely says which training windows taught it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(pair / "target")
    model = AutoModelForCausalLM.from_pretrained(pair / "target").float().eval()
    fence_id = tok.convert_tokens_to_ids(tok.tokenize("```")[0])
    shutil_py = (Path(sysconfig.get_paths()["stdlib"]) / "shutil.py").read_text().split("\n")
    contexts = {k: v if v is not None else "\n".join(shutil_py[100:140]) + "\n\n\n"
                for k, v in FENCE_CONTEXTS.items()}
    out = []
    for i in sorted({r["prompt_index"] for r in rows if r["class"] == FENCE}):
        row = {"prompt_index": i}
        for name, before in contexts.items():
            ids = tok(before + PROMPTS[i], add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                p = model(torch.tensor([ids])).logits[0, -1].float().softmax(-1)
            row[name] = round(p[fence_id].item(), 3)
        out.append(row)
    return out


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a share k/n: how far sampling alone moves it."""
    if not n:
        return (0.0, 1.0)
    p, d = k / n, 1 + z * z / n
    mid, half = (p + z * z / (2 * n)) / d, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (round(mid - half, 3), round(mid + half, 3))


def shares(rows: list[dict]) -> dict[str, int]:
    c = Counter(r["class"] for r in rows)
    return {k: c.get(k, 0) for k in CLASSES}


def md_code(text: str) -> str:
    """``text`` as a markdown code span, whatever backticks it holds."""
    ticks = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    return f"{ticks} {text} {ticks}" if "`" in text else f"`{text}`"


def detail(r: dict) -> str:
    if r["class"] == CUT:
        return r["structure"]
    if r["class"] in (FENCE, SYNTAX):
        return (f"{r['error']} at completion line {r['error_lineno_in_completion']}: "
                + md_code(r["error_line"].strip()[:50]))
    return ""


def fence_section(out: dict) -> list[str]:
    """The fence leak's evidence: the model probe, and the training stream's count."""
    probe, stream = out.get("fence_probe"), out.get("fence_stream")
    if not probe:
        return []
    lines = [
        "## The fence leak: what the model learnt, and from which windows", "",
        "Probability that the target's next token opens a markdown fence right after the "
        "fence-leak prompts, the prompt alone and with something before it "
        "(`--probe`, the bundled target's weights through transformers):", "",
        # "|" in a header cell would split it: <|eos|> is escaped for markdown.
        *md_table(["prompt", *(k.replace("|", "\\|") for k in FENCE_CONTEXTS)],
                  [["`" + PROMPTS[r["prompt_index"]].split("\n")[0] + "`",
                    *[f"{r[k]:.3f}" for k in FENCE_CONTEXTS]] for r in probe]),
        "",
        "The fence is likely after these prompts when nothing precedes them (as served) "
        "or a chat header does, and unlikely when a document boundary or raw source "
        "precedes them: the model ties it to such a definition at the very start of its "
        "context, where it has no header to tell it whether it is in a chat answer.",
    ]
    if stream:
        f = stream["fence_targets_without_header"]
        lines += [
            "", "In training, that context comes from the windows the target trains on "
            "(`models/build_pair.py`): sources and chat transcripts form one token stream "
            "and a window starts anywhere, so a window that starts between a "
            "transcript's `<|assistant|>` and its closing fence shows the answer's code "
            "with no header before it, and the loss asks for the fence. "
            f"`build_pair.py --preset {stream['preset']} --stream-only` on this machine's "
            f"corpus ({stream['corpus_files']} files, {stream['tokens']:,} tokens, "
            f"{stream['chat_examples']:,} transcripts; the committed pair's corpus was the "
            "device's, of the same recipe) counts, over the windows in which a closing "
            "fence is a target:", "",
            *md_table(["window starts", "fence-target windows", "with the header",
                       "without the header", "share without"],
                      [[k, f"{v['fence_target_windows']:,}",
                        f"{v['fence_target_windows'] - v['without_header']:,}",
                        f"{v['without_header']:,}", f"{v['share']:.1%}"]
                       for k, v in f.items()]),
            "", "`uniform` is how the committed pair was trained; `answers_with_header` "
            "is the proposed fix (preset `h200-code-answers-with-header`: no window starts "
            "after a transcript's `<|assistant|>` and before its end). It also drops the "
            "windows that start inside one answer and run into the next transcript, so "
            "fewer fence targets are seen with their header too (the 'with the header' "
            "column; the same number of windows is drawn from fewer starts). Not "
            "retrained here: "
            "whether the fix removes the leak is unmeasured until that preset is built on "
            "a GPU and measured by `benchmarks.model_quality`.",
        ]
    return [*lines, ""]


def report(out: dict) -> list[str]:
    target = TARGETS["parse_share"]
    ceiling = out["calibration"]["by"]["all"]
    near = {t["temperature"]: sum(
        1 for r in out["completions"] if r["temperature"] == t["temperature"]
        and r["class"] != "parses" and (r["longest_parsing_prefix"] or 0) >= PARSE_LINES - 1)
        for t in out["metric"]}
    lines = [
        f"# Parse share of the pair `{out['label']}`: failure classes and a calibration of "
        "the metric",
        "",
        f"Produced by `{out['command']}` from the raw completions in "
        f"`{out['source']}` (pair `{out['label']}`); every classified completion and "
        "calibration window in `model_quality_parse.json`. The issue's metric and verdict "
        "are unchanged: prompt + the first "
        f"{PARSE_LINES} complete lines of the completion through `ast.parse` "
        f"(`model_quality.parses`), target >= {target:.0%}. The classes and the "
        "calibration below stand next to them; they change no verdict.", "",
        "## The issue's metric (as measured)", "",
        *md_table(["temperature", "completions", "parse", "share", "target", "met",
                   "95% interval of the share (Wilson)"],
                  [[t["temperature"], t["n"], t["parses"], f"{t['share']:.0%}",
                    f">= {target:.0%}", "yes" if t["met"] else "**no**",
                    "{:.0%} to {:.0%}".format(*t["interval"])]
                   for t in out["metric"]]),
        "",
        "The interval is sampling noise of 16 prompts alone; the verdict is the issue's, "
        "on the share as measured.", "",
        "## Why the others fail", "",
        f"Class, computed per completion: **{FENCE}** = the first syntax error is a line "
        f"starting with a markdown fence; **{CUT}** = `codeop` reads prompt + kept lines "
        "as a valid but unfinished program (the cut fell inside an open bracket, an "
        "unterminated string or docstring, or after a block header whose body was cut "
        f"off); **{SYNTAX}** = anything else (the error and its line are in the JSON). "
        "The class says where the parser stopped, not whether the model would have "
        "closed the structure with more lines: a docstring repeating one phrase until the "
        "cut counts as cut inside a docstring. 'ends at' is what ended the kept text; "
        "'longest parsing prefix' is the most complete lines of the completion that parse "
        "after the prompt ('none': not even the prompt alone).", "",
        *md_table(["temperature", *CLASSES],
                  [[t["temperature"], *[t["classes"][c] for c in CLASSES]]
                   for t in out["metric"]]),
        "",
        *md_table(["t", "#", "prompt (first line)", "class", "detail", "ends at",
                   "lines kept", "longest parsing prefix"],
                  [[r["temperature"], r["prompt_index"],
                    "`" + PROMPTS[r["prompt_index"]].split("\n")[0] + "`", r["class"],
                    detail(r),
                    r["ends_at"], r["lines_kept"],
                    "none" if r["longest_parsing_prefix"] is None
                    else r["longest_parsing_prefix"]]
                   for r in out["completions"]]),
        "",
        "Failing completions whose first 19 complete lines parse (they fail on the 20th "
        "line alone; under the metric they still fail): " + ", ".join(
            f"{n} at temperature {t}" for t, n in near.items()) + ".", "",
        "## Calibration: the same cut on real code", "",
        f"{out['calibration']['n']} windows of the CPython {out['calibration']['python']} "
        f"standard library (of {out['calibration']['candidates']} top-level `def`/`class` "
        f"lines in files that parse; `random.Random({out['calibration']['seed']})`), "
        "prompt = the first 1 to 6 lines (cycled over the benchmark's prompt lengths), "
        "completion = the source that follows, through the same `parses` function. "
        "A model that wrote exactly the standard library's code would score:", "",
        *md_table(["windows", "n", *CLASSES, "parse share", "95% interval (Wilson)"],
                  [[g, out["calibration"]["by"][g]["n"],
                    *[out["calibration"]["by"][g]["classes"][c] for c in CLASSES],
                    f"{out['calibration']['by'][g]['share']:.0%}",
                    "{:.0%} to {:.0%}".format(*out["calibration"]["by"][g]["interval"])]
                   for g in out["calibration"]["by"]]),
        "",
        "Structures the real code was cut inside: " + ", ".join(
            f"{k} {v}" for k, v in out["calibration"]["structures"].items()) + ".", "",
        f"Against that reference ({ceiling['share']:.0%} of real code passes this cut; "
        "a reference, not a hard ceiling: code that ends every 20th line at a statement "
        "boundary would pass more), the "
        f"issue's {target:.0%} target asks for {target / ceiling['share']:.0%} of what "
        "the standard library itself scores, and the measured shares are " + ", ".join(
            f"{t['share'] / ceiling['share']:.0%} of it at temperature {t['temperature']}"
            for t in out["metric"]) + ". The verdicts above stay the issue's.", "",
        *fence_section(out),
    ]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path,
                    default=ROOT / "docs" / "model_quality_after_fix" / "model_quality.json")
    ap.add_argument("--label", default="bundled")
    ap.add_argument("--windows", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    ap.add_argument("--probe", type=Path, metavar="PAIR_DIR",
                    help="probe this pair's target for the fence (the measured pair: "
                         "models/tiny-code-llama)")
    ap.add_argument("--stream-json", type=Path,
                    help="build_pair.py --stream-only's output, for the fence section")
    a = ap.parse_args()
    data = json.loads(a.source.read_text())
    rows = model_rows(data, a.label)
    metric = []
    for p in data["results"][a.label]["parse"]:
        these = [r for r in rows if r["temperature"] == p["temperature"]]
        n_ok = sum(r["class"] == "parses" for r in these)
        metric.append({"temperature": p["temperature"], "n": len(these), "parses": n_ok,
                       # The run's own share, as its report states it.
                       "share": p["parse_share"], "met": p["parse_share"] >= TARGETS[
                           "parse_share"], "interval": wilson(n_ok, len(these)),
                       "classes": shares(these)})
    windows, candidates = stdlib_windows(a.windows, a.seed)
    groups = {"all": windows, **{f"starting with `{k}`": [w for w in windows
                                                          if w["starts_with"] == k]
                                  for k in ("def", "class")}}
    by = {}
    for g, ws in groups.items():
        k = sum(w["class"] == "parses" for w in ws)
        by[g] = {"n": len(ws), "classes": shares(ws), "share": round(k / max(1, len(ws)), 3),
                 "interval": wilson(k, len(ws))}
    out = {"command": " ".join(["python -m benchmarks.parse_failures", *sys.argv[1:]]),
           "source": a.source.resolve().relative_to(ROOT).as_posix(), "label": a.label,
           "date": dt.date.today().isoformat(), "metric": metric, "completions": rows,
           "calibration": {"python": platform.python_version(), "seed": a.seed,
                           "n": len(windows), "candidates": candidates, "by": by,
                           "structures": dict(Counter(w.get("structure") for w in windows
                                                      if w["class"] == CUT).most_common()),
                           "windows": windows}}
    if a.probe:
        out["fence_probe"] = fence_probe(rows, a.probe)
    if a.stream_json:
        out["fence_stream"] = json.loads(a.stream_json.read_text())
    # One line per calibration window: the file stays readable and diffable.
    text = json.dumps({**out, "calibration": {**out["calibration"], "windows": "@W"}},
                      indent=1)
    text = text.replace('"@W"', "[\n" + ",\n".join(json.dumps(w) for w in windows) + "\n  ]")
    (a.out / "model_quality_parse.json").write_text(text + "\n")
    lines = report(out)
    write(a.out / "model_quality_parse.md", lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
