#!/bin/bash
# The one device script of every GPU benchmark (H200: torch 2.11, no vLLM, no network).
# What the machine lacks is carried as one xz archive made here by benchmarks/gpu_pack.sh
# (vLLM 0.26.0 trimmed to a dense Llama on Hopper + its missing py3.12 dependencies, one
# site tree), split in parts, .gpu/s1, .gpu/s2, ... and .gpu/c: one part + the working
# tree (with the bundled pair) stay under the 64 MiB a call carries, two would not.
# One call per step, one after another on one warm machine (it keeps files between calls;
# if it went cold, start again at `stash`):
#
#   gpu_session.sh stash          (carry .gpu/s1), again with .gpu/s2, ...: the carried
#                                 part -> /root/stash. With PAIR_PRESET=h200-150m the first
#                                 call also starts building that model pair
#                                 (models/build_pair.py, torch only) in the background,
#                                 into $PAIR (default /root/pair-PRESET, where `build
#                                 PRESET` waits for it and hands it back)
#   gpu_session.sh install        (carry .gpu/c) the last part: check the parts against the
#                                 archive's sha256 (a missing stash call is named, not
#                                 unpacked), unpack into /tmp/site, install
#                                 the wheels in .gpu/c/extra (gpu_pack.sh extra); install
#                                 specgw's metadata (vllm.general_plugins entry point) and
#                                 tests/seed_bug_plugin if present (pip --no-deps --target);
#                                 check the imports
#   gpu_session.sh job SCRIPT [ARGS]   run one benchmark script (python3 SCRIPT ARGS) with
#                                 PYTHONPATH=$PWD:/tmp/site, VLLM_USE_FLASHINFER_SAMPLER=0,
#                                 OUT=/root/results/<script name> (kept across calls, so a
#                                 resumable script picks up where the last call stopped);
#                                 killed at JOB_SECONDS (default 540), then the results
#                                 are copied to the call's $OUT, which comes back. The
#                                 device returns at most 8 files (16 MiB each, 2 folders
#                                 down): a results dir with more files, or deeper, comes
#                                 back as ONE archive instead, $OUT/<name>.tar.gz (split
#                                 into <name>.tar.gz.partNN of 15 MiB when larger than
#                                 that): `cat <name>.tar.gz* | tar xz` unpacks <name>/
#
#   gpu_session.sh build PRESET   build a model pair (models/build_pair.py, torch only: no
#                                 stash needed) in the background into /root/pair-PRESET,
#                                 wait for it at most BUILD_WAIT_S (default 540), and once
#                                 it is done hand it back as $OUT/pair-PRESET.tar.partNN
#                                 (`cat pair-PRESET.tar.part* | tar x`); call again to
#                                 keep waiting (the build survives the call)
#
# Examples: `job benchmarks/gpu_bench.py --pair /root/pair-150m --jobs no-spec:0,...`,
#           `job benchmarks/serve_compare.py --concurrency 1,16,64,128 --reps 5`.
set -uo pipefail
STASH=/root/stash SITE=/tmp/site
# A build started by stash goes where `build PRESET` looks for it.
PAIR=${PAIR:-/root/pair-${PAIR_PRESET:-150m}}

start_build() {  # PRESET OUT_DIR LOG: models/build_pair.py in the background
  # A private copy: the working tree is replaced by the next call's.
  mkdir -p /root/buildsrc "$2" && cp models/build_pair.py models/tiny-code-llama/target/tokenizer.json /root/buildsrc/
  RAYON_NUM_THREADS=16 PYTHONUNBUFFERED=1 setsid nohup python3 /root/buildsrc/build_pair.py \
    --preset "$1" --out "$2" --tokenizer /root/buildsrc/tokenizer.json >"$3" 2>&1 </dev/null &
}

building() {  # PRESET: its build is running (anchored: h200-code is not h200-code-units)
  pgrep -f "build_pair.py --preset $1( |$)" >/dev/null
}

case "${1:-}" in
stash)
  compgen -G ".gpu/*/part.*" >/dev/null || { echo "stash: carry one of .gpu/s*"; exit 2; }
  mkdir -p "$STASH" && cp .gpu/*/part.* "$STASH"/ && ls -la "$STASH"
  if [ -n "${PAIR_PRESET:-}" ] && [ ! -f "$PAIR/build_info.json" ] \
      && ! pgrep -f build_pair.py >/dev/null; then
    # The log `build PRESET` reads and hands back: one build, one log, whichever started it.
    start_build "$PAIR_PRESET" "$PAIR" "/root/build-$PAIR_PRESET.log"
    sleep 25; tail -c 800 "/root/build-$PAIR_PRESET.log" | tr '\r' '\n' | tail -4
  fi
  nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv
  ;;
build)
  preset=${2:?usage: $0 build PRESET}; dir=/root/pair-$preset; log=/root/build-$preset.log
  out=${OUT:-/tmp/out}; mkdir -p "$out"
  # build_info.json gets build_seconds only at the very end (after the head is saved).
  built() { grep -q '"build_seconds"' "$dir/build_info.json" 2>/dev/null; }
  if ! built && ! building "$preset"; then
    start_build "$preset" "$dir" "$log"
  fi
  nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv,noheader
  end=$((SECONDS + ${BUILD_WAIT_S:-540}))
  while building "$preset" && [ $SECONDS -lt $end ]; do
    sleep 10
  done
  grep -E "INFO|WARN|Error|error" "$log" | cut -c1-300 | tail -12
  if building "$preset"; then
    echo "build $preset running"
  elif built; then
    # In 15 MiB parts: the device hands back no file over 16 MiB (a pair is ~25 MB).
    tar cf - -C /root "pair-$preset" | split -b 15M -d - "$out/pair-$preset.tar.part"
    cp "$log" "$out/"
    echo "build $preset done"
  else
    cp "$log" "$out/"; echo "build $preset FAILED"; exit 5
  fi
  ;;
install)
  mkdir -p "$SITE"
  if [ ! -f "$SITE/.unpacked" ]; then
    mkdir -p "$STASH" && cp .gpu/c/part.* "$STASH"/
    if [ "$(cat "$STASH"/part.* | sha256sum | cut -d' ' -f1)" != "$(cat .gpu/c/site.sha256)" ]; then
      echo "install: the stash is not the whole archive (has: $(ls "$STASH" | xargs)); stash every .gpu/s* first"
      exit 3
    fi
    cat "$STASH"/part.* | xz -d -T16 | tar x -C "$SITE" && touch "$SITE/.unpacked"
  fi
  # Metadata only (entry points resolve by module name); the code itself is imported from
  # the working tree, first on PYTHONPATH.
  for pkg in . tests/seed_bug_plugin; do
    [ -f "$pkg/pyproject.toml" ] || [ -f "$pkg/setup.py" ] || continue
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --target "$SITE" \
      --upgrade "$pkg" 2>&1 | grep -v WARN | tail -3
  done
  # After the packages: `pip install --target --upgrade` replaces a top-level folder
  # whole, and the packages' bin/ (specgw's script) replaced the extras' (py-spy, which
  # benchmarks/py_spy.py looks for in $SITE/bin): the 2026-12-07 device run lost it so.
  if compgen -G ".gpu/c/extra/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" \
      .gpu/c/extra/*.whl 2>&1 | grep -v WARN | tail -3
    if compgen -G ".gpu/c/extra/py_spy-*.whl" >/dev/null && [ ! -x "$SITE/bin/py-spy" ]; then
      echo "install: py-spy is not in $SITE/bin"; exit 4
    fi
  fi
  export PYTHONPATH=$PWD:$SITE
  python3 -c "import vllm, torch, aiohttp, fastapi, uvicorn, engine_ext.plugin, gateway.app
import model_hosting_container_standards, vllm.entrypoints.openai.api_server
from vllm.benchmarks.serve import add_cli_args
from importlib.metadata import entry_points
print('vllm', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(),
      [e.value for e in entry_points(group='vllm.general_plugins')])" || exit 4
  # `if`, not `[ ] && tail`: with no pair build the test would be the exit status and
  # break `install && job ...`.
  if compgen -G "/root/build-*.log" >/dev/null; then
    tail -c 800 /root/build-*.log | tr '\r' '\n' | tail -4
  fi
  ;;
job)
  script=${2:?usage: $0 job SCRIPT [ARGS]}; shift 2
  name=$(basename "$script" .py)
  export PYTHONPATH=$PWD:$SITE PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
  export DEVICE_OUT=${OUT:-/tmp/out} OUT=/root/results/$name
  mkdir -p "$OUT" "$DEVICE_OUT"
  if [[ " $* " == *" $PAIR "* ]]; then  # a job on the built pair waits for its build
    while [ ! -f "$PAIR/build_info.json" ]; do
      pgrep -f build_pair.py >/dev/null || { echo "PAIR BUILD FAILED"; tail -c 3000 /root/build-*.log; exit 5; }
      sleep 5
    done
    cp "$PAIR/build_info.json" "$OUT/pair_build_info.json"
  fi
  nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
  # SIGINT first: the scripts stop their servers (process groups) and write what they have.
  mod=${script%.py}; mod=${mod//\//.}  # benchmarks/x.py -> benchmarks.x (package imports)
  timeout -s INT -k 20 "${JOB_SECONDS:-540}" python3 -m "$mod" "$@"
  rc=$?
  nfiles=$(find "$OUT" -type f | wc -l)
  if [ "$nfiles" -gt 8 ] || [ -n "$(find "$OUT" -mindepth 3 -type f -print -quit)" ]; then
    # More than the device hands back (8 files, 2 folders down): one archive instead.
    tar czf "/root/results/$name.tar.gz" -C /root/results "$name"
    if [ "$(stat -c %s "/root/results/$name.tar.gz")" -gt $((16 * 1024 * 1024)) ]; then
      split -b 15M -d "/root/results/$name.tar.gz" "$DEVICE_OUT/$name.tar.gz.part"
    else
      cp "/root/results/$name.tar.gz" "$DEVICE_OUT/"
    fi
    rm -f "/root/results/$name.tar.gz"
    echo "$nfiles files: archived"; ls -la "$DEVICE_OUT"
  else
    cp -r "$OUT" "$DEVICE_OUT/" && du -sh "$DEVICE_OUT/$name"
  fi
  echo "job $name rc=$rc"
  exit $rc
  ;;
*)
  echo "usage: $0 stash|install|job SCRIPT [ARGS]"; exit 2
  ;;
esac
