#!/bin/bash
# Device side of the H200 run (see shared/gpu/README.md for the carrying recipe):
# vLLM 0.26.0 parts stashed in /root/stash by earlier calls, deps wheels carried in
# .gpu/deps. Installs everything into /tmp/site and runs benchmarks/gpu_probes.py.
set -uo pipefail
S=/root/stash
mkdir -p /tmp/site
if [ ! -f /tmp/site/.vllm ]; then
  ls $S/part.* >/dev/null 2>&1 || { echo "NO PARTS"; exit 3; }
  cat $S/part.* | xz -d -T8 | tar x -C /tmp/site && touch /tmp/site/.vllm
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .gpu/deps/*.whl 2>&1 | grep -v WARN | tail -3
# Our package (entry point vllm.general_plugins -> engine_ext.plugin:register).
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site . \
  2>&1 | grep -v WARN | tail -3
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
export SPECGW_BUNDLED_DIR=$PWD/models/tiny-code-llama
python3 -c "import vllm, torch, engine_ext.plugin; print('vllm', vllm.__version__, torch.cuda.get_device_name())" || exit 4
python3 -c "from importlib.metadata import entry_points; print([e.value for e in entry_points(group='vllm.general_plugins')])"
python3 "benchmarks/${BENCH:-gpu_probes.py}" --out "$OUT" "$@"
