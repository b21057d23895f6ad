#!/usr/bin/env bash
# device_check.sh: what the foundation checks on a GPU machine, in one call: the GPU tests, the
# `anatomy train` defaults there, Hugging Face loading our output, and fresh fixtures made with
# transformers. Expects the binaries in .device/ (anatomy, anatomy_gpu_tests); writes to $OUT.
set -uo pipefail
export ANATOMY_BINARY=$PWD/.device/anatomy
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "== GPU tests"; .device/anatomy_gpu_tests 2>&1 | tail -15
echo "== anatomy train --max-steps 2 (defaults otherwise)"; .device/anatomy train --max-steps 2 --no-progress 2>&1 | head -8
echo "== HF loads what anatomy writes"
.device/anatomy train --model bert-tiny --dummy-size 8 --dummy-seq-len 16 --max-steps 2 --output-dir /tmp/o --device cpu --no-progress > /dev/null &&
.device/anatomy forward --model /tmp/o --inputs tests/fixtures/bert-tiny-cls-padded/reference.safetensors --output /tmp/f.safetensors --device cpu 2>&1 | tail -2 || true
# the padded fixture's ids are for a 1024 vocabulary; bert-tiny's is 30522, so they are valid there
python3 tests/tools/check_hf_loads.py /tmp/o tests/fixtures/bert-tiny-cls-padded/reference.safetensors /tmp/f.safetensors
echo "== fixtures"; python3 tests/tools/make_fixture.py /tmp/fixtures && tar -C /tmp -czf $OUT/fixtures.tgz fixtures && ls -la $OUT
