#!/usr/bin/env bash
# The CPU test suite under the sanitizers: a Debug build without CUDA, then
# ctest. By default AddressSanitizer (leaks included) with
# UndefinedBehaviorSanitizer, in build-asan/; with --thread, ThreadSanitizer,
# in build-tsan/. About 30 minutes of building on two cores.
# Left out: BenchCommand.OutOfMemoryRowsAreRecordedAsOom, which runs anatomy
# under `ulimit -v`, where the sanitizers cannot map their shadow memory; and
# under ThreadSanitizer, Checkpointing.KilledWhileSavingLeavesOnlyWholeCheckpoints,
# whose kills come at fixed times that a 10x slower run does not reach.
#   scripts/sanitize.sh [--thread] [BUILD_DIR] [ctest arguments ...]
set -euo pipefail
thread=0
if [[ "${1:-}" == "--thread" ]]; then
  thread=1
  shift
fi
if ((thread)); then
  dir=${1:-build-tsan}
  sanitizers=thread
  skip='OutOfMemoryRowsAreRecordedAsOom|KilledWhileSavingLeavesOnlyWholeCheckpoints'
else
  dir=${1:-build-asan}
  sanitizers=address,undefined
  skip='OutOfMemoryRowsAreRecordedAsOom'
fi
shift || true
cmake -S "$(dirname "$0")/.." -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DANATOMY_ENABLE_CUDA=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=$sanitizers -fno-omit-frame-pointer -O1" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=$sanitizers"
cmake --build "$dir"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 TSAN_OPTIONS=halt_on_error=1 \
  ctest --test-dir "$dir" --output-on-failure -E "$skip" "$@"
