"""Sample a server's processes with py-spy while one benchmark run goes on.

Why: two engine cores doing the same engine steps at different speeds (specgw serve's and
vllm serve's at c=16, ``docs/benchmarks.md``) differ in some Python they run; a sampling
profiler of both, under the same load, names it. py-spy reads the target's memory from
outside (``--nonblocking``: it never stops the target), so the profiled run is the run
itself, and its own CPU is the load client's (it inherits the client's CPUs under
``serve_compare --pin``).

Each process gives one ``--format raw`` file (collapsed stacks: ``frame;frame;... count``,
one thread name first, functions aggregated by their first line, full file names),
gzipped.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def binary() -> str | None:
    """py-spy from PATH, or next to this interpreter's scripts, or where
    ``pip install --target`` put it on the device (``$SPECGW_PY_SPY`` overrides)."""
    for cand in (os.environ.get("SPECGW_PY_SPY"), shutil.which("py-spy"),
                 str(Path(sys.executable).parent / "py-spy"), "/tmp/site/bin/py-spy"):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    return None


# py-spy prints this once it has attached and is sampling; a Ctrl-C before then can leave
# no file and no word why (a CI run: nothing on stderr 2 s after the start). py-spy 0.4.3
# prints nothing at all, on either stream, while its stdout is /dev/null, so both go to
# one log.
SAMPLING = "Sampling process"
ATTACH_TIMEOUT_S = 60.0


def _said(log: Path) -> str:
    """What py-spy said, without its stack backtrace (RUST_BACKTRACE=1 appends one, and
    its tail would hide the error line itself)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return text.split("Stack backtrace:")[0].strip()[-300:]


def _wait_attached(p: subprocess.Popen, log: Path, deadline: float) -> None:
    while SAMPLING not in log.read_text(errors="replace"):
        if p.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"py-spy did not attach (exit {p.poll()}): {_said(log)}")
        time.sleep(0.05)


@contextlib.contextmanager
def recording(procs: dict[str, int], out_dir: Path, stem: str, rate: int,
              attach_timeout_s: float = ATTACH_TIMEOUT_S) -> Iterator[dict[str, Path]]:
    """Record every ``name -> pid`` of ``procs`` for the body's duration; yields the
    paths the gzipped profiles will have (``out_dir/stem.name.raw.gz``), written on exit.
    The body starts once every py-spy samples, so the profile covers all of it; when one
    does not attach, the body does not run and no profile is written (a partial set would
    read as a profile of the body)."""
    exe = binary()
    if exe is None:
        raise SystemExit("py-spy not found: pip install py-spy (or set SPECGW_PY_SPY)")
    out_dir.mkdir(parents=True, exist_ok=True)
    running: list[tuple[subprocess.Popen, Path, Path, Path]] = []
    logs: list[Path] = []
    paths = {}
    attached = False
    try:
        for name, pid in procs.items():
            raw = out_dir / f"{stem}.{name}.raw"
            log = raw.with_suffix(".log")
            logs.append(log)
            paths[name] = raw.with_suffix(".raw.gz")
            with log.open("wb") as err:
                p = subprocess.Popen([exe, "record", "--pid", str(pid), "--rate", str(rate),
                                      "--format", "raw", "--nonblocking", "--threads",
                                      "--function", "--full-filenames", "--output", str(raw)],
                                     stdout=err, stderr=err)
            running.append((p, raw, log, paths[name]))
        deadline = time.monotonic() + attach_timeout_s  # one wait for all, not one each
        for p, _, log, _ in running:
            _wait_attached(p, log, deadline)
        attached = True
        yield paths
    finally:
        for p, *_ in running:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
        for p, raw, log, gz in running:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if not attached:
                raw.unlink(missing_ok=True)
            elif raw.exists():
                gz.write_bytes(gzip.compress(raw.read_bytes()))
                raw.unlink()
            else:
                print(f"py-spy wrote nothing for {raw.name} (exit {p.returncode}): "
                      f"{_said(log)}", flush=True)
        for log in logs:
            log.unlink(missing_ok=True)


def read(path: Path) -> dict[tuple[str, ...], int]:
    """A gzipped raw profile as ``{stack (thread first, leaf last): samples}``."""
    out: dict[tuple[str, ...], int] = {}
    for line in gzip.decompress(path.read_bytes()).decode(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            key = tuple(stack.split(";"))
            out[key] = out.get(key, 0) + int(n)
    return out
