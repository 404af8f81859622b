#!/usr/bin/env bash
# The training run on a GPU machine, as it was made for models/shapes-128 (see README.md):
# trains (train.py), writes diffusers' reference images for the result (diffusers_ref.py) and
# packs the model folders into $OUT/models.tgz. Run from the repository root, with diffusers'
# source in .ref/py (see tests/fixtures/README.md).
#   bash tools/train/device_run.sh [TRAIN_ARGS...]
set -u -o pipefail
OUT=${OUT:-out/train}
WORK=${WORK:-/tmp/train}
NAME=${NAME:-shapes-128}
TRAIN_TIMEOUT=${TRAIN_TIMEOUT:-500}
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv 2>&1 | tee "$OUT/env.txt"
python3 -c 'import torch, sys; print("torch", torch.__version__, "python", sys.version.split()[0])' | tee -a "$OUT/env.txt"
(cd tools/train && timeout "$TRAIN_TIMEOUT" python3 train.py --out "$WORK/$NAME" "$@") 2>&1 | tee "$OUT/train.log"
echo "train.py: rc=$?"
final="$WORK/$NAME"
[ -f "$final/training_config.json" ] || final=$(ls -d "$WORK/$NAME"-step* 2>/dev/null | sort -V | tail -1)
echo "reference from $final"
python3 tools/train/diffusers_ref.py "$final" "$final/diffusers_ref" 2>&1 | tee "$OUT/diffusers_ref.log"
tar czf "$OUT/models.tgz" -C "$WORK" . && ls -la "$OUT"
