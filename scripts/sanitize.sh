#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer (leaks included) and
# UndefinedBehaviorSanitizer: a Debug build without CUDA in build-asan/ (or
# the directory given), then ctest. About 30 minutes of building on two cores.
# BenchCommand.OutOfMemoryRowsAreRecordedAsOom is left out: it runs anatomy
# under `ulimit -v`, where AddressSanitizer cannot map its shadow memory.
#   scripts/sanitize.sh [BUILD_DIR] [ctest arguments ...]
set -euo pipefail
dir=${1:-build-asan}
shift || true
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -O1"
cmake -S "$(dirname "$0")/.." -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DANATOMY_ENABLE_CUDA=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined"
cmake --build "$dir"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$dir" --output-on-failure -E 'OutOfMemoryRowsAreRecordedAsOom' "$@"
