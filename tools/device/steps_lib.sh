# Sourced by the one-GPU step suites (decode_fusions_suite.sh, prefill_passes_suite.sh): the step
# selection, the notes, the GPU header, and the test, sanitizer and engine-test runs over the
# bundle's binaries in .devbin. The caller sets OUT, STEPS and T0 (its start, in SECONDS).
note() { echo "== [$((SECONDS - T0)) s] $1: $2"; }
# unpack_devpack PACK: the carried pack into .devbin and .devlibs, once per pack: .devbin is
# touched after, so a script that calls another (small_m_suite.sh -> v3_shape.sh) or a rerun on a
# warm machine does not unpack it again.
unpack_devpack() {
  if [[ -f $1 && $1 -nt .devbin ]]; then
    rm -rf .devbin .devlibs && tar -xJf "$1" && touch .devbin
  fi
}
want() { [[ " $STEPS " == *" $1 "* ]]; }
passed() { grep -E '^\[  (PASSED|FAILED) ' "$1" | tr '\n' ' '; }

# The GPU, its driver and the time, into $OUT/gpu.txt and on stdout.
gpu_header() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
  date -u +%Y-%m-%dT%H:%MZ >> "$OUT/gpu.txt"
  cat "$OUT/gpu.txt"
}

# run_tests LIMIT BINARY...: each test binary under a LIMIT-second timeout, its output appended to
# $OUT/tests.txt; a binary missing from the bundle is noted and skipped.
run_tests() {
  local limit=$1 t rc
  shift
  : > "$OUT/tests.txt"
  for t in "$@"; do
    [[ -x .devbin/$t ]] || { note "$t" "missing"; continue; }
    echo "=== $t" >> "$OUT/tests.txt"
    timeout "$limit" ".devbin/$t" --gtest_brief=1 > "$OUT/t.log" 2>&1
    rc=$?
    cat "$OUT/t.log" >> "$OUT/tests.txt"
    note "$t" "rc=$rc $(passed "$OUT/t.log")"
  done
  rm -f "$OUT/t.log"
}

# san TOOL LIMIT BINARY FILTER: compute-sanitizer's TOOL over the filtered tests, the tail of its
# report appended to $OUT/sanitize.txt (truncate it before the first run).
san() {
  [[ -x .devbin/$3 ]] || { note "$1 $3" "missing"; return; }
  echo "=== $1 $3 $4" >> "$OUT/sanitize.txt"
  # racecheck follows the latent kernel's warpgroup hand-offs on mbarriers, not on the named
  # barriers it uses by default (kernels/mla_prefill/latent_sm90_parts.cuh, Signal).
  local envs=()
  [[ $1 == racecheck ]] && envs=(MLASERVE_MLA_NAMED_SIGNALS=0)
  env "${envs[@]}" timeout "$2" compute-sanitizer --tool "$1" --error-exitcode 9 ".devbin/$3" --gtest_brief=1 \
    --gtest_filter="$4" > "$OUT/s.log" 2>&1
  local rc=$?
  tail -8 "$OUT/s.log" >> "$OUT/sanitize.txt"
  note "$1 $3" "rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/s.log" | tail -1)"
  rm -f "$OUT/s.log"
}

# The runs SAN_EXTRA lists, each TOOL:BINARY:FILTER.
san_extra() {
  local run tool bin filter
  for run in ${SAN_EXTRA:-}; do
    IFS=: read -r tool bin filter <<< "$run"
    san "$tool" 200 "$bin" "$filter"
  done
}

# model_engine_cuda_test (the CUDA engine against the HF fixtures) into $OUT/engine_cuda_test.txt.
engine_test() {
  timeout 240 .devbin/model_engine_cuda_test --gtest_brief=1 > "$OUT/engine_cuda_test.txt" 2>&1
  note "model_engine_cuda_test" "rc=$? $(passed "$OUT/engine_cuda_test.txt")"
}

# The random V2-Lite-shaped checkpoint at MODEL, made unless it is there.
random_model() {
  [[ -f $MODEL/config.json ]] && return
  timeout 300 python3 tools/make_random_model.py --out "$MODEL" > "$OUT/make_model.log" 2>&1
  note "make_random_model" "rc=$? $(tail -1 "$OUT/make_model.log")"
}
