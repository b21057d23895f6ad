#!/usr/bin/env bash
# The one-time work of a training run's first step: a 12-step bf16 batch-64
# bert-large run on the GPU with a log record every step; prints the first
# three steps' milliseconds and the mean of the rest, under the environment
# given as NAME=VALUE arguments (e.g. ANATOMY_ATTENTION=anatomy).
#   bench/first_steps.sh [--anatomy PATH] [NAME=VALUE ...]
set -euo pipefail
anatomy=build/anatomy
if [[ "${1:-}" == "--anatomy" ]]; then
  anatomy=$2
  shift 2
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if ! env "$@" "$anatomy" train --bf16 --tf32 --per-device-train-batch-size 64 --max-steps 12 --logging-steps 1 \
  --no-progress --output-dir "$out" > "$out/train.txt" 2>&1; then
  tail -5 "$out/train.txt" >&2
  echo "first_steps.sh: $anatomy train failed" >&2
  exit 1
fi
grep -E "^Attention" "$out/train.txt" || true
python3 - "$out/log.jsonl" "$*" <<'PY'
import json, sys
ms = [64 / j["samples_per_second"] * 1000 for j in map(json.loads, open(sys.argv[1])) if "samples_per_second" in j]
if len(ms) < 4:
    sys.exit(f"{sys.argv[1]}: {len(ms)} step records, 4 or more expected")
print(f"{sys.argv[2] or '(default)'}: first steps {', '.join(f'{m:.1f}' for m in ms[:3])} ms; "
      f"steps 4-{len(ms)}: {sum(ms[3:]) / len(ms[3:]):.1f} ms")
PY
