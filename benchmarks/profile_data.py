"""What the py-spy samples of a ``serve_compare --py-spy`` run set say, per engine step.

A run's profiles (``profiles/<variant>_c<c>_r<rep>.<process>-<pid>.raw.gz``) hold the
samples of every process of one server over that run. Turned into milliseconds of
sampled (non-idle) CPU time per engine step (the engine's own count of steps in the same
run, ``engine_timing.iterations``), two servers doing the same steps can be set side by
side function by function: where one spends more per step is where it is slower.

* inclusive: the samples with the function anywhere on the stack (a subtree's cost);
* self: the samples with the function as the innermost Python frame (py-spy runs without
  ``--native``, so time in C code is its Python caller's);
* ``engine_ext``: self time in specgw's own engine extension (the probes' wrappers and
  ledger, with the standard library they call: ``is_ours``), the direct cost of the
  probes.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from benchmarks.py_spy import read
from benchmarks.serve_compare_data import ENGINE_PROCESSES, RunSet

_NAME = re.compile(r"^(?P<stem>.+_c\d+_r\d+)\.(?P<proc>.+)-(?P<pid>\d+)\.raw\.gz$")
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>.*?)(?::\d+)?\)$")
OURS = "(engine_ext/"  # a label's path starts at the package
_STDLIB = "(python3."  # .../lib/python3.12/contextlib.py -> "python3.12/contextlib.py"


# Where a label's path starts: the first of these among a frame's path components, so
# /tmp/site/vllm/... (the device's pip --target tree), .venv/.../site-packages/vllm/...
# and any checkout's .../engine_ext/... read alike.
PACKAGES = ("engine_ext", "gateway", "monitoring", "benchmarks", "vllm", "torch",
            "transformers", "triton", "prometheus_client", "starlette", "fastapi",
            "uvicorn", "aiohttp", "httpx", "zmq", "msgspec")


def frame_label(frame: str) -> str:
    """``func (path:line)`` -> ``func (short path)``: the path from its package
    (``vllm/...``, ``engine_ext/...``; the standard library's as ``python3.X/...``), so
    the device's and this machine's agree whatever directory holds them."""
    m = _FRAME.match(frame)
    if not m:
        return frame
    parts = m["file"].split("/")
    starts = [i for i, part in enumerate(parts[:-1]) if part in PACKAGES]
    if starts:
        path = "/".join(parts[starts[0]:])
    elif "site-packages" in parts:
        path = "/".join(parts[parts.index("site-packages") + 1:])
    else:
        path = "/".join(parts[-2:])
    return f"{m['func']} ({path})"


@dataclass
class StepProfile:
    """One server process kind (``engine`` or ``front``) over one run, per engine step."""

    samples: int
    steps: float
    step_ms: float | None  # mean step time on the engine core's clock (engine ITL)
    rate: int
    inclusive: dict[str, int]
    self_: dict[str, int]
    ours: int  # self samples in engine_ext

    def ms_per_step(self, n: float) -> float:
        return 1000 * n / self.rate / self.steps

    @property
    def total_ms(self) -> float:
        return self.ms_per_step(self.samples)

    @property
    def ours_share(self) -> float | None:
        """The probes' own time per step in % of the step (an upper bound of what they
        can cost: work added to a step lengthens it by no more than itself)."""
        return 100 * self.ms_per_step(self.ours) / self.step_ms if self.step_ms else None


def is_ours(frames: list[str]) -> bool:
    """The innermost frame that is not the standard library's is specgw's engine
    extension: its own lines, and the ``contextlib`` / ``functools`` machinery its
    wrappers run on (and, where a wrapper enters the function it wraps through that
    machinery, the wrapped one's entry too: an upper bound of the probes' own time)."""
    for fr in reversed(frames):
        if _STDLIB not in fr:
            return OURS in fr
    return False


def kind_of(proc: str) -> str:
    return "engine" if proc.startswith(ENGINE_PROCESSES) else "front"


def load_run(src: Path, stem: str, steps: float, step_ms: float | None, rate: int
             ) -> dict[str, StepProfile]:
    """The run's profiles merged per process kind."""
    out: dict[str, StepProfile] = {}
    for f in sorted((src / "profiles").glob(f"{stem}.*.raw.gz")):
        m = _NAME.match(f.name)
        if not m or m["stem"] != stem:
            continue
        prof = out.setdefault(kind_of(m["proc"]),
                              StepProfile(0, steps, step_ms, rate, {}, {}, 0))
        for stack, n in read(f).items():
            frames = [frame_label(fr) for fr in stack[1:]]  # stack[0]: the thread
            prof.samples += n
            for fr in set(frames):
                prof.inclusive[fr] = prof.inclusive.get(fr, 0) + n
            if frames:
                prof.self_[frames[-1]] = prof.self_.get(frames[-1], 0) + n
                if is_ours(frames):
                    prof.ours += n
    return out


@dataclass
class Profiles:
    """Every profiled run of a run set: ``(variant, concurrency) -> [(rep, kind ->
    StepProfile)]``."""

    runs: RunSet
    rate: int
    cells: dict[tuple[str, int], list[tuple[int, dict[str, StepProfile]]]]

    @classmethod
    def load(cls, runs: RunSet) -> Profiles | None:
        rate = int(runs.meta.get("protocol", {}).get("py_spy") or 0)
        if not rate or not (runs.src / "profiles").is_dir():
            return None
        cells: dict = {}
        for (v, c), recs in runs.cells.items():
            for r in recs:
                timing = r.get("engine_timing") or {}
                if not timing.get("iterations"):
                    continue
                prof = load_run(runs.src, f"{v}_c{c}_r{r['rep']}", timing["iterations"],
                                timing.get("itl_mean_ms"), rate)
                if prof:
                    cells.setdefault((v, c), []).append((r["rep"], prof))
        return cls(runs, rate, cells) if cells else None

    def per_step(self, v: str, c: int, kind: str, pick) -> list[float]:
        """``pick(StepProfile) -> samples`` of each run, in ms per step."""
        return [p[kind].ms_per_step(pick(p[kind])) for _, p in self.cells.get((v, c), [])
                if kind in p]

    def median_ms(self, v: str, c: int, kind: str, pick) -> float | None:
        """Median over the runs of :meth:`per_step`."""
        vals = self.per_step(v, c, kind, pick)
        return statistics.median(vals) if vals else None

    def differences(self, a: str, b: str, c: int, kind: str, table: str, top: int = 10
                    ) -> list[tuple[str, float, float]]:
        """The functions whose median ms per step differs most between ``a`` and ``b``
        (``table``: ``inclusive`` or ``self_``): ``(function, a ms, b ms)``, largest
        absolute difference first."""
        names: set[str] = set()
        for v in (a, b):
            for _, p in self.cells.get((v, c), []):
                if kind in p:
                    names |= set(getattr(p[kind], table))
        rows = []
        for fn in names:
            ma = self.median_ms(a, c, kind, lambda sp, fn=fn: getattr(sp, table).get(fn, 0))
            mb = self.median_ms(b, c, kind, lambda sp, fn=fn: getattr(sp, table).get(fn, 0))
            if ma is not None and mb is not None:
                rows.append((fn, ma, mb))
        rows.sort(key=lambda r: (-abs(r[1] - r[2]), r[0]))  # ties by name: reproducible
        return rows[:top]
