#!/usr/bin/env bash
# test_wheel.sh BINARY WORKDIR: builds the wheel (scripts/build-wheel.py) with
# BINARY in it, installs it in a fresh virtual environment without the network,
# and runs check_wheel.py with that environment's Python, outside the source
# tree, so that `import anatomy` finds the installed package.
set -euo pipefail
binary=$(realpath "$1")
work=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work"
mkdir -p "$work"
if ! python3 -c "import ensurepip, venv" 2>/dev/null; then
  echo "python3 has no venv/ensurepip: install python3-venv (scripts/install-deps.sh does)" >&2
  exit 1
fi
wheel=$(python3 "$root/scripts/build-wheel.py" --binary "$binary" --out "$work/dist")
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --no-index --disable-pip-version-check --quiet "$wheel"
cd "$work"
env -u ANATOMY_BINARY "$work/venv/bin/python" "$root/tests/python/check_wheel.py" "$binary" "$work/venv"
