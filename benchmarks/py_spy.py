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


@contextlib.contextmanager
def recording(procs: dict[str, int], out_dir: Path, stem: str, rate: int
              ) -> Iterator[dict[str, Path]]:
    """Record every ``name -> pid`` of ``procs`` for the body's duration; yields the
    paths the gzipped profiles will have (``out_dir/stem.name.raw.gz``), written on exit."""
    exe = binary()
    if exe is None:
        raise SystemExit("py-spy not found: pip install py-spy (or set SPECGW_PY_SPY)")
    out_dir.mkdir(parents=True, exist_ok=True)
    running: list[tuple[subprocess.Popen, Path, Path]] = []
    paths = {}
    for name, pid in procs.items():
        raw = out_dir / f"{stem}.{name}.raw"
        paths[name] = raw.with_suffix(".raw.gz")
        p = subprocess.Popen([exe, "record", "--pid", str(pid), "--rate", str(rate),
                              "--format", "raw", "--nonblocking", "--threads", "--function",
                              "--full-filenames",
                              "--output", str(raw)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        running.append((p, raw, paths[name]))
    try:
        yield paths
    finally:
        for p, _, _ in running:
            p.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
        for p, raw, gz in running:
            try:
                _, err = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
            if raw.exists():
                gz.write_bytes(gzip.compress(raw.read_bytes()))
                raw.unlink()
            else:
                print(f"py-spy wrote nothing for {raw.name}: "
                      f"{err.decode(errors='replace')[-300:]}", flush=True)


def read(path: Path) -> dict[tuple[str, ...], int]:
    """A gzipped raw profile as ``{stack (thread first, leaf last): samples}``."""
    out: dict[tuple[str, ...], int] = {}
    for line in gzip.decompress(path.read_bytes()).decode(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            key = tuple(stack.split(";"))
            out[key] = out.get(key, 0) + int(n)
    return out
