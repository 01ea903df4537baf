#!/bin/bash
# One H200 session of the benchmark (issue: piecewise vs eager drafter vs no speculation,
# direct vs gateway), in four calls on one warm machine. The machine has torch 2.11 and
# no vLLM or network; what it lacks is carried as one xz archive (vLLM 0.26.0 trimmed to
# what a dense Llama on Hopper uses + its missing dependencies, unpacked into a site dir),
# made here by benchmarks/gpu_pack.sh and split in two halves, .gpu/a and .gpu/b.
#
#   1. gpu_session.sh stash      (carry .gpu/a) first half -> /root/stash; starts the model
#                                pair build (models/build_pair.py --preset h200-150m) in the
#                                background: it needs only torch, which the machine has
#   2. gpu_session.sh install    (carry .gpu/b) unpack both halves into /tmp/site, install
#                                specgw's entry point (the vLLM plugin), check the imports
#   3. gpu_session.sh bench JOBS [SECONDS]   wait for the pair, run gpu_bench.py jobs; no
#                                new job starts after SECONDS (default 430)
#   4. gpu_session.sh bench JOBS [SECONDS]   again for the rest (finished jobs are skipped)
#
# Results accumulate in /root/results and come back as $OUT/results.tgz after every job.
set -uo pipefail
STASH=/root/stash SITE=/tmp/site RES=/root/results
PAIR=${PAIR:-/root/pair-150m}
T0=$(date +%s)
case "${1:-}" in
stash)
  mkdir -p "$STASH" && cp .gpu/a/part.* "$STASH"/ && ls -la "$STASH"
  if [ ! -f "$PAIR/build_info.json" ] && ! pgrep -f build_pair.py >/dev/null; then
    # A private copy: the working tree is replaced by the next call's.
    mkdir -p /root/buildsrc "$PAIR" && cp models/build_pair.py models/tiny-code-llama/target/tokenizer.json /root/buildsrc/
    RAYON_NUM_THREADS=16 PYTHONUNBUFFERED=1 setsid nohup python3 /root/buildsrc/build_pair.py \
      --preset h200-150m --out "$PAIR" --tokenizer /root/buildsrc/tokenizer.json \
      >/root/build_pair.log 2>&1 </dev/null &
  fi
  sleep 25; tail -c 800 /root/build_pair.log | tr '\r' '\n' | tail -4
  nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv
  ;;
install)
  mkdir -p "$SITE"
  if [ ! -f "$SITE/.unpacked" ]; then
    cat "$STASH"/part.* .gpu/b/part.* | xz -d -T16 | tar x -C "$SITE" && touch "$SITE/.unpacked"
  fi
  # Only for the entry point metadata (vllm.general_plugins -> engine_ext.plugin:register);
  # the code itself is imported from the working tree (first on PYTHONPATH).
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target "$SITE" . 2>&1 \
    | grep -v WARN | tail -3
  export PYTHONPATH=$PWD:$SITE
  python3 -c "import vllm, torch, aiohttp, fastapi, uvicorn, engine_ext.plugin, gateway.app
from importlib.metadata import entry_points
print('vllm', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(),
      [e.value for e in entry_points(group='vllm.general_plugins')])" || exit 4
  tail -c 800 /root/build_pair.log | tr '\r' '\n' | tail -4
  ;;
bench)
  export PYTHONPATH=$PWD:$SITE PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
  while [ ! -f "$PAIR/build_info.json" ]; do
    if ! pgrep -f build_pair.py >/dev/null; then
      echo "PAIR BUILD FAILED"; tail -c 3000 /root/build_pair.log; exit 5
    fi
    sleep 5
  done
  echo "pair ready after $(( $(date +%s) - T0 ))s of waiting"; tail -c 1500 "$PAIR/build_info.json"
  mkdir -p "$RES" && cp "$PAIR/build_info.json" "$RES/pair_build_info.json"
  nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
  python3 benchmarks/gpu_bench.py --pair "$PAIR" --out "$RES" --jobs "$2" \
    --deadline $(( T0 + ${3:-430} )) --archive "$OUT/results.tgz" --timeout 240 ${BENCH_ARGS:-}
  ;;
*)
  echo "usage: $0 stash|install|bench JOBS [SECONDS]"; exit 2
  ;;
esac
