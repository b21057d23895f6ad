#!/usr/bin/env bash
# install-deps.sh [--with-chromium]: installs the Debian packages anatomy builds
# with, when missing.
# The CUDA toolkit is optional: when nvcc is present the CUDA target is built too.
# openmpi-bin gives the tests mpirun, which they start CPU ranks with.
# python3-venv and python3-pip: the test that installs the Python wheel in a
# fresh virtual environment (tests/python/).
# Chromium is for one test only (it renders the HTML report headless, and skips
# without it): installed with --with-chromium or when ANATOMY_REQUIRE_CHROMIUM=1
# (CI, where that test must not skip).
set -euo pipefail
with_chromium=0
[ "${ANATOMY_REQUIRE_CHROMIUM:-}" = 1 ] && with_chromium=1
for arg in "$@"; do
  case "$arg" in
    --with-chromium) with_chromium=1 ;;
    *) echo "install-deps.sh: unknown argument $arg (known: --with-chromium)" >&2; exit 2 ;;
  esac
done
# clang, its libFuzzer and sanitizer runtimes (libclang-rt-14-dev) and llvm
# (llvm-symbolizer, for the sanitizers' stack traces): the fuzzers (fuzz/).
packages=(build-essential cmake ninja-build nlohmann-json3-dev libcli11-dev libfmt-dev
          libopenblas-dev libpcre2-dev libgtest-dev libgmock-dev python3 python3-venv python3-pip
          openmpi-bin clang llvm libclang-rt-14-dev)
[ "$with_chromium" = 1 ] && packages+=(chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "install-deps.sh: not root and no sudo: as root, run apt-get install ${missing[*]}" >&2
      exit 1
    fi
    sudo=(sudo)
  fi
  echo "installing: ${missing[*]}"
  # env inside sudo: sudo drops the caller's environment, DEBIAN_FRONTEND with it.
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
# The tensorboard package in .venv-tests (PyPI), for test_tensorboard.cpp's check with TensorBoard's reader.
"$(dirname "$0")/install-test-python.sh"
# With the CUDA toolkit: the cuDNN frontend's headers, for cuDNN's fused attention.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  python3 "$(dirname "$0")/fetch_cudnn_frontend.py"
fi
