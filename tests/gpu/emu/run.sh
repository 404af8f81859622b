#!/usr/bin/env bash
# Runs the fused/vector kernels of k_fused.cu and k_vec.cu on the CPU, without a GPU: each
# CUDA thread of a block is a std::thread, __syncthreads and __shfl_xor_sync a block barrier
# (emu.h). Checks their index math and reductions against double-precision references.
#   bash tests/gpu/emu/run.sh        (needs g++ with C++20 and the CUDA headers)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$repo" "$tmp" <<'PY'
import re, sys
repo, tmp = sys.argv[1], sys.argv[2]
cu = repo + "/src/backend/cuda/"
src = open(cu + "k_fused.cu").read()
body = src[:src.index("template <typename T>\nstatic cudaError_t launch_team")]
open(tmp + "/kfused.inc", "w").write(re.sub(r'#include "backend/cuda/[a-z_]+\.cuh?"\n', "", body))
v = open(cu + "cu_vec.cuh").read()
open(tmp + "/cuvec.inc", "w").write(v.replace('#include "backend/cuda/cu_common.cuh"\n', ""))
src = open(cu + "k_vec.cu").read()
body = "".join(p for p in re.split(r'(extern "C" cudaError_t[\s\S]*?\n}\n)', src) if not p.startswith('extern "C"'))
open(tmp + "/kvec.inc", "w").write(re.sub(r'#include "backend/cuda/[a-z_]+\.cuh?"\n', "", body))
PY
cuda=${CUDA_HOME:-/usr/local/cuda}
g++ -std=c++20 -O1 -pthread -w -I"$tmp" -I"$here" -I"$repo/src" -I"$repo/include" -I"$cuda/include" \
  "$here/main.cpp" -o "$tmp/emu"
"$tmp/emu"
