#!/usr/bin/env bash
# The GPU half of the test suite, for a machine with an NVIDIA GPU (CI has none, so `make test`
# cannot run it): the CUDA op tests, the GPU-only fixture checks, and every test that has a CUDA
# mode (DIT_TEST_DEVICE=cuda: the same fixtures on the GPU, compared by normalized MSE), JOBS at
# a time (default 4; the tests are small, the card is shared between them).
#
#   bash tests/gpu/sweep.sh BIN_DIR [LOG_DIR]
#
# BIN_DIR is laid out as a build directory (BIN_DIR/ditrun, BIN_DIR/tests/NAME) of a CUDA build;
# run from the source root after scripts/setup.sh's tokenizer steps (the fixtures are read from
# tests/fixtures, whose tokenizers link into node_modules/). Each test's output goes
# to LOG_DIR/NAME.log (default out/gpu_sweep); one line per test is printed, and the exit status
# is the number of tests that failed. ONLY="name ..." runs those alone; TIMEOUT (s, default 400)
# bounds each test.
set -u
bin=${1:?usage: tests/gpu/sweep.sh BIN_DIR [LOG_DIR]}
logs=${2:-out/gpu_sweep}
mkdir -p "$logs"

# name and environment of each test
cuda_env="DIT_TEST_DEVICE=cuda"
tests=(
  "dit_gpu_op_test -"
  "test_bench_gpu -"
  "test_flux2_gpu -"
  "test_krea2_gpu -"
  "test_minimax_h3_fixture $cuda_env"
  "test_ltx2_text $cuda_env"
  "test_ltx2_transformer $cuda_env"
  "test_ltx2_vae $cuda_env"
  "test_ltx2_audio_vae $cuda_env"
  "test_ltx2_vocoder $cuda_env"
  "test_ltx2_pipeline $cuda_env"
  "test_lora $cuda_env"
)

one() {
  local name=$1 env=$2 t0=$SECONDS rc
  if [ ! -x "$bin/tests/$name" ]; then
    echo "$name: MISSING ($bin/tests/$name)"
    return 1
  fi
  local args=(--data "$PWD/tests/fixtures" --tmp "/tmp/gpu_sweep/$name" --src . --bin "$bin")
  [ "$name" = dit_gpu_op_test ] && args=()
  [ "$env" = - ] && env=
  rm -rf "/tmp/gpu_sweep/$name"
  mkdir -p "/tmp/gpu_sweep/$name"
  env $env timeout "${TIMEOUT:-400}" "$bin/tests/$name" "${args[@]}" >"$logs/$name.log" 2>&1
  rc=$?
  printf '%-26s rc=%-3s %4ds  %s\n' "$name" "$rc" $((SECONDS - t0)) "$(grep -E 'passed|failed|FAIL' "$logs/$name.log" | tail -n 1 | cut -c1-120)"
  return $((rc != 0))
}

failed=0
running=0
for entry in "${tests[@]}"; do
  read -r name env <<<"$entry"
  if [ -n "${ONLY:-}" ] && ! [[ " $ONLY " == *" $name "* ]]; then continue; fi
  one "$name" "$env" &
  running=$((running + 1))
  if [ "$running" -ge "${JOBS:-4}" ]; then
    wait -n || failed=$((failed + 1))
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=$((failed + 1))
  running=$((running - 1))
done
echo "gpu sweep: $failed failed"
exit "$failed"
