#!/usr/bin/env python3
"""ab.py: two anatomy binaries alternated on one machine, at the same settings (an A/B of a change).

Calls of the device machine land on different GPUs of one model, whose speeds differ by a percent or two: more
than most single changes gain. So a change is measured against its parent in one call: both binaries warmed up
once (cuBLASLt's tuning, cuDNN's plans), then `anatomy train` run R times each, alternating A, B, A, B, ...
Each run's figure is its `Samples/second after the first step` (the steady rate). The table gives every run, the
medians and B's change against A.

    python3 bench/ab.py --a old/anatomy --b build/anatomy --configs bf16-b32,bf16-b64,fp32-b4 [--repeats 2]

--env-a and --env-b (NAME=VALUE, repeatable) set environment variables for one side's runs, so one binary
can be measured against itself under two settings, for example `--a build/anatomy --b build/anatomy --env-b
ANATOMY_ATTENTION=hopper`.

A configuration is PRECISION-bBATCH (precision: bf16, fp16, fp32; bf16 and fp16 also turn on --tf32, as
compare.py's rows do). Each run trains --samples dummy sequences of --seq-len tokens. `--device cpu --model
bert-tiny --seq-len 32 --samples 64` is a dry run of the script.
"""
import argparse
import json
import os
import re
import statistics
import sys

from bench_util import figure, run, scratch_dir


def parse_env(items, flag):
    """NAME=VALUE pairs as a dict."""
    env = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise SystemExit(f"{flag}: '{item}' is not NAME=VALUE")
        env[name] = value
    return env


def parse_config(text):
    m = re.fullmatch(r"(bf16|fp16|fp32)-b(\d+)", text)
    if not m:
        raise SystemExit(f"--configs: '{text}' is not PRECISION-bBATCH (for example bf16-b32)")
    return m.group(1), int(m.group(2))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, help="the baseline binary")
    p.add_argument("--b", required=True, help="the changed binary")
    p.add_argument("--configs", default="bf16-b32,bf16-b64,fp32-b4")
    p.add_argument("--repeats", type=int, default=2, help="runs of each binary per configuration")
    p.add_argument("--samples", type=int, default=2048, help="dummy sequences a run trains on")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--model", default="bert-large-uncased")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a dry run of this script")
    p.add_argument("--env-a", action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable for A's runs (repeatable)")
    p.add_argument("--env-b", action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable for B's runs (repeatable)")
    p.add_argument("--json")
    args = p.parse_args()
    side_env = {"a": dict(os.environ, **parse_env(args.env_a, "--env-a")),
                "b": dict(os.environ, **parse_env(args.env_b, "--env-b"))}
    if args.repeats < 1 or args.samples < 1:
        raise SystemExit("--repeats and --samples must be positive")
    configs = [parse_config(c) for c in args.configs.split(",") if c]
    if not configs:
        raise SystemExit("--configs: no configuration given")

    def train(side, precision, batch, samples, out):
        binary = args.a if side == "a" else args.b
        cmd = [binary, "train", "--model", args.model, "--device", args.device, "--dummy-size", str(samples),
               "--dummy-seq-len", str(args.seq_len), "--per-device-train-batch-size", str(batch), "--output-dir",
               out, "--no-progress"]
        if precision != "fp32":
            cmd += ["--" + precision, "--tf32"] if args.device == "cuda" else ["--" + precision]
        text = run(cmd, env=side_env[side])
        return float(figure(r"^Samples/second after the first step: ([0-9.]+)", text, "steady rate")[-1])

    rows = []
    with scratch_dir() as out:
        for precision, batch in configs:
            # Warm-up: each binary once (tuning caches, plans), not counted.
            for side in ("a", "b"):
                train(side, precision, batch, 2 * batch, out)
            rates = {"a": [], "b": []}
            for _ in range(args.repeats):
                for side in ("a", "b"):
                    rates[side].append(train(side, precision, batch, args.samples, out))
                    # each run's figure as it comes, so that a run cut short by a time limit keeps what it measured
                    print(f"{precision}-b{batch} {side.upper()} run {len(rates[side])}: {rates[side][-1]:.2f} samples/s",
                          flush=True)
            a, b = statistics.median(rates["a"]), statistics.median(rates["b"])
            rows.append({"config": f"{precision}-b{batch}", "a": rates["a"], "b": rates["b"], "median_a": a,
                         "median_b": b, "change": b / a - 1.0})

    def label(binary, extra):
        return binary + "".join(f" {item}" for item in extra)

    print(f"A = {label(args.a, args.env_a)}, B = {label(args.b, args.env_b)}; steady samples/s (after the first step), "
          f"{args.samples} samples a run\n")
    print("| configuration | A (runs) | B (runs) | A median | B median | B against A |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['config']} | {', '.join(f'{x:.2f}' for x in r['a'])} | {', '.join(f'{x:.2f}' for x in r['b'])} "
              f"| {r['median_a']:.2f} | {r['median_b']:.2f} | {100 * r['change']:+.1f}% |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
