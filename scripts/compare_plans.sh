#!/usr/bin/env bash
# compare_plans.sh: the memory plans of two anatomy binaries, byte for byte.
#
#   scripts/compare_plans.sh OLD_BINARY NEW_BINARY [OUT_DIR]
#
# Runs `anatomy estimate --plan-json` for the seed run and for other
# configurations (gradient checkpointing, full and selective; 8-bit AdamW;
# fp16; bf16 at batch 32; ZeRO-2 on two ranks; each attention path: cuDNN,
# our flash kernels, an A100 without the Hopper kernels, a head size without
# fused kernels in bf16 and float32; split TF32 with the whole last layer;
# Adafactor; training with evaluation on text data) with each binary, for an
# H100 unless a configuration names another GPU (no GPU is needed: the plan
# runs on the meta backend), and compares the JSON plans and the printed
# estimates.
# Exits non-zero when any differs. A change to the engine that should not move
# a byte of memory (a refactoring) is checked with it, old binary against new.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 OLD_BINARY NEW_BINARY [OUT_DIR]" >&2
  exit 2
fi
old=$1
new=$2
out=${3:-$(mktemp -d)}
here=$(cd "$(dirname "$0")/.." && pwd)
text=$here/tests/fixtures/license-text
mkdir -p "$out"

configs=(
  "seed|"
  "checkpointing|--gradient-checkpointing"
  "selective|--gradient-checkpointing --gradient-checkpointing-policy selective --bf16 --per-device-train-batch-size 16"
  "adamw8bit|--optim adamw_8bit"
  "fp16|--fp16 --per-device-train-batch-size 8"
  "bf16-b32|--bf16 --tf32 --per-device-train-batch-size 32"
  "zero2-2ranks|--bf16 --per-device-train-batch-size 16 --zero-stage 2 --nproc 2"
  "cudnn|--attention cudnn --bf16 --per-device-train-batch-size 8"
  "flash|--attention anatomy --bf16 --per-device-train-batch-size 8"
  "a100-bf16|--gpu a100-80gb --bf16 --per-device-train-batch-size 8"
  "split-tf32|--split-tf32 --last-layer all"
  "adafactor|--optim adafactor --bf16"
  "head16-bf16|--model $here/tests/fixtures/bert-cls5-wide --bf16 --dummy-seq-len 32"
  "head16-fp32|--model $here/tests/fixtures/bert-cls5-wide --dummy-seq-len 32"
  "evaluate|--model bert-base-uncased --train-file $text/train.jsonl --validation-file $text/validation.jsonl --vocab $text/vocab.txt --eval-strategy steps --per-device-train-batch-size 16 --bf16"
)

status=0
for entry in "${configs[@]}"; do
  name=${entry%%|*}
  flags=${entry#*|}
  for side in old new; do
    bin=$old
    [ "$side" = new ] && bin=$new
    # shellcheck disable=SC2086
    gpu=(--gpu h100-80gb)
    [[ " $flags " == *" --gpu "* ]] && gpu=()
    "$bin" estimate "${gpu[@]}" $flags --plan-json "$out/$name.$side.json" >"$out/$name.$side.txt" 2>&1 ||
      { echo "$name: $side binary failed (see $out/$name.$side.txt)"; status=1; continue 2; }
  done
  if cmp -s "$out/$name.old.json" "$out/$name.new.json" && cmp -s "$out/$name.old.txt" "$out/$name.new.txt"; then
    peak=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['ledger']['peak_total'])" "$out/$name.new.json")
    echo "$name: identical (ledger peak $peak bytes)"
  else
    echo "$name: DIFFERS"
    diff "$out/$name.old.json" "$out/$name.new.json" | head -20 || true
    diff "$out/$name.old.txt" "$out/$name.new.txt" | head -20 || true
    status=1
  fi
done
echo "plans and estimates in $out"
exit $status
