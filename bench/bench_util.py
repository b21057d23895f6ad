"""bench_util.py: what the bench scripts that drive `anatomy` share."""
import json
import os
import re
import subprocess
import sys
import tempfile


def run(cmd, env=None):
    """Runs `cmd` (echoed to stderr) and returns its stdout; on a non-zero exit prints the ends of its output and
    stops the script."""
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-4000:] + p.stderr[-4000:])
        raise SystemExit(f"failed with exit code {p.returncode}: {' '.join(cmd)}")
    return p.stdout


def figure(pattern, text, what):
    """Every match of `pattern` (its group) on the lines of `text`; none stops the script, naming `what`."""
    found = re.findall(pattern, text, re.M)
    if not found:
        raise SystemExit(f"no {what} in the output:\n{text[-3000:]}")
    return found


def steady_rate(log_dir):
    """Samples/s after the first log window (start-up, the first step's one-time work), from log.jsonl's
    windows: the steps of the later windows over their summed time (each window's rate is its samples over its
    time, and every step has the same samples)."""
    records = [json.loads(line) for line in open(os.path.join(log_dir, "log.jsonl"))]
    windows = [(r["step"], r["samples_per_second"]) for r in records if "samples_per_second" in r]
    if len(windows) < 2:
        return None
    steps = time = 0.0
    for (prev, _), (step, rate) in zip(windows, windows[1:]):
        steps += step - prev
        time += (step - prev) / rate
    return steps / time


def scratch_dir():
    """The runs' output directory, in memory when /dev/shm exists (the model is saved there at the end, outside the
    timed loop)."""
    return tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
