"""Shared fixtures: one real gateway (``specgw serve`` with the bundled model on the vLLM
CPU engine) on 127.0.0.1 for the whole session, plus helpers to read its metrics."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
LOG_DIR = ROOT / ".pytest-logs"
START_TIMEOUT_S = float(os.environ.get("SPECGW_TEST_START_TIMEOUT", "420"))
MODEL = "tiny-code-llama"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_ok(url: str, timeout: float, proc: subprocess.Popen | None = None,
                  what: str = "server") -> None:
    """Poll ``url`` until it answers 200; fail early if ``proc`` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited rc={proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{what} not ready after {timeout}s")


class Server:
    """``specgw serve`` by default; ``command`` runs another server (vLLM's own)."""

    def __init__(self, name: str, args: list[str], env: dict[str, str] | None = None,
                 command: list[str] | None = None, ready_path: str = "/ready"):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ready_path = ready_path
        LOG_DIR.mkdir(exist_ok=True)
        self.log_path = LOG_DIR / f"{name}.log"
        self._log = self.log_path.open("w")
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        command = command or [sys.executable, "-m", "gateway.cli", "serve"]
        self.proc = subprocess.Popen(
            [*command, *args, "--port", str(self.port)],  # vllm serve: model first
            cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT, env=full_env,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        try:
            wait_until_ok(f"{self.url}{self.ready_path}", timeout, self.proc, "server")
        except (RuntimeError, TimeoutError) as exc:
            raise type(exc)(f"{exc}:\n{self.tail()}") from None

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    # The default poll interval: /metrics refreshes the probes at scrape time anyway, and
    # every collective_rpc keeps vLLM's CPU worker busy-polling its shared-memory queue for
    # 1 s afterwards (a whole core at a 1 s interval, starving the TP=2 test's rank 0).
    srv = Server("gateway", ["--log-format", "text", "--poll-interval", "5"])
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def base_url(server: Server) -> str:
    return server.url


@pytest.fixture(scope="session")
def vllm_serve() -> Iterator[Server]:
    """A stock ``vllm serve`` (vLLM's own OpenAI server, not specgw's) with the plugin
    turned on exactly as the README says, serving the bundled pair."""
    from engine_ext.vllm_serve import plugin_serve_args, plugin_serve_env, serve_command

    srv = Server("vllm-serve", plugin_serve_args(), plugin_serve_env(),
                 command=serve_command(), ready_path="/health")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def client(base_url: str):
    from openai import OpenAI

    return OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=120)


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def scrape(base_url: str) -> dict[tuple[str, frozenset], float]:
    """Parse /metrics into {(name, labels): value}."""
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    out: dict[tuple[str, frozenset], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        mt = _SAMPLE.match(line)
        if not mt:
            continue
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', mt.group(2) or ""))
        out[(mt.group(1), labels)] = float(mt.group(3))
    return out


def metric_sum(samples: dict, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))
