#!/usr/bin/env python3
"""profile_scaling.py: where a data-parallel step loses time against one GPU, operation by operation.

Runs `anatomy profile` on one GPU, then `anatomy launch --nproc-per-node N -- profile` with the same per-GPU
batch, in one call on one machine, and compares rank 0's profile.json with the 1-GPU one: the step, forward,
backward and optimizer, the communication the step waited for, and every operation (summed over layers) whose
time moved, largest change first. An operation slower on N GPUs while doing the same work points at
interference (NCCL's kernels taking SMs or memory bandwidth from it); the communication rows are the waits that
overlapping did not hide.

    python3 bench/profile_scaling.py --anatomy build/anatomy [--gpus 4] [--batch 32] [--zero-stage 0]
                                     [--profile-steps 5] [--top 15] [--json out.json]

`--device cpu --precision fp32 --model bert-tiny --seq-len 32` is a dry run of the script (two CPU ranks through
the store).
"""
import argparse
import json
import os
import sys
import tempfile

from bench_util import run


def profile_args(args, out_dir):
    flags = ["profile", "--model", args.model, "--dummy-seq-len", str(args.seq_len), "--device", args.device,
             "--no-progress", "--per-device-train-batch-size", str(args.batch), "--profile-warmup",
             str(args.profile_warmup), "--profile-steps", str(args.profile_steps), "--output-dir", out_dir]
    if args.precision != "fp32":
        flags.append("--" + args.precision)
    return flags


def load(path):
    with open(path) as f:
        return json.load(f)


def ops_by_key(profile):
    return {(o["part"], o["op"], o["operand"]): o for o in profile["operations"]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--anatomy", required=True)
    p.add_argument("--gpus", type=int, default=4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--zero-stage", type=int, default=0, choices=[0, 1, 2, 3])
    p.add_argument("--model", default="bert-large-uncased")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a dry run of this script")
    p.add_argument("--profile-warmup", type=int, default=3)
    p.add_argument("--profile-steps", type=int, default=5)
    p.add_argument("--top", type=int, default=15, help="operations listed")
    p.add_argument("--json")
    args = p.parse_args()
    if args.gpus < 2:
        raise SystemExit("--gpus: at least 2 (the 1-GPU run is always made)")

    with tempfile.TemporaryDirectory() as tmp:
        one_dir, many_dir = os.path.join(tmp, "one"), os.path.join(tmp, "many")
        run([args.anatomy] + profile_args(args, one_dir))
        run([args.anatomy, "launch", "--nproc-per-node", str(args.gpus), "--"] + profile_args(args, many_dir) +
            ["--zero-stage", str(args.zero_stage)])
        one = load(os.path.join(one_dir, "profile.json"))
        many = load(os.path.join(many_dir, "profile.json"))
        others = [load(os.path.join(many_dir, f"rank-{r}", "profile.json")) for r in range(1, args.gpus)]

    comm = lambda prof: prof["classes"]["communication"]["ms"]
    print(f"{args.model}, {args.precision}, per-GPU batch {args.batch}, ZeRO stage {args.zero_stage}: 1 GPU against "
          f"{args.gpus} (rank 0), mean of {args.profile_steps} profiled steps")
    print()
    print(f"| | 1 GPU ms | {args.gpus} GPUs ms | change ms |")
    print("| --- | ---: | ---: | ---: |")
    for name, key in [("step (measured)", "step_ms"), ("forward", "forward_ms"), ("backward", "backward_ms"),
                      ("optimizer", "optimizer_ms"), ("data", "data_ms"), ("other", "other_ms")]:
        print(f"| {name} | {one[key]:.2f} | {many[key]:.2f} | {many[key] - one[key]:+.2f} |")
    print(f"| communication waited for (in the rows above) | {comm(one):.2f} | {comm(many):.2f} | "
          f"{comm(many) - comm(one):+.2f} |")
    print()
    print("Rank by rank (step ms; communication waited for ms): " + ", ".join(
        f"{r}: {prof['step_ms']:.2f}; {comm(prof):.2f}" for r, prof in enumerate([many] + others)))
    print()

    a, b = ops_by_key(one), ops_by_key(many)
    rows = []
    for key in set(a) | set(b):
        ms_a = a[key]["ms"] if key in a else 0.0
        ms_b = b[key]["ms"] if key in b else 0.0
        calls = (b.get(key) or a.get(key))["calls"]
        cls = (b.get(key) or a.get(key))["class"]
        rows.append(dict(part=key[0], op=key[1], operand=key[2], op_class=cls, calls=calls, one_ms=ms_a, many_ms=ms_b,
                         change_ms=ms_b - ms_a))
    rows.sort(key=lambda r: -abs(r["change_ms"]))
    print(f"Operations whose time moved most (all layers; {args.top} of {len(rows)}):")
    print()
    print(f"| part | op | operand | class | calls | 1 GPU ms | {args.gpus} GPUs ms | change ms | change % |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows[:args.top]:
        pct = f"{100 * r['change_ms'] / r['one_ms']:+.1f}%" if r["one_ms"] > 0 else "new"
        print(f"| {r['part']} | {r['op']} | {r['operand']} | {r['op_class']} | {r['calls']:.0f} | {r['one_ms']:.3f} | "
              f"{r['many_ms']:.3f} | {r['change_ms']:+.3f} | {pct} |")
    moved = sum(r["change_ms"] for r in rows if r["op_class"] != "communication")
    print()
    print(f"Sum of the changes of the computing operations: {moved:+.2f} ms; of the communication rows: "
          f"{comm(many) - comm(one):+.2f} ms; of the step: {many['step_ms'] - one['step_ms']:+.2f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(args=vars(args), one=one, many=many, others=others, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
