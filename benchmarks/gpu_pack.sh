#!/bin/bash
# Build what benchmarks/gpu_session.sh carries to the H200 (run here, needs PyPI):
# vLLM 0.26.0 (the newest release on torch 2.11, the device's torch) without what a dense
# Llama on Hopper never loads (FA2, the MoE and Blackwell kernels, vllm-rs, the other
# Pythons' extensions), plus the py3.12 dependencies the device lacks, unpacked into one
# site tree, as one xz archive (~91 MB) split into three parts: .gpu/a/part.00,
# .gpu/b/part.01, .gpu/c/part.02 (+ .gpu/c/site.sha256). Each part travels alone with the
# working tree (~26 MB with the bundled model pair), and the two must stay under the
# 64 MiB a call carries: the split checks that. Wheels added later travel as wheels in
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
# SageMaker hooks; pure Python, ~150 KB.
EXTRA=(model-hosting-container-standards==0.1.16 jmespath supervisor)
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
rm -rf $G/a $G/b $G/c && mkdir -p $G/a $G/b $G/c
third=$(( ($(stat -c %s $G/site.tar.xz) + 2) / 3 ))
# The working tree travels with every part (untracked files too, unless ignored).
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- | tail -1 | cut -f1)
if (( tree + third + (1 << 20) > 64 << 20 )); then
  echo "a part ($third B) + the working tree ($tree B) exceed the 64 MiB a call carries" >&2
  exit 3
fi
split -b "$third" -d $G/site.tar.xz $G/part.
mv $G/part.00 $G/a/ && mv $G/part.01 $G/b/ && mv $G/part.02 $G/c/ && cp -r $G/extra $G/c/extra
sha256sum < $G/site.tar.xz | cut -d' ' -f1 > $G/c/site.sha256
du -b $G/a/* $G/b/* $G/c/* $G/c/extra/*; echo "working tree: $tree B"
