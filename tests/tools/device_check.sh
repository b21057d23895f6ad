#!/usr/bin/env bash
# device_check.sh: the checks that need a GPU machine, in one call: all GPU tests, the seed
# experiment (`anatomy train` with no flags), and Hugging Face loading what `anatomy train`
# writes. Expects the binaries in .device/ (anatomy, anatomy_gpu_tests); writes logs to $OUT.
set -uo pipefail
export ANATOMY_BINARY=$PWD/.device/anatomy ANATOMY_FIXTURES_DIR=$PWD/tests/fixtures
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "== GPU tests"
.device/anatomy_gpu_tests > $OUT/gpu_tests.log 2>&1; echo "exit $?"; grep -E "FAILED|PASSED|Failure" $OUT/gpu_tests.log | head -30
echo "== HF loads what anatomy writes"
.device/anatomy train --model bert-tiny --dummy-size 8 --dummy-seq-len 16 --max-steps 2 --output-dir /tmp/o --device cuda --no-progress > /dev/null &&
.device/anatomy forward --model /tmp/o --inputs tests/fixtures/bert-tiny-cls/reference.safetensors --output /tmp/f.safetensors --device cpu &&
python3 tests/tools/check_hf_loads.py /tmp/o tests/fixtures/bert-tiny-cls/reference.safetensors /tmp/f.safetensors 2>&1 | grep -v Loading
echo "== the seed experiment: anatomy train"
.device/anatomy train --no-progress 2>&1 | tee $OUT/seed.log
