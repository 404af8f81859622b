#!/bin/sh
# `make run`: generate an image with the model shipped in the repository and say where it
# is. The shipped model (models/shapes-128) is a small trained model of the Z-Image family
# (Qwen3-architecture text encoder, Z-Image transformer, AutoencoderKL) that draws scenes of
# colored circles, squares and triangles from captions; its ditrun.json gives the size
# (128x128), the steps and a sample prompt, so none need saying. See
# models/shapes-128/README.md for what it can draw and how it was trained.
#   PROMPT="..." SEED=N OUT=path MODEL=dir make run
set -e
BUILD=${1:-build}
MODEL=${MODEL:-models/shapes-128}
SEED=${SEED:-42}
mkdir -p out
OUT=${OUT:-out/shapes-128.png}
if [ -n "${PROMPT:-}" ]; then
  "$BUILD/ditrun" generate -m "$MODEL" -p "$PROMPT" --seed "$SEED" -o "$OUT" --overwrite --progress
else
  "$BUILD/ditrun" generate -m "$MODEL" --seed "$SEED" -o "$OUT" --overwrite --progress
fi
echo "image written to $OUT"
echo "  try another prompt: PROMPT=\"three green triangles on a black background\" make run"
