#!/usr/bin/env python3
"""launch_bound.py: are small batches bound by the host's kernel launches? (the CUDA issue's "no launch-bound steps")

For each batch, `anatomy profile` (5 steps after 3 of warm-up) gives the measured step and the sum of its
operations' CUDA-event times: the difference is time in which the GPU ran none of the step's operations (waiting
for the host to launch the next one, or for a host read-back). Then `anatomy train` at the same batch, unprofiled,
gives the step time the user sees: the run's samples/s (start-up included), and the steady step from its log
windows of --logging-steps steps after the first (as bench/data_parallel.py's steady columns). A step whose
operations cover most of it, and whose unprofiled steady time is no longer than the profiled one, is not
launch-bound: the host queues the kernels faster than the GPU runs them.

    python3 bench/launch_bound.py --anatomy build/anatomy [--batch 1 2 4 8] [--precision bf16] [--steps 50]

`--device cpu --precision fp32 --model bert-tiny --seq-len 32` is a dry run of the script.
"""
import argparse
import json
import os
import re
import sys

from bench_util import run, scratch_dir, steady_rate


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--anatomy", required=True)
    p.add_argument("--batch", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--model", default="bert-large-uncased")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a dry run of this script")
    p.add_argument("--steps", type=int, default=50, help="steps of each unprofiled run")
    p.add_argument("--logging-steps", type=int, default=10, help="log window of the unprofiled runs")
    p.add_argument("--json")
    args = p.parse_args()
    common = ["--model", args.model, "--dummy-seq-len", str(args.seq_len), "--device", args.device, "--no-progress"]
    if args.precision != "fp32":
        common.append("--" + args.precision)
    rows = []
    print(f"{args.model}, {args.precision}, {args.seq_len} tokens")
    print()
    print("| batch | profiled step ms | in operations ms | GPU without an operation ms (%) | unprofiled step ms | "
          "unprofiled samples/s | unprofiled steady step ms |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for b in args.batch:
        with scratch_dir() as tmp:  # the run saves the model there at its end
            run([args.anatomy, "profile"] + common + ["--per-device-train-batch-size", str(b), "--output-dir", tmp])
            with open(os.path.join(tmp, "profile.json")) as f:
                prof = json.load(f)
            out = run([args.anatomy, "train"] + common + ["--per-device-train-batch-size", str(b), "--dummy-size",
                                                           str(b * args.steps), "--output-dir", tmp, "--logging-steps",
                                                           str(args.logging_steps)])
            steady = steady_rate(tmp)
        sps = float(re.findall(r"^Samples/second: ([0-9.]+)", out, re.M)[-1])
        step, ops = prof["step_ms"], prof["ops_ms"]
        steady_ms = 1000 * b / steady if steady else None
        row = dict(batch=b, profiled_step_ms=step, ops_ms=ops, gap_ms=step - ops, unprofiled_step_ms=1000 * b / sps,
                   samples_per_second=sps, steady_step_ms=steady_ms)
        rows.append(row)
        print(f"| {b} | {step:.2f} | {ops:.2f} | {step - ops:.2f} ({100 * (step - ops) / step:.1f}%) | "
              f"{row['unprofiled_step_ms']:.2f} | {sps:.2f} | "
              f"{'-' if steady_ms is None else f'{steady_ms:.2f}'} |", flush=True)
    print()
    print("The unprofiled step includes the run's start-up spread over its steps (and the first step's one-time "
          "work); the steady step leaves out the first log window; the profiled one is a steady-state step that "
          "also waits for its event timings.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(args=vars(args), rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
