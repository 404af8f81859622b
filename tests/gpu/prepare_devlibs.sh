#!/bin/sh
# Builds the GPU op test here (nvcc, no GPU needed) and copies it with the host libraries
# the device machine lacks into .devlibs/ (git-ignored through .git/info/exclude), so a GPU
# machine without our Debian -dev packages can run it:
#   sh tests/gpu/prepare_devlibs.sh [build-dir]
#   then on the GPU machine (carry .devlibs):
#   export LD_LIBRARY_PATH=$PWD/.devlibs:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
#   .devlibs/dit_gpu_op_test            # --quick skips the big shapes
set -e
BUILD=${1:-build-cuda}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j 2 --target dit_gpu_op_test
mkdir -p .devlibs
grep -qx '/.devlibs/' .git/info/exclude 2>/dev/null || echo '/.devlibs/' >> .git/info/exclude
cp "$BUILD/tests/dit_gpu_op_test" .devlibs/
# copy every non-system, non-CUDA library the binary links (libgomp, jansson, png, ...)
ldd "$BUILD/tests/dit_gpu_op_test" | awk '/=> \// {print $3}' |
  grep -E 'gomp|jansson|png|utf8proc|pcre2|openblas' | while read -r lib; do cp -L "$lib" .devlibs/; done
ls -la .devlibs
