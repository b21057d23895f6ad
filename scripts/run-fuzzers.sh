#!/usr/bin/env bash
# Builds the libFuzzer harnesses of fuzz/ (if needed) and runs each for a
# bounded time on a copy of its seed corpus (docs/FUZZING.md).
#
#   scripts/run-fuzzers.sh [SECONDS] [HARNESS...]
#
# SECONDS: each harness's -max_total_time (default 60). HARNESS: run only
# these (default: every one fuzz/CMakeLists.txt adds). Environment:
#   ANATOMY_FUZZ_BUILD  the build directory (default build-fuzz)
#   ANATOMY_FUZZ_JOBS   harnesses run at once (default 1)
#   ANATOMY_FUZZ_OUT    where each run's corpus, log and crash inputs go
#                       (default $ANATOMY_FUZZ_BUILD/fuzz-runs)
# Prints one line a harness (executions, coverage, corpus growth, crashes)
# and exits non-zero when any harness found a crash, a hang (-timeout=10), a
# leak or memory past -rss_limit_mb=2048; the inputs are kept under
# $ANATOMY_FUZZ_OUT/<harness>/artifacts/ (reproduce: build-fuzz/fuzz/<harness> <input>).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
build=${ANATOMY_FUZZ_BUILD:-build-fuzz}
jobs=${ANATOMY_FUZZ_JOBS:-1}
out=${ANATOMY_FUZZ_OUT:-$build/fuzz-runs}

if [[ ! -f $build/CMakeCache.txt ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DANATOMY_BUILD_FUZZERS=ON -DANATOMY_ENABLE_CUDA=OFF \
    -DANATOMY_BUILD_TESTS=OFF
fi
cmake --build "$build" --target anatomy_fuzzers

# "name max_len dict" a line, written by fuzz/CMakeLists.txt.
mapfile -t entries < "$build/fuzzers.txt"
selected=()
for entry in "${entries[@]}"; do
  read -r name _ <<< "$entry"
  if [[ $# -eq 0 ]] || [[ " $* " == *" $name "* ]]; then selected+=("$entry"); fi
done
if [[ ${#selected[@]} -eq 0 ]]; then
  echo "run-fuzzers: no harness named $* (have: $(cut -d' ' -f1 "$build/fuzzers.txt" | tr '\n' ' '))" >&2
  exit 2
fi

# One harness: a fresh copy of its corpus, the run, then its summary line in $dir/summary.
run_one() {
  local name=$1 max_len=$2 dict=${3:-}
  local dir=$out/$name
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp fuzz/corpus/"$name"/* "$dir/corpus/"
  local seeds
  seeds=$(find "$dir/corpus" -type f | wc -l)
  local args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len"
              -artifact_prefix="$dir/artifacts/" -print_final_stats=1)
  [[ -n $dict ]] && args+=(-dict="fuzz/$dict")
  local rc=0
  "$build/fuzz/$name" "${args[@]}" "$dir/corpus" > "$dir/log" 2>&1 || rc=$?
  local runs rate cov corpus crashes
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$dir/log" | tail -1 || true)
  corpus=$(find "$dir/corpus" -type f | wc -l)
  crashes=$(find "$dir/artifacts" -type f | wc -l)
  local status=ok
  if [[ $rc -ne 0 || $crashes -ne 0 ]]; then status="FAILED (exit $rc)"; fi
  printf '%-22s %10s runs %7s/s  %-22s corpus %3d -> %4d  crashes %d  %s\n' "$name" "${runs:-?}" "${rate:-?}" \
    "${cov:-cov: ?}" "$seeds" "$corpus" "$crashes" "$status" > "$dir/summary"
  [[ $status == ok ]]
}

mkdir -p "$out"
echo "run-fuzzers: ${#selected[@]} harnesses, ${seconds}s each, $jobs at a time; runs in $out/"
failed=0
running=0
for entry in "${selected[@]}"; do
  read -r name max_len dict <<< "$entry"
  run_one "$name" "$max_len" "$dict" &
  running=$((running + 1))
  if [[ $running -ge $jobs ]]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
done
while [[ $running -gt 0 ]]; do
  wait -n || failed=1
  running=$((running - 1))
done

for entry in "${selected[@]}"; do
  read -r name _ <<< "$entry"
  cat "$out/$name/summary"
done
if [[ $failed -ne 0 ]]; then
  for entry in "${selected[@]}"; do
    read -r name _ <<< "$entry"
    if [[ -n $(find "$out/$name/artifacts" -type f) ]] || ! grep -q ' ok$' "$out/$name/summary"; then
      echo "---- $name: $out/$name/log (last lines); inputs in $out/$name/artifacts/"
      grep -v '^#[0-9]' "$out/$name/log" | tail -40
    fi
  done
  echo "run-fuzzers: FAILED" >&2
  exit 1
fi
echo "run-fuzzers: no crash, hang or leak"
