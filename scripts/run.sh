#!/bin/sh
# `make run`: generate an image with the model shipped in the repository and say where it
# is. The shipped model (models/shapes-128) is a small trained model of the Z-Image family
# (Qwen3-architecture text encoder, Z-Image transformer, AutoencoderKL) that draws scenes of
# colored circles, squares and triangles from captions such as the default prompt below;
# see models/shapes-128/README.md for what it can draw and how it was trained.
set -e
BUILD=${1:-build}
MODEL=${MODEL:-models/shapes-128}
PROMPT=${PROMPT:-"a blue square above a white circle on a purple background"}
SEED=${SEED:-42}
mkdir -p out
OUT=${OUT:-out/shapes-128.png}
"$BUILD/ditrun" generate -m "$MODEL" -p "$PROMPT" -W 128 -H 128 --steps 8 --seed "$SEED" -o "$OUT" --overwrite \
  --progress
echo "image written to $OUT"
echo "  prompt: \"$PROMPT\" (seed $SEED; try PROMPT=\"three green triangles on a black background\" make run)"
