#!/bin/sh
# Runs every fuzz target for a bounded time: fuzz/run.sh FUZZ_BUILD_DIR SECONDS [FIXTURE_ROOT]
# (FIXTURE_ROOT: a folder with models/<name>/, default tests/fixtures of this tree)
# Each target starts from the committed seeds (fuzz/corpus/<target>) plus seeds made
# from the fixtures, grows its corpus under FUZZ_BUILD_DIR/corpus/<target>, and prints
# its executions; a crash leaves FUZZ_BUILD_DIR/artifacts/<target>/crash-* and fails.
set -eu
B=$1
T=${2:-60}
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=${3:-$HERE/../tests/fixtures}
M="$DATA/models"
status=0
seed() { # seed TARGET NAME SELECTOR_BYTE FILE  (selector "" = none)
  out="$B/seeds/$1/$2"
  [ -f "$4" ] || return 0
  if [ -n "$3" ]; then printf "\\$(printf %o "$3")" > "$out"; cat "$4" >> "$out"; else cp "$4" "$out"; fi
}
for t in safetensors gguf config tokenizer_json tokenize cli png serve_req image tune_cache; do
  mkdir -p "$B/seeds/$t" "$B/corpus/$t" "$B/artifacts/$t"
done
for fam in zimage-tiny flux2-klein-tiny; do
  seed safetensors "$fam-components" "" "$M/$fam/components.safetensors"
  seed config "$fam-index" 0 "$M/$fam/model_index.json"
  seed config "$fam-transformer" 1 "$M/$fam/transformer/config.json"
  seed config "$fam-text_encoder" 2 "$M/$fam/text_encoder/config.json"
  seed config "$fam-vae" 3 "$M/$fam/vae/config.json"
  seed config "$fam-scheduler" 4 "$M/$fam/scheduler/scheduler_config.json"
  seed config "$fam-tokconfig" 6 "$M/$fam/tokenizer/tokenizer_config.json"
done
for fam in flux2-klein-tiny; do
  seed config "$fam-flux2" 7 "$M/$fam/transformer/config.json"
  seed config "$fam-vae2" 8 "$M/$fam/vae/config.json"
done
[ -f "$M/zimage-tiny/reference.json" ] && seed tokenize prompt "" "$M/zimage-tiny/reference.json"
export DIT_FUZZ_TOKENIZER="$M/zimage-tiny/tokenizer/tokenizer.json"
for t in safetensors gguf config tokenizer_json tokenize cli png serve_req image tune_cache; do
  dict=""
  [ -f "$HERE/dict/$t.dict" ] && dict="-dict=$HERE/dict/$t.dict"
  log="$B/fuzz_$t.log"
  start=$(date +%s)
  if "$B/fuzz_$t" -max_total_time="$T" -timeout=20 -rss_limit_mb=2560 -max_len=65536 -close_fd_mask=3 \
      -print_final_stats=1 -artifact_prefix="$B/artifacts/$t/" $dict \
      "$B/corpus/$t" "$HERE/corpus/$t" "$B/seeds/$t" > "$log" 2>&1; then
    r=ok
  else
    r=FAILED
    status=1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  echo "fuzz_$t: $r, ${execs:-?} execs in $(( $(date +%s) - start )) s, $cov, corpus $(ls "$B/corpus/$t" | wc -l) files"
  [ "$r" = ok ] || { grep -A30 "ERROR\|runtime error\|deadly signal" "$log" | head -60; ls "$B/artifacts/$t"; }
done
exit $status
