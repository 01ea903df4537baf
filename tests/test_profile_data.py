"""py-spy profiles of a benchmark run, read per engine step (benchmarks/py_spy.py,
profile_data.py): a real py-spy records a real Python process whose time is split between
a function under an ``engine_ext/`` path and one elsewhere."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from benchmarks import py_spy
from benchmarks.profile_data import Profiles, frame_label, is_ours
from benchmarks.serve_compare_data import RunSet

RATE = 200


def _target(tmp: Path) -> subprocess.Popen:
    """A process whose main thread spends about a third of its time in
    ``engine_ext/probe.py`` and the rest in ``model/forward.py``."""
    for pkg, body in (("engine_ext", "def wrapper(fn):\n    spin(0.002)\n    return fn()\n"),
                      ("model", "def forward():\n    spin(0.004)\n")):
        (tmp / pkg).mkdir()
        (tmp / pkg / "__init__.py").write_text("")
        src = "import time\n\ndef spin(s):\n    t = time.perf_counter()\n" \
              "    while time.perf_counter() - t < s:\n        pass\n\n" + body
        (tmp / pkg / ("probe.py" if pkg == "engine_ext" else "forward.py")).write_text(src)
    main = textwrap.dedent("""
        import sys, time
        sys.path.insert(0, sys.argv[1])
        from engine_ext.probe import wrapper
        from model.forward import forward
        print("ready", flush=True)
        end = time.time() + 30
        while time.time() < end:
            wrapper(forward)
    """)
    p = subprocess.Popen([sys.executable, "-c", main, str(tmp)], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def test_frame_labels_and_what_counts_as_ours():
    assert frame_label("run (/x/lib/python3.12/site-packages/vllm/v1/engine/core.py:10)") \
        == "run (vllm/v1/engine/core.py)"
    assert frame_label("probed (/work/main/engine_ext/internals/install.py:99)") \
        == "probed (engine_ext/internals/install.py)"
    assert frame_label("__enter__ (/usr/lib/python3.12/contextlib.py:132)") \
        == "__enter__ (python3.12/contextlib.py)"
    # The device's pip --target tree and a checkout anywhere read the same.
    assert frame_label("step (/tmp/site/vllm/v1/engine/core.py:400)") \
        == "step (vllm/v1/engine/core.py)"
    assert frame_label("piece (/srv/x/engine_ext/probes/ledger.py:307)") \
        == "piece (engine_ext/probes/ledger.py)"
    ours = "probed (engine_ext/internals/install.py)"
    ctx = "__enter__ (python3.12/contextlib.py)"
    vllm = "execute_model (vllm/v1/worker/gpu_model_runner.py)"
    assert is_ours([vllm, ours])
    assert is_ours([vllm, ours, ctx])  # the wrapper's own contextlib machinery
    assert not is_ours([ours, vllm])  # the wrapped function's work is vLLM's
    assert not is_ours([ours, vllm, ctx])
    assert not is_ours([ctx])


def test_a_process_py_spy_cannot_read_is_a_clear_error_and_no_profile_is_left(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    python = _target(src)  # readable: its py-spy attaches and would write a profile
    other = subprocess.Popen(["sleep", "30"])  # no Python interpreter to find
    out = tmp_path / "profiles"
    try:
        with pytest.raises(RuntimeError, match="py-spy did not attach") as err, \
                py_spy.recording({"py": python.pid, "sleep": other.pid}, out, "x", RATE):
            raise AssertionError("the body ran without every profile being taken")
    finally:
        for proc in (python, other):
            proc.kill()
            proc.wait()
    # py-spy's own words, not its stack backtrace's last frames.
    assert "Error:" in str(err.value) and "Stack backtrace" not in str(err.value), err.value
    assert not list(out.iterdir())  # neither the readable process's profile nor a log


def test_a_recorded_run_read_per_engine_step(tmp_path):
    src, out = tmp_path / "src", tmp_path / "set"
    src.mkdir()
    target = _target(src)
    try:
        stem = "specgw_c1_r0"
        with py_spy.recording({f"VLLM::EngineCore-{target.pid}": target.pid}, out / "profiles",
                              stem, RATE) as paths:
            time.sleep(2.0)
    finally:
        target.kill()
        target.wait()
    prof_file = paths[f"VLLM::EngineCore-{target.pid}"]
    assert prof_file.exists()
    stacks = py_spy.read(prof_file)
    total = sum(stacks.values())
    assert total > RATE  # about 2 s of a busy thread at RATE Hz
    assert all(s[0].startswith("thread (") for s in stacks)

    steps = 50.0
    (out / "runs").mkdir()
    (out / "runs" / f"{stem}.json").write_text(json.dumps({
        "variant": "specgw", "concurrency": 1, "rep": 0, "bench": {},
        "engine_timing": {"iterations": steps, "itl_mean_ms": 40.0}}))
    (out / "servers.json").write_text(json.dumps({"protocol": {"py_spy": RATE}}))
    pr = Profiles.load(RunSet.load(out, "t"))
    (rep, kinds), = pr.cells[("specgw", 1)]
    eng = kinds["engine"]
    assert rep == 0 and eng.samples == total
    assert eng.total_ms == pytest.approx(1000 * total / RATE / steps)
    # About a third of the busy time is in engine_ext/probe.py (2 of every 6 ms).
    assert 0.15 < eng.ours / eng.samples < 0.55, eng.ours / eng.samples
    assert eng.ours_share == pytest.approx(100 * eng.ms_per_step(eng.ours) / 40.0)
    fwd = [fn for fn in eng.self_ if fn.startswith("spin (model/")]
    assert fwd and eng.self_[fwd[0]] > eng.ours
    assert "front" not in kinds
