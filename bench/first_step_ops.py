#!/usr/bin/env python3
"""first_step_ops.py: where a run's first step spends its one-time work, operation by operation.

Runs `anatomy profile --profile-warmup 0 --profile-steps 3`, so that the first profiled step is the run's
first, and compares each operation's time (summed over layers) in that step with the last profiled step's,
from the profile's trace.json (one track per step). Each operation is bracketed by CUDA events, so host
work done inside it while the GPU waits (building a cuDNN graph, creating a cuBLASLt plan, timing GEMM
candidates, growing the memory pool) shows as that operation's time.

    python3 bench/first_step_ops.py --anatomy build/anatomy [--batch 64] [--precision bf16] [--tf32 | --split-tf32]
                                    [--top 15] [--env NAME=VALUE ...] [--json out.json] [--no-warm-up]

Before the profile it trains 2 steps with the same flags (unless --no-warm-up), as any earlier run on the
machine would have: each product shape's cuBLASLt algorithms are timed there and cached, and cuDNN's
attention plans are built and kept, so the profiled first step shows what every run's first step pays.
`--device cpu --precision fp32 --model bert-tiny --seq-len 32` is a dry run of the script.
"""
import argparse
import collections
import json
import os
import sys

from bench_util import run, scratch_dir


def step_ops(trace_path):
    """{step track: {operation name: ms}} and {step track: span ms} from a trace.json."""
    with open(trace_path) as f:
        trace = json.load(f)
    events = [e for e in (trace["traceEvents"] if isinstance(trace, dict) else trace) if e.get("ph") == "X"]
    ops = collections.defaultdict(lambda: collections.defaultdict(float))
    bounds = {}
    for e in events:
        ops[e["tid"]][e["name"]] += e["dur"] / 1000.0
        lo, hi = bounds.get(e["tid"], (float("inf"), float("-inf")))
        bounds[e["tid"]] = (min(lo, e["ts"]), max(hi, e["ts"] + e["dur"]))
    return ops, {t: (hi - lo) / 1000.0 for t, (lo, hi) in bounds.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--anatomy", required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--model", default="bert-large-uncased")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a dry run of this script")
    p.add_argument("--top", type=int, default=15, help="operations listed")
    p.add_argument("--env", nargs="*", default=[], metavar="NAME=VALUE", help="environment of the profiled run")
    products = p.add_mutually_exclusive_group()
    products.add_argument("--tf32", action="store_true", help="TF32 float32 products (bench/compare.py's bf16 rows)")
    products.add_argument("--split-tf32", action="store_true", help="split-TF32 float32 products")
    p.add_argument("--no-warm-up", action="store_true", help="profile without the 2-step warm-up run")
    p.add_argument("--json")
    args = p.parse_args()
    env = dict(os.environ)
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            sys.exit(f"--env {item}: expected NAME=VALUE")
        env[name] = value
    flags = ["--model", args.model, "--dummy-seq-len", str(args.seq_len), "--device", args.device, "--no-progress",
             "--per-device-train-batch-size", str(args.batch)]
    if args.precision != "fp32":
        flags.append("--" + args.precision)
    if args.tf32:
        flags.append("--tf32")
    if args.split_tf32:
        flags.append("--split-tf32")
    if not args.no_warm_up:
        with scratch_dir() as warm:
            run([args.anatomy, "train"] + flags + ["--dummy-size", str(2 * args.batch), "--max-steps", "2",
                                                   "--output-dir", warm], env=env)
    cmd = [args.anatomy, "profile"] + flags + ["--profile-warmup", "0", "--profile-steps", "3"]
    with scratch_dir() as tmp:
        run(cmd + ["--output-dir", tmp], env=env)
        ops, spans = step_ops(os.path.join(tmp, "trace.json"))
    steps = sorted(ops)
    if len(steps) < 2:
        sys.exit(f"trace.json has {len(steps)} step tracks, 2 or more expected")
    first, last = ops[steps[0]], ops[steps[-1]]
    # "step" is the track's whole-step event; its span is printed on its own line.
    rows = sorted(((first[k] - last.get(k, 0.0), k, first[k], last.get(k, 0.0)) for k in first if k != "step"),
                  reverse=True)
    products = " (TF32 products)" if args.tf32 else " (split-TF32 products)" if args.split_tf32 else ""
    print(f"{args.model}, {args.precision}{products}, batch {args.batch}, {args.seq_len} tokens: first profiled step "
          f"(the run's first) against the last of {len(steps)}")
    print()
    print(f"step span: {spans[steps[0]]:.2f} ms first, {spans[steps[-1]]:.2f} ms last "
          f"(+{spans[steps[0]] - spans[steps[-1]]:.2f} ms)")
    print()
    print("| operation (all layers) | first step ms | last step ms | extra ms |")
    print("| --- | ---: | ---: | ---: |")
    for extra, name, a, b in rows[:args.top]:
        print(f"| {name} | {a:.2f} | {b:.2f} | {extra:+.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(args=vars(args), spans={str(t): spans[t] for t in steps},
                           operations=[dict(name=n, first_ms=a, last_ms=b, extra_ms=x) for x, n, a, b in rows]),
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
