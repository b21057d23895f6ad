#!/usr/bin/env bash
# check_torchrun.sh: checks that torchrun starts anatomy's ranks as `anatomy
# launch` does. On a machine with two GPUs (or --device cpu) and torchrun, it
# trains bert-mini for STEPS steps three ways:
#   1. anatomy launch --nproc-per-node 2 -- train ...
#   2. torchrun --nproc-per-node 2 --no-python anatomy train ...   (no secret:
#      rank 0 hands one to rank 1 in a file of this user's; torchrun's agent
#      keeps MASTER_PORT, anatomy's store takes MASTER_PORT + 1)
#   3. the same with ANATOMY_JOB_SECRET given, as several nodes need
# and compares the losses of log.jsonl step by step: it prints the largest
# relative difference and exits 1 when it exceeds TOLERANCE (default 0: the
# same bits, as two runs of the same seed give).
#
#   scripts/check_torchrun.sh [path/to/anatomy] [extra train flags...]
#   STEPS=50 TOLERANCE=0 DEVICE=cuda scripts/check_torchrun.sh build/anatomy
set -euo pipefail
bin=${1:-build/anatomy}
shift || true
bin=$(readlink -f "$bin")
steps=${STEPS:-50}
tolerance=${TOLERANCE:-0}
device=${DEVICE:-}
command -v torchrun >/dev/null || { echo "error: torchrun is not on PATH" >&2; exit 2; }
[ -x "$bin" ] || { echo "error: $bin is not an anatomy binary" >&2; exit 2; }
out=$(mktemp -d -t anatomy-torchrun-XXXXXX)
trap 'rm -rf "$out"' EXIT
train=(train --model bert-mini --dummy-size 2048 --dummy-seq-len 128 --per-device-train-batch-size 16
       --max-steps "$steps" --logging-steps 1 --seed 7 --no-progress)
[ -n "$device" ] && train+=(--device "$device")
train+=("$@")

echo "== anatomy launch"
"$bin" launch --nproc-per-node 2 --master-port 29611 -- "${train[@]}" --output-dir "$out/launch" \
  > "$out/launch.log" 2>&1 || { cat "$out/launch.log"; exit 1; }
tail -n 3 "$out/launch.log"

echo "== torchrun --nproc-per-node 2 --no-python (no secret given)"
env -u ANATOMY_JOB_SECRET torchrun --nproc-per-node 2 --master-port 29621 --no-python \
  "$bin" "${train[@]}" --output-dir "$out/torchrun" > "$out/torchrun.log" 2>&1 \
  || { cat "$out/torchrun.log"; exit 1; }
tail -n 3 "$out/torchrun.log"

echo "== torchrun with ANATOMY_JOB_SECRET"
ANATOMY_JOB_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n') torchrun --nproc-per-node 2 --master-port 29631 \
  --no-python "$bin" "${train[@]}" --output-dir "$out/secret" > "$out/secret.log" 2>&1 \
  || { cat "$out/secret.log"; exit 1; }
tail -n 3 "$out/secret.log"

python3 - "$out" "$tolerance" <<'PY'
import json, sys
out, tolerance = sys.argv[1], float(sys.argv[2])
def losses(name):
    rows = {}
    for line in open(f"{out}/{name}/log.jsonl"):
        r = json.loads(line)
        if "loss" in r:
            rows[r["step"]] = r.get("step_loss", r["loss"])  # the step's own loss
    return rows
base = losses("launch")
worst = 0.0
for name in ("torchrun", "secret"):
    other = losses(name)
    if sorted(other) != sorted(base):
        print(f"{name}: steps {sorted(other)[:5]}... differ from launch's {sorted(base)[:5]}...")
        sys.exit(1)
    diff = max(abs(other[s] - base[s]) / max(abs(base[s]), 1e-30) for s in base)
    same = all(other[s] == base[s] for s in base)
    print(f"{name}: {len(base)} steps, first loss {other[min(base)]:.6f}, last {other[max(base)]:.6f}; "
          f"largest relative difference from launch {diff:.3g}{' (the same bits)' if same else ''}")
    worst = max(worst, diff)
sys.exit(0 if worst <= tolerance else 1)
PY
