"""Loads a run's TensorBoard events with TensorBoard's own reader
(tensorboard.backend.event_processing.event_accumulator.EventAccumulator) and
prints, as JSON, every scalar tag with its (step, value) pairs:
tests/test_tensorboard.cpp compares them with the run's trainer_state.json.

    python tests/tools/check_tensorboard.py LOGGING_DIR
Exit 2 (with a line saying so) when the tensorboard package is missing.
"""
import json
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError as e:  # the test skips, naming the reason
    print(f"tensorboard is not installed: {e}")
    sys.exit(2)

import os

# A logging directory holds one directory per run (Trainer's runs/<date>_<host>), as TensorBoard's
# multiplexer reads it: each directory with event files is a run. The test's holds one.
out = {}
for path, _, files in sorted(os.walk(sys.argv[1])):
    if not any(f.startswith("events.out.tfevents.") for f in files):
        continue
    acc = EventAccumulator(path, size_guidance={"scalars": 0})
    acc.Reload()
    for tag in acc.Tags()["scalars"]:
        out.setdefault(tag, []).extend([s.step, s.value] for s in acc.Scalars(tag))
print(json.dumps(out, sort_keys=True))
