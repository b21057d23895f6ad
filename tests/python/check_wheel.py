"""check_wheel.py BINARY VENV: the installed package against the command line.

Run by test_wheel.sh with the virtual environment's Python. The reference is
`BINARY estimate --json` run here with flags written out by hand, not through
the package's own translation of keyword arguments.
"""

import json
import subprocess
import sys
from pathlib import Path

import anatomy

binary, venv = sys.argv[1], Path(sys.argv[2]).resolve()


def check(condition, what):
    if not condition:
        sys.exit(f"check_wheel.py: FAILED: {what}")


# The package is the installed one, with its own copy of the binary.
check(venv in Path(anatomy.__file__).resolve().parents, f"anatomy imported from {anatomy.__file__}, not {venv}")
check(venv in Path(anatomy.binary()).resolve().parents, f"the binary is {anatomy.binary()}, not the wheel's")

# estimate(): the same document as the command line's --json.
plan = anatomy.estimate(model="bert-tiny", device="cpu", dummy_seq_len=32, per_device_train_batch_size=4)
cli = json.loads(subprocess.run([binary, "estimate", "--json", "--model", "bert-tiny", "--device", "cpu",
                                 "--dummy-seq-len", "32", "--per-device-train-batch-size", "4"],
                                check=True, capture_output=True, text=True).stdout)
check(plan == cli, "anatomy.estimate() differs from `anatomy estimate --json`")
check(plan["ledger"]["peak_total"] > 0, "a plan with no peak")
check(plan["batch_size"] == 4 and plan["sequence_length"] == 32, "the plan's batch and sequence length")
listed = sum(b["bytes"] for b in plan["peak_buffers"]["buffers"]) + plan["peak_buffers"]["other_bytes"]
check(listed == plan["ledger"]["peak_total"], "the peak's buffers do not add up to the peak")
# Another batch size changes the plan: the flags reach the binary.
bigger = anatomy.estimate(model="bert-tiny", device="cpu", dummy_seq_len=32, per_device_train_batch_size=8)
check(bigger["ledger"]["at_peak"]["activations"] > plan["ledger"]["at_peak"]["activations"],
      "batch 8 holds no more activations than batch 4")

# train(): the records of log.jsonl, one per logging step.
records = list(anatomy.train(model="bert-tiny", device="cpu", dummy_size=16, dummy_seq_len=16,
                             per_device_train_batch_size=4, logging_steps=1, seed=3))
steps = [r["step"] for r in records if "loss" in r]
check(steps == [1, 2, 3, 4], f"train() yielded steps {steps}")

# Errors: the binary's one line, in an exception.
try:
    anatomy.estimate(model="bert-tiny", device="cpu", per_device_train_batch_size=0)
    check(False, "a batch size of 0 was accepted")
except anatomy.AnatomyError as e:
    check("per-device-train-batch-size" in e.message, f"the error names the flag: {e.message}")

print("check_wheel.py: the installed package matches the command line")
