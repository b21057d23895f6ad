#!/usr/bin/env bash
# install-test-python.sh: the Python packages that tests read a run's files
# with (tensorboard: test_tensorboard.cpp loads the event files with
# TensorBoard's own reader), in a virtual environment at $1 (default: .venv-tests
# in the repository). The tests find it there, or through ANATOMY_TEST_PYTHON.
set -euo pipefail
venv="${1:-$(cd "$(dirname "$0")/.." && pwd)/.venv-tests}"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import tensorboard" 2>/dev/null; then
  exit 0
fi
# Offline (no PyPI), the packages cannot come: said in one line, and the tests that need them skip
# with that reason (unless ANATOMY_REQUIRE_TENSORBOARD=1, which .ci/run sets only when they came).
if ! { python3 -m venv "$venv" && "$venv/bin/python" -m pip install --quiet --upgrade pip &&
       "$venv/bin/python" -m pip install --quiet tensorboard; }; then
  echo "install-test-python.sh: could not install tensorboard from PyPI into $venv; its test will skip" >&2
  exit 0
fi
"$venv/bin/python" -c "import tensorboard; print('tensorboard', tensorboard.__version__, 'in', '$venv')"
