#!/usr/bin/env bash
# One script for the GPU benchmark run (issue 5), in two steps:
#
#   here (CPU machine, after a CUDA build):   bench/gpu_run.sh pack [BUILD_DIR]
#     copies into git-ignored folders of the repo what the device machine lacks:
#       .devbin/    ditrun, dit_gpu_op_test, test_bench_gpu, test_flux2_gpu (from BUILD_DIR, default build-bench)
#       .devlibs/   our Debian shared libraries (jansson, libpng, utf8proc, pcre2, gomp)
#       .ref/py/    diffusers' src/diffusers from the fetched mirror (models, loaders, utils...;
#                   pipelines left out for size), for bench/torch_ref.py
#     and prints the device call to make.
#
#   on the device machine:                    bash bench/gpu_run.sh run [SIZES...]
#     (the run tool: carry [".devbin", ".devlibs", ".ref"]; the fixtures travel with the tree,
#     tests/fixtures)
#     runs the CUDA op tests, the Z-Image and FLUX.2 fixture checks on the GPU, ditrun bench on
#     cuda and bench/torch_ref.py (eager and torch.compile) at each size (default 512 1024 2048),
#     writes logs and JSON into $OUT/run/ (packed as $OUT/run.tgz at the end: the device tool
#     returns few files) and prints a final table.
# ARCH (zimage): flux2-klein-4b or flux2-klein-9b skips the op tests, the fixture check and the
# generate stage and runs ditrun bench + torch_ref for that arch only (default sizes: 1024,
# TEXT_LEN 512, UNFUSED_SIZES empty), printing the same final table.
# Environment (run): UNFUSED_SIZES (1024: sizes benched again with DIT_CUDA_FUSED=0 DIT_CUDA_VEC=0;
# empty: none), AB_ENVS (space-separated VAR=VALUE settings, each benched again at every size on
# its own, e.g. "DIT_CUDA_GRAPHS=0 DIT_CUDA_GEMM_TUNE=0"), E2E_SIZES (zimage end to end:
# ditrun bench --e2e and torch_ref.py --e2e at these sizes; E2E_STEPS, default 8), AB_SIZES (the sizes those run at;
# default all), ITERS (10), WARMUP (3), TEXT_LEN (128), SKIP (comma list of
# optest,fixture,generate,bench,torch,torche2e), TORCH_MODES (eager,compile), COMPILE_BUDGET_S (no new
# compile after the torch script has run this long; default: its time left - 150 s),
# TOTAL_S (585: the whole run ends inside the run tool's 600 s; torch gets what is left).
set -u

cmd=${1:-}
shift || true

pack() {
  local build=${1:-build-bench}
  set -e
  cmake --build "$build" -j 2 --target ditrun dit_gpu_op_test test_bench_gpu test_flux2_gpu >/dev/null
  mkdir -p .devbin .devlibs .ref/py
  for f in .devbin .devlibs .ref; do
    grep -qx "/$f/" .git/info/exclude 2>/dev/null || echo "/$f/" >>.git/info/exclude
  done
  cp "$build/ditrun" "$build/tests/dit_gpu_op_test" "$build/tests/test_bench_gpu" "$build/tests/test_flux2_gpu" .devbin/
  for lib in $(ldd "$build/ditrun" | awk '/=> \// {print $3}' | grep -E 'jansson|png16|utf8proc|pcre2|gomp'); do
    cp -L "$lib" .devlibs/
  done
  local mirror=${DIFFUSERS_GIT:-/work/.mirror/huggingface+diffusers/repo}
  rm -rf .ref/py/diffusers
  git --git-dir="$mirror" archive HEAD src/diffusers | tar -x -C .ref/py --strip-components=1 \
    --exclude='src/diffusers/pipelines/*/*' --exclude='src/diffusers/modular_pipelines/*/*' \
    --exclude='src/diffusers/commands' --exclude='src/diffusers/experimental'
  echo 'from importlib.metadata import *  # noqa' >.ref/py/importlib_metadata.py
  git --git-dir="$mirror" log -1 --format='diffusers %H %cd' >.ref/py/DIFFUSERS_VERSION
  du -sh .devbin .devlibs .ref
  echo "device call: run(command='bash bench/gpu_run.sh run', carry=['.devbin','.devlibs','.ref'])"
  echo "  FLUX.2 klein: run(command='ARCH=flux2-klein-4b bash bench/gpu_run.sh run 1024', carry=[same])"
}

# Adds the folders holding libcudart.so.13, libcublasLt.so.13 and libcudnn.so.9 (dlopen'd
# by the CUDA backend's SDPA, if there) on this machine.
cuda_libs() {
  local p="" d
  for so in libcudart.so.13 libcublasLt.so.13 libcudnn.so.9; do
    d=$(find /usr/local/cuda/ /usr/local/cuda*/ /opt /usr/lib -name "$so" 2>/dev/null | head -1)
    [ -n "$d" ] && p="$p:$(dirname "$d")"
  done
  echo "$p"
}

# The profiled run of a bench JSON: phases, gaps and the GEMM shapes with their rates.
profile_summary() {
  python3 - "$1" <<'PYEOF' 2>&1
import json, sys
try: b = json.load(open(sys.argv[1]))
except Exception as e: print(f"  (no bench JSON: {e})"); sys.exit(0)
ph = b.get("phase_ms", {})
span = b.get("prof_span_ms", 0) if b.get("prof_device_timed") else b.get("prof_total_ms", 0)
print(f"  profiled ({'device events' if b.get('prof_device_timed') else 'synced'}): span {span:.2f} ms, "
      f"GEMM {ph.get('gemm', 0):.2f}, attention {ph.get('attention', 0):.2f}, elementwise {ph.get('elementwise', 0):.2f}, "
      f"{'gaps' if b.get('prof_device_timed') else 'other'} {span - sum(ph.values()):.2f}")
for n, o in sorted(b.get("ops", {}).items(), key=lambda kv: -kv[1]["ms"]):
    print(f"    {n:<20} {o['ms']:8.2f} ms {o['calls']:5d} calls {1e3 * o['ms'] / max(o['calls'], 1):8.1f} us/call")
for g in sorted(b.get("gemm_shapes", []), key=lambda g: -g["ms"]):
    fl = 2.0 * g["m"] * g["n"] * g["k"] * g["calls"]
    print(f"    gemm m {g['m']:6d} n {g['n']:6d} k {g['k']:6d} {g['calls']:4d} calls {g['ms']:8.3f} ms "
          f"{1e3 * g['ms'] / max(g['calls'], 1):8.1f} us/call {fl / max(g['ms'], 1e-9) / 1e9:7.1f} TFLOP/s")
PYEOF
}

# psnr_check LABEL PNG REFERENCE KEY: PSNR of the image PNG against the float reference image
# KEY of the safetensors file REFERENCE (values in 0..1, or 0..255), with the 35 dB bar.
psnr_check() {
  python3 - "$2" "$3" "$4" "$1" <<'PYEOF'
import sys, numpy as np
from PIL import Image
from safetensors.numpy import load_file
img = np.asarray(Image.open(sys.argv[1]).convert("RGB"), dtype=np.float64) / 255.0
ref = load_file(sys.argv[2])[sys.argv[3]].astype(np.float64)
ref = ref / 255.0 if ref.max() > 1.5 else ref
mse = float(np.mean((img - ref) ** 2))
psnr = 10 * np.log10(1.0 / mse) if mse > 0 else float("inf")
print(f"{sys.argv[4]} vs diffusers float32 reference: PSNR {psnr:.2f} dB (bar: 35), "
      f"max diff {np.max(np.abs(img - ref)) * 255:.1f} levels -> {'PASS' if psnr >= 35 else 'FAIL'}")
PYEOF
}

skip() { case ",${SKIP:-}," in *",$1,"*) return 0 ;; esac; return 1; }

# gen_check LABEL FIXTURE KEY NAME [OPTIONS...]: generate --device cuda from the fixture's prompt at
# 96x128, seed 42, then the PSNR of NAME.png against its reference KEY.
gen_check() {
  local label=$1 fx=tests/fixtures/models/$2 key=$3 name=$4 prompt
  shift 4
  prompt=$(python3 -c "import json;print(json.load(open('$fx/reference.json'))['prompt'])")
  timeout 120 .devbin/ditrun generate -m "$fx" -p "$prompt" -W 96 -H 128 --seed 42 --device cuda \
    -o "$OUT/$name.png" --overwrite "$@" >"$OUT/$name.log" 2>&1
  echo "$label: generate --device cuda rc=$? $(tail -n 3 "$OUT/$name.log" | head -c 400)"
  psnr_check "$label" "$OUT/$name.png" "$fx/reference.safetensors" "$key" 2>&1 | tee -a "$OUT/$name.log"
}

run() {
  local sizes=("$@") arch=${ARCH:-zimage}
  local tl=${TEXT_LEN:-128} unfused=${UNFUSED_SIZES-1024}
  if [ "$arch" != zimage ]; then
    [ ${#sizes[@]} -eq 0 ] && sizes=(1024)
    SKIP="${SKIP:-},optest,fixture,generate"
    tl=${TEXT_LEN:-512}
    unfused=${UNFUSED_SIZES-}
  fi
  [ ${#sizes[@]} -eq 0 ] && sizes=(512 1024 2048)
  local final=${OUT:-out/gpu_run}
  local OUT="$final/run"
  mkdir -p "$OUT"
  export LD_LIBRARY_PATH="$PWD/.devlibs$(cuda_libs)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PYTHONUNBUFFERED=1
  local iters=${ITERS:-10} warm=${WARMUP:-3}
  {
    date -u
    nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv
    echo "ARCH=$arch TEXT_LEN=$tl sizes: ${sizes[*]}"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    ldd .devbin/ditrun | grep -E 'not found|cuda|cublas' || true
    cat .ref/py/DIFFUSERS_VERSION 2>/dev/null
  } 2>&1 | tee "$OUT/env.txt"
  local op_rc=- fx_rc=-
  if ! skip optest; then
    timeout 300 .devbin/dit_gpu_op_test >"$OUT/op_test.log" 2>&1
    op_rc=$?
    tail -n 5 "$OUT/op_test.log"
  fi
  if ! skip fixture; then
    timeout 300 .devbin/test_bench_gpu --tmp /tmp/dit_gpu_fx --src . --bin .devbin >"$OUT/gpu_fixture.log" 2>&1
    fx_rc=$?
    cat "$OUT/gpu_fixture.log"
    timeout 300 .devbin/test_flux2_gpu --tmp /tmp/dit_gpu_fx2 --src . --bin .devbin \
      >"$OUT/gpu_flux2.log" 2>&1
    local f2=$?
    [ "$fx_rc" = 0 ] && fx_rc=$f2
    cat "$OUT/gpu_flux2.log"
  fi
  if ! skip generate; then
    # each family's pipeline on the GPU (bf16 models), against the float reference image
    gen_check "GPU pipeline image" zimage-tiny turbo_image gpu_turbo --steps 4 --guidance 0
    gen_check "FLUX.2 GPU pipeline image" flux2-klein-tiny image gpu_flux2 --steps 4
    gen_check "FLUX.1 dev GPU pipeline image" flux1-dev-tiny image gpu_flux1_dev --steps 4 --guidance 3.5 --max-seq-len 512
    gen_check "FLUX.1 schnell GPU pipeline image" flux1-schnell-tiny image gpu_flux1_schnell --steps 4 --max-seq-len 256
  fi
  if ! skip bench; then
    # clocks, power and temperature once a second while ditrun benches (leaves the card's settings alone)
    nvidia-smi dmon -s puc -d 1 -o T >"$OUT/dmon.log" 2>&1 &
    local dmon=$!
    for s in "${sizes[@]}"; do
      DIT_CUDA_GEMM_TUNE_LOG=1 timeout 300 .devbin/ditrun bench --arch "$arch" --device cuda --res "$s" --text-len "$tl" \
        --iters "$iters" --warmup "$warm" --json >"$OUT/bench_$s.json" 2>"$OUT/bench_$s.err"
      echo "ditrun bench $s: rc=$? $(grep -v 'gemm tune' "$OUT/bench_$s.err" | head -c 300)"
      profile_summary "$OUT/bench_$s.json"
    done
    # A/B: each setting of AB_ENVS on its own
    local ab_sizes=(${AB_SIZES:-${sizes[*]}})
    for ab in ${AB_ENVS:-}; do
      for s in "${ab_sizes[@]}"; do
        env "$ab" timeout 300 .devbin/ditrun bench --arch "$arch" --device cuda --res "$s" --text-len "$tl" \
          --iters "$iters" --warmup "$warm" --json >"$OUT/bench_${s}_${ab%%=*}.json" 2>"$OUT/bench_${s}_${ab%%=*}.err"
        echo "ditrun bench $s with $ab: rc=$? median $(python3 -c \
          'import json,sys; print(json.load(open(sys.argv[1]))["ms_median"])' "$OUT/bench_${s}_${ab%%=*}.json" \
          2>/dev/null || echo '-') ms"
      done
    done
    # the same forward without the 16-byte and fused kernels, for the before/after in PERF.md
    for s in $unfused; do
      DIT_CUDA_FUSED=0 DIT_CUDA_VEC=0 timeout 300 .devbin/ditrun bench --arch "$arch" --device cuda --res "$s" \
        --text-len "$tl" --iters "$iters" --warmup "$warm" --json >"$OUT/bench_${s}_unfused.json" \
        2>"$OUT/bench_${s}_unfused.err"
      echo "ditrun bench $s unfused (DIT_CUDA_FUSED=0 DIT_CUDA_VEC=0): rc=$? median $(python3 -c \
        'import json,sys; print(json.load(open(sys.argv[1]))["ms_median"])' "$OUT/bench_${s}_unfused.json" 2>/dev/null ||
        echo '-') ms $(head -c 300 "$OUT/bench_${s}_unfused.err")"
    done
  fi
  if ! skip bench; then
    kill "$dmon" 2>/dev/null
    echo "during ditrun bench (nvidia-smi dmon: power W, GPU temperature C, SM busy %, memory/SM clock MHz; busy samples), min / median / max:"
    python3 - "$OUT/dmon.log" <<'PYEOF' 2>&1
import sys, statistics
lines = [l.replace("#", "# ", 1).split() if l.startswith("#") else l.split() for l in open(sys.argv[1]) if l.strip()]
head = next((l[1:] for l in lines if l[0] == "#" and "pwr" in l), None)
rows = [l for l in lines if l[0] != "#" and head and len(l) == len(head)]
if not head: print("  (no dmon header)"); sys.exit(0)
col = {n: head.index(n) for n in ("pwr", "gtemp", "sm", "mclk", "pclk") if n in head}
# busy samples: SM utilization >= 50% where dmon reports it, else power above 400 W
busy = [r for r in rows if ("sm" in col and r[col["sm"]].isdigit() and int(r[col["sm"]]) >= 50) or
        ("sm" not in col and "pwr" in col and r[col["pwr"]].isdigit() and int(r[col["pwr"]]) > 400)]
for n, i in col.items():
    v = [float(r[i]) for r in busy if r[i].replace(".", "").isdigit()]
    if v: print(f"  {n}: {min(v):.0f} / {statistics.median(v):.0f} / {max(v):.0f} over {len(v)} busy samples")
PYEOF
  fi
  # end to end (zimage): text encode + E2E_STEPS forwards + VAE decode, ditrun then diffusers eager
  for s in ${E2E_SIZES:-}; do
    timeout 200 .devbin/ditrun bench --arch zimage --e2e "${E2E_STEPS:-8}" --device cuda --res "$s" --text-len "$tl" \
      --iters 3 --warmup 1 --json >"$OUT/e2e_$s.json" 2>"$OUT/e2e_$s.err"
    echo "ditrun bench --e2e $s: rc=$? $(cat "$OUT/e2e_$s.json") $(head -c 300 "$OUT/e2e_$s.err")"
  done
  if [ -n "${E2E_SIZES:-}" ] && ! skip torche2e; then
    timeout 240 python3 bench/torch_ref.py --arch zimage --e2e --res ${E2E_SIZES} --text-len "$tl" \
      --steps "${E2E_STEPS:-8}" --out "$OUT/torch_e2e.json" >"$OUT/torch_e2e.log" 2>&1
    echo "torch_ref --e2e: rc=$?"
    tail -n 8 "$OUT/torch_e2e.log"
  fi
  if ! skip torch; then
    # the whole command must end inside the run tool's 600 s: torch gets what is left
    local left=$(( ${TOTAL_S:-585} - SECONDS ))
    [ "$left" -lt 30 ] && left=30
    local cb=${COMPILE_BUDGET_S:-$(( left - 150 ))}
    [ "$cb" -lt 0 ] && cb=0
    echo "torch_ref: ${left} s left, compile budget ${cb} s"
    timeout "$left" python3 bench/torch_ref.py --arch "$arch" --res "${sizes[@]}" --text-len "$tl" --iters "$iters" --warmup "$warm" \
      --modes "${TORCH_MODES:-eager,compile}" --compile-budget-s "$cb" \
      --out "$OUT/torch_ref.json" >"$OUT/torch_ref.log" 2>&1
    echo "torch_ref: rc=$?"
    tail -n 12 "$OUT/torch_ref.log"
  fi
  python3 - "$OUT" "$op_rc" "$fx_rc" "$arch" "$tl" "${sizes[@]}" <<'EOF'
import json, os, sys
out, op_rc, fx_rc, arch, tl, sizes = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
def load(p):
    try:
        with open(p) as f: return json.load(f)
    except Exception: return None
tr = load(os.path.join(out, "torch_ref.json")) or {"runs": []}
tm = {(r["res"], r["mode"]): r for r in tr["runs"] if "median_ms" in r}
print(f"\nop tests rc={op_rc}  GPU fixture check rc={fx_rc}  (0 = pass, - = skipped)  arch {arch}, {tl} text tokens")
print(f"{'res':>5} {'ditrun ms':>9} {'TFLOP/s':>7} {'%peak':>6} {'gemm/attn/elem ms (profiled)':>30} {'mem GiB':>7}"
      f" {'eager ms':>8} {'compile ms':>10} {'x eager':>7} {'x comp':>6}")
for s in sizes:
    b = load(os.path.join(out, f"bench_{s}.json"))
    e, c = tm.get((int(s), "eager")), tm.get((int(s), "compile"))
    row = f"{s:>5} "
    if b:
        ph = b["phase_ms"]
        row += (f"{b['ms_median']:>9.2f} {b['tflops']:>7.1f} {b['pct_peak']:>6.1f} "
                f"{ph['gemm']:>10.2f}/{ph['attention']:>7.2f}/{ph['elementwise']:>7.2f}    "
                f"{b['peak_mem_bytes'] / 2**30:>7.2f}")
    else:
        row += f"{'failed':>9} {'':>7} {'':>6} {'':>30} {'':>7}"
    row += f" {e['median_ms']:>8.2f}" if e else f" {'-':>8}"
    row += f" {c['median_ms']:>10.2f}" if c else f" {'-':>10}"
    row += f" {e['median_ms'] / b['ms_median']:>7.2f}" if (b and e) else f" {'-':>7}"
    row += f" {c['median_ms'] / b['ms_median']:>6.2f}" if (b and c) else f" {'-':>6}"
    print(row)
print("x eager / x comp: PyTorch time over ditrun time (> 1: ditrun faster). Peak: 760 TFLOP/s bf16 GEMM.")
print("mem: ditrun's device memory in use at its peak (cudaMemGetInfo: weights, activations, workspaces and the")
print("CUDA context); torch's max_memory_allocated per run:",
      ", ".join(f"{r['res']} {r['mode']} {r['peak_mem_bytes'] / 2**30:.2f} GiB" for r in tm.values()))
EOF
  tar czf "$final/run.tgz" -C "$final" run && echo "logs: $final/run.tgz"
}

# Before/after timing of two ditrun binaries on the device, alternating A B A B ... (ROUNDS, 3)
# so that clock and power drift falls on both: bench/gpu_run.sh ab OLD NEW [ARCH...] (default
# zimage flux2-klein-4b; RES 1024, ITERS 20). Prints each run's median and the medians of both.
ab() {
  local old=$1 new=$2
  shift 2
  local archs=("$@")
  [ ${#archs[@]} -eq 0 ] && archs=(zimage flux2-klein-4b)
  export LD_LIBRARY_PATH="$PWD/.devlibs$(cuda_libs)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local arch r bin
  for arch in "${archs[@]}"; do
    for r in $(seq 1 "${ROUNDS:-3}"); do
      for bin in "$old" "$new"; do
        timeout 200 "$bin" bench --arch "$arch" --device cuda --res "${RES:-1024}" --iters "${ITERS:-20}" --warmup 5 \
          --no-profile --json 2>/dev/null | python3 -c "import json,sys; b=json.load(sys.stdin); \
print('$arch', '$bin', round(b['ms_median'], 3))" || echo "$arch $bin failed"
      done
    done
  done | tee /tmp/ab.txt
  python3 - <<'PYEOF'
import statistics as st
rows = [l.split() for l in open("/tmp/ab.txt") if not l.strip().endswith("failed")]
for arch in dict.fromkeys(r[0] for r in rows):
    m = {b: st.median(float(r[2]) for r in rows if r[0] == arch and r[1] == b) for b in dict.fromkeys(r[1] for r in rows if r[0] == arch)}
    print(arch, "median of medians:", ", ".join(f"{b} {v:.3f} ms" for b, v in m.items()))
PYEOF
}

case "$cmd" in
  pack) pack "$@" ;;
  run) run "$@" ;;
  ab) ab "$@" ;;
  *)
    sed -n '2,20p' "$0"
    exit 2
    ;;
esac
