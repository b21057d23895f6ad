#!/usr/bin/env bash
# install-deps.sh: installs the Debian packages anatomy builds with, when missing.
# The CUDA toolkit is optional: when nvcc is present the CUDA target is built too.
# openmpi-bin gives the tests mpirun, which they start CPU ranks with.
set -euo pipefail
# clang, its libFuzzer and sanitizer runtimes (libclang-rt-14-dev) and llvm
# (llvm-symbolizer, for the sanitizers' stack traces): the fuzzers (fuzz/).
packages=(build-essential cmake ninja-build nlohmann-json3-dev libcli11-dev libfmt-dev
          libopenblas-dev libpcre2-dev libgtest-dev libgmock-dev chromium python3 python3-venv openmpi-bin
          clang llvm libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
# The tensorboard package in .venv-tests (PyPI), for test_tensorboard.cpp's check with TensorBoard's reader.
"$(dirname "$0")/install-test-python.sh"
# With the CUDA toolkit: the cuDNN frontend's headers, for cuDNN's fused attention.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  python3 "$(dirname "$0")/fetch_cudnn_frontend.py"
fi
