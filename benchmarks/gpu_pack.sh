#!/bin/bash
# Build what benchmarks/gpu_session.sh carries to the H200 (run here, needs PyPI):
# vLLM 0.26.0 (the newest release on torch 2.11, the device's torch) without what a dense
# Llama on Hopper never loads (FA2, the MoE and Blackwell kernels, vllm-rs, the other
# Pythons' extensions), plus the py3.12 dependencies the device lacks, unpacked into one
# site tree, as one xz archive (~91 MB) split into as many parts as it takes for each
# to travel alone with the working tree (40 MB with the bundled pair and docs/) under the
# 64 MiB a call carries: .gpu/s1, .gpu/s2, ... for the stash calls and .gpu/c (the last
# part, + .gpu/c/site.sha256) for the install call. Wheels added later travel as wheels in
# .gpu/c/extra, with the last part (`gpu_pack.sh extra` adds them to an existing pack
# without rebuilding the archive; `gpu_pack.sh split` re-splits an existing
# .gpu/site.tar.xz; `gpu_session.sh install` installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
G=.gpu; mkdir -p $G/wheel $G/deps
PLAT=(--python-version 3.12 --implementation cp --only-binary=:all: --platform any
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
# vLLM's CLI and OpenAI server (`vllm serve`, for benchmarks/serve_compare.py) import these
# SageMaker hooks; pure Python, ~150 KB. py-spy (3 MB, one static binary): serve_compare
# --py-spy samples the servers' processes.
EXTRA=(model-hosting-container-standards==0.1.16 jmespath supervisor py-spy==0.4.3)
if [ "${1:-}" != split ]; then  # split: no downloads, the archive and $G/extra exist
rm -rf $G/extra && mkdir -p $G/extra
for d in "${EXTRA[@]}"; do pip download -q --no-deps "${PLAT[@]}" -d $G/extra "$d"; done
if [ "${1:-}" = extra ]; then
  mkdir -p $G/c && rm -rf $G/c/extra && cp -r $G/extra $G/c/extra && du -b $G/c/extra/*
  exit 0
fi
pip download -q --no-deps vllm==0.26.0 -d $G/wheel
DEPS=(pydantic==2.12.5 pydantic-core==2.41.5 annotated-types typing-inspection msgspec pyzmq
      cbor2 blake3 cachetools gguf compressed-tensors==0.17.0 loguru depyf==0.20.0 astor dill
      partial-json-parser "openai<3" jiter distro sniffio "fastapi<0.137" starlette uvicorn
      lm-format-enforcer==0.11.3 interegular "llguidance<1.8" outlines_core==0.2.14 lark==1.2.2
      xgrammar==0.2.8 apache-tvm-ffi==0.1.11 mistral_common pycountry pydantic-extra-types
      jsonschema referencing rpds-py jsonschema-specifications watchfiles python-json-logger
      pybase64 ijson setproctitle openai-harmony prometheus-fastapi-instrumentator diskcache)
for d in "${DEPS[@]}"; do pip download -q --no-deps "${PLAT[@]}" -d $G/deps "$d"; done
rm -rf $G/bundle && mkdir -p $G/bundle
pip install -q --no-deps --no-compile --target $G/bundle "${PLAT[@]}" $G/deps/*.whl
rm -rf $G/bundle/bin
(cd $G/bundle && unzip -q ../wheel/vllm-0.26.0-*.whl)
rm -rf $G/bundle/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so $G/bundle/vllm/vllm-rs \
  $G/bundle/vllm/_moe_C_stable_libtorch.abi3.so $G/bundle/vllm/third_party/fmha_sm100 \
  $G/bundle/vllm/third_party/deep_gemm/include
find $G/bundle/vllm -name '*cpython-31[0134]*' -delete
tar c -C $G/bundle . | xz -9 -T0 > $G/site.tar.xz
fi
# The working tree travels with every call, so a stash call's part may take what the
# 64 MiB a call carries leaves, less SLACK_MIB (default 2.5) of slack for what a session
# adds to the tree after packing (a call over 64 MiB is refused); the last part, carried
# with extra/ by the install call, takes what is left. Fewer calls: each one is device time.
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- | tail -1 | cut -f1)
size=$(stat -c %s $G/site.tar.xz)
extra=$(du -cb $G/extra | tail -1 | cut -f1)
room=$(( (64 << 20) - $(python3 -c "print(int(${SLACK_MIB:-2.5} * 2**20))") - tree ))
(( room > extra )) || { echo "the working tree ($tree B) leaves no room in a call" >&2; exit 3; }
rm -rf $G/s[0-9]* $G/a $G/b $G/c $G/part.* && mkdir -p $G/c
split -b "$room" -d -a 2 $G/site.tar.xz $G/part.
parts=($G/part.*)
last=${parts[-1]}
if (( $(stat -c %s "$last") + extra > room )); then  # the install call: its part + extra/
  split -n 2 -d -a 1 "$last" "$last." && rm "$last"
  parts=($G/part.*)
fi
n=${#parts[@]}
for i in $(seq 1 $((n - 1))); do mkdir -p $G/s$i && mv "${parts[i-1]}" $G/s$i/; done
mv "${parts[n-1]}" $G/c/ && cp -r $G/extra $G/c/extra
sha256sum < $G/site.tar.xz | cut -d' ' -f1 > $G/c/site.sha256
du -b $G/*/part.* $G/c/extra/*
echo "working tree: $tree B; $n parts: stash with $(ls -d $G/s[0-9]* | xargs), one call each, then install with $G/c"
