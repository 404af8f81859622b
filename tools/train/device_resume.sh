#!/usr/bin/env bash
# The resumed training run on a GPU machine, as it was made for models/shapes-128 (see README.md):
# continues a model folder with train.py --resume, and while it trains, runs diffusers_ref.py on
# each milestone as it appears and packs it into $OUT/NAME-stepN.tgz (without the VAE weights,
# which --resume copies unchanged). Only the milestones in PACK are packed (the device call
# brings back at most 8 files). Run from the repository root, with diffusers' source tree packed
# as .ref/diffusers-*.tar.xz (or unpacked in .ref/py).
#   PACK="5000 6000" bash tools/train/device_resume.sh models/shapes-128 --dit-steps 3000 --milestones 1000,2000
set -u -o pipefail
FROM=$1; shift
OUT=${OUT:-out/train}
WORK=${WORK:-/tmp/train}
NAME=${NAME:-shapes-128}
TRAIN_TIMEOUT=${TRAIN_TIMEOUT:-500}
PACK=${PACK:-}
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1
[ -d .ref/py/diffusers ] || { mkdir -p .ref/py && tar xJf .ref/diffusers-*.tar.xz -C .ref/py; }
{ nvidia-smi --query-gpu=name,memory.total --format=csv
  python3 -c 'import torch, sys; print("torch", torch.__version__, "python", sys.version.split()[0])'; } 2>&1 |
  tee "$OUT/train.log"
timeout "$TRAIN_TIMEOUT" python3 tools/train/train.py --resume "$FROM" --out "$WORK/$NAME" "$@" >>"$OUT/train.log" 2>&1 &
train=$!

# diffusers' reference for one finished milestone (eval_pytorch.json is written last), then its tarball
reference() {
  local d=$1 step
  step=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["dit_steps_done"])' "$d/training_config.json")
  OMP_NUM_THREADS=4 python3 tools/train/diffusers_ref.py "$d" "$d/reference" >"$d/diffusers_ref.log" 2>&1
  echo "step $step: diffusers_ref rc=$? $(tail -1 "$d/diffusers_ref.log")" >>"$OUT/train.log"
  case " $PACK " in *" $step "*)
    tar czf "$OUT/$NAME-step$step.tgz" -C "$d" --exclude=vae/diffusion_pytorch_model.safetensors --exclude=.ref-started . ;;
  esac
}
scan() {
  for d in "$WORK/$NAME"-step* "$WORK/$NAME"; do
    [ -f "$d/eval_pytorch.json" ] && [ ! -e "$d/.ref-started" ] && { touch "$d/.ref-started"; reference "$d" & }
  done
}
while kill -0 $train 2>/dev/null; do scan; sleep 3; done
wait $train; echo "train.py: rc=$?" >>"$OUT/train.log"
scan; wait
ls -la "$OUT"
