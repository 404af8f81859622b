#!/bin/sh
# `make run`: generate an image with the model shipped in the repository and say where
# it is. The shipped model (models/zimage-tiny) has RANDOM weights: the picture is
# structured noise, not the prompt. It shows the whole pipeline working end to end.
set -e
BUILD=${1:-build}
MODEL=${MODEL:-models/zimage-tiny}
PROMPT=${PROMPT:-"a red fox in the snow, 35mm photo"}
mkdir -p out
OUT=out/zimage-tiny.png
"$BUILD/ditrun" generate -m "$MODEL" -p "$PROMPT" -W 256 -H 256 --steps 8 --seed 42 -o "$OUT" --overwrite --progress
echo "image written to $OUT (model $MODEL has random weights: expect noise-like structure, not the prompt)"
