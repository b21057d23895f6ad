#!/usr/bin/env python3
"""data_parallel.py: anatomy on one GPU against anatomy on N GPUs (data parallel, NCCL), same per-GPU
batch, one run on one machine; and the losses of N GPUs against one GPU at the same global batch.

Throughput (bert-large-uncased, random init, dummy data of 512 tokens, bf16, dropout 0.1): for each
per-GPU batch B, an unmeasured two-step run that fills the GEMM tuning cache (a cold cache costs the first
run about 2 s), then `anatomy train` on GPU 0 with S sequences, then `anatomy launch --nproc-per-node N --
train` with N·S sequences (each rank trains on S), so both runs take the same number of steps. Prints
samples/s, the ratio and the scaling efficiency (ratio / N), and each run's "GPU memory occupied". The
"steady" columns take the rate from the runs' log windows of --logging-steps steps, leaving out the first
(start-up, NCCL's set-up, the first step's one-time work): the efficiency of the steps themselves.

Losses (--losses): `--steps` optimizer steps with global batch G: one GPU with batch G against N GPUs
with G/N each, three times:
- bf16 with dropout 0.1: each rank draws its own masks, so the curves track without being equal
  (reported, not checked);
- bf16 with dropout off: the same computation up to the gradients' summation order, whose float32
  differences can flip the rounding of a bf16 weight copy by one unit (2^-8 relative) here and there:
  each step's loss within --bf16-rtol (default 1e-2, about 2.5 bf16 units of the loss's own resolution);
- fp32 with dropout off: the same computation up to summation order: within --fp32-rtol (1e-5).

Several GPU counts and ZeRO stages in one call (`--gpus 2 4 8 --zero-stage 0 1 2 3`): the 1-GPU run once per
batch, then one launch per (count, stage), one table row each with the scaling efficiency against 1 GPU and
each rank's memory plan (its prediction of NVML use, printed by every rank after training) beside the
measured peak; the losses of each count (and stage) against 1 GPU.

    python3 bench/data_parallel.py --anatomy build/anatomy [--gpus 2 [4 8]] [--batch 32 64] [--samples 2048]
                                   [--zero-stage 0|1|2|3 [...]] [--losses] [--json out.json]
"""
import argparse
import json
import os
import re
import sys
import tempfile

from bench_util import figure, run, scratch_dir, steady_rate


def train_args(args, extra):
    return ["train", "--model", args.model, "--dummy-seq-len", str(args.seq_len), "--device", args.device,
            "--no-progress"] + extra


def precision_flags(args):
    return [] if args.precision == "fp32" else ["--" + args.precision]


def batch_args(args, batch, sequences):
    """`anatomy train`'s flags for `sequences` dummy sequences at this per-GPU batch."""
    return train_args(args, precision_flags(args) + ["--per-device-train-batch-size", str(batch),
                                                     "--dummy-size", str(sequences)])


def warm_up(args, batch):
    """Two steps on one GPU at this batch, unmeasured: the first run on a machine times cuBLASLt's candidates for
    every GEMM shape (seconds) and records its choices in the tuning cache; every measured run after it, on one GPU
    or on N, then starts from the same cache."""
    run([args.anatomy] + batch_args(args, batch, 2 * batch))


def logged(args, out_dir):
    """Log windows for the steady rate, in `out_dir`."""
    return ["--output-dir", out_dir, "--logging-steps", str(args.logging_steps)]


def one_gpu(args, batch):
    with scratch_dir() as tmp:
        out = run([args.anatomy] + batch_args(args, batch, args.samples) + logged(args, tmp))
        steady = steady_rate(tmp)
    return dict(samples_per_second=float(figure(r"^Samples/second: ([0-9.]+)", out, "Samples/second")[-1]),
                steady_samples_per_second=steady, memory_mb=int(figure("^" + memory_pattern(args), out, "memory")[-1]))


def memory_pattern(args):
    return r"GPU memory occupied: ([0-9]+) MB" if args.device == "cuda" else r"CPU memory occupied \(peak RSS\): ([0-9]+) MB"


GIB = {"B": 1 / 2**30, "KiB": 1 / 2**20, "MiB": 1 / 2**10, "GiB": 1.0, "TiB": 2**10}
SIZE = r"([0-9.]+) (" + "|".join(GIB) + ")"  # a size as anatomy prints it: number, unit


def many_gpus(args, batch, gpus, stage):
    """N ranks on N GPUs, each with S sequences, so that the run takes the 1-GPU run's steps."""
    with scratch_dir() as tmp:
        out = run([args.anatomy, "launch", "--nproc-per-node", str(gpus), "--"] +
                  batch_args(args, batch, args.samples * gpus) + ["--zero-stage", str(stage)] + logged(args, tmp))
        steady = steady_rate(tmp)  # rank 0's log: every rank's samples
    sn = float(figure(r"^\[rank 0\] Samples/second: ([0-9.]+)", out, "rank 0's Samples/second")[-1])
    memory = [int(m) for m in figure(r"^\[rank \d+\] " + memory_pattern(args), out, "memory")][-gpus:]
    # Each rank's prediction against its measurement (the plan before training, the anatomy after).
    ledger_err = re.findall(r"^\[rank \d+\] Predicted ledger peak .*?, measured .*? \(error ([+-][0-9.]+)%\)", out, re.M)
    nvml = re.findall(r"^\[rank \d+\] Predicted NVML use " + SIZE + ", measured " + SIZE +
                      r" \(error ([+-][0-9.]+)%\)", out, re.M)
    # NCCL's buffers, measured by each rank when its communicator starts (outside the ledger, inside the plan's context).
    nccl = re.findall(r"^\[rank \d+\] .*NCCL's own buffers " + SIZE, out, re.M)
    return dict(samples_per_second=sn, steady_samples_per_second=steady, memory_per_gpu_mb=memory, nccl_buffers_gib=[float(v) * GIB[u] for v, u in nccl],
                ledger_prediction_error_pct=[float(e) for e in ledger_err],
                predicted_nvml_gib=[float(v) * GIB[u] for v, u, _, _, _ in nvml],
                measured_nvml_gib=[float(v) * GIB[u] for _, _, v, u, _ in nvml],
                nvml_prediction_error_pct=[float(e) for *_, e in nvml])


def losses(log_path):
    out = {}
    with open(log_path) as f:
        for line in f:
            j = json.loads(line)
            if "loss" in j:
                out[j["step"]] = (j.get("step_loss", j["loss"]), j["grad_norm"])  # the step's own loss
    return out


def model_without_dropout(args, tmp):
    """A model directory made by one step of training, its config's dropout set to 0 (made once)."""
    model = os.path.join(tmp, "model-no-dropout")
    if not os.path.isdir(model):
        run([args.anatomy] + train_args(args, ["--max-steps", "1", "--dummy-size", "1", "--output-dir", model]))
        path = os.path.join(model, "config.json")
        config = json.load(open(path))
        config["hidden_dropout_prob"] = config["attention_probs_dropout_prob"] = 0.0
        json.dump(config, open(path, "w"), indent=2)
    return model


def compare_losses(args, tmp, precision, dropout, gpus, stage):
    g = args.global_batch
    if g % gpus:
        raise SystemExit(f"--global-batch {g} does not split over {gpus} GPUs")
    extra = ["--max-steps", str(args.steps), "--logging-steps", "1", "--dummy-size", str(g * args.steps),
             "--learning-rate", "1e-5", "--seed", "7"]
    model = args.model if dropout else model_without_dropout(args, tmp)
    if precision != "fp32":
        extra += ["--" + precision]
    base = ["train", "--model", model, "--dummy-seq-len", str(args.seq_len), "--device", args.device,
            "--no-progress"] + extra
    name = precision + ("-dropout" if dropout else "-no-dropout")
    d1, dn = os.path.join(tmp, name + "-1"), os.path.join(tmp, f"{name}-{gpus}-stage{stage}")
    if not os.path.isdir(d1):  # the 1-GPU run once per case
        run([args.anatomy] + base + ["--per-device-train-batch-size", str(g), "--output-dir", d1])
    run([args.anatomy, "launch", "--nproc-per-node", str(gpus), "--"] + base +
        ["--per-device-train-batch-size", str(g // gpus), "--zero-stage", str(stage), "--output-dir", dn])
    a, b = losses(os.path.join(d1, "log.jsonl")), losses(os.path.join(dn, "log.jsonl"))
    if sorted(a) != sorted(b):
        raise SystemExit(f"{precision}: the runs logged different steps")
    rel = [abs(b[s][0] - a[s][0]) / abs(a[s][0]) for s in sorted(a)]
    rel_norm = [abs(b[s][1] - a[s][1]) / abs(a[s][1]) for s in sorted(a)]
    return dict(precision=precision, dropout=dropout, gpus=gpus, zero_stage=stage, steps=len(a), global_batch=g, max_rel_loss=max(rel),
                mean_rel_loss=sum(rel) / len(rel), max_rel_grad_norm=max(rel_norm),
                first=(a[1][0], b[1][0]), last=(a[max(a)][0], b[max(b)][0]))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--anatomy", required=True)
    p.add_argument("--gpus", type=int, nargs="+", default=[2], help="GPU counts (each a launch)")
    p.add_argument("--model", default="bert-large-uncased")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batch", type=int, nargs="+", default=[32, 64])
    p.add_argument("--samples", type=int, default=2048, help="sequences per GPU in the throughput runs")
    p.add_argument("--logging-steps", type=int, default=16,
                   help="log window of the throughput runs; the steady rate leaves out the first window")
    p.add_argument("--losses", action="store_true", help="also compare the losses (bf16 and fp32)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--global-batch", type=int, default=16)
    p.add_argument("--fp32-rtol", type=float, default=1e-5)
    p.add_argument("--bf16-rtol", type=float, default=1e-2, help="of the 16-bit comparison without dropout")
    p.add_argument("--no-throughput", action="store_true")
    p.add_argument("--loss-cases", nargs="+", choices=["dropout", "no-dropout", "fp32"],
                   help="only these loss comparisons: the 16-bit ones with or without dropout, the fp32 one")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32"],
                   help="of the throughput runs and of the 16-bit loss comparisons")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a dry run of this script")
    p.add_argument("--zero-stage", type=int, nargs="+", default=[0], choices=[0, 1, 2, 3])
    p.add_argument("--json")
    args = p.parse_args()
    result = dict(gpus=args.gpus, model=args.model, throughput=[], losses=[])
    if not args.no_throughput:
        print("| per-GPU batch | GPUs | ZeRO stage | samples/s | 1 GPU samples/s | ratio | efficiency | "
              "steady samples/s | steady 1 GPU | steady efficiency | "
              "GPU memory occupied per GPU MB (largest rank) | 1 GPU MB | predicted NVML use per GPU (largest rank) | "
              "process's NVML use (largest rank) | NCCL's buffers (largest rank) | prediction error per rank: NVML; ledger |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
              "| --- |")
        for b in args.batch:
            warm_up(args, b)
            one = one_gpu(args, b)
            for n in args.gpus:
                for stage in args.zero_stage:
                    r = many_gpus(args, b, n, stage)
                    ratio = r["samples_per_second"] / one["samples_per_second"]
                    steady_one, steady_n = one["steady_samples_per_second"], r["steady_samples_per_second"]
                    steady_eff = steady_n / (n * steady_one) if steady_one and steady_n else None
                    row = dict(batch=b, gpus=n, zero_stage=stage, one_gpu=one["samples_per_second"],
                               steady_one_gpu=steady_one, steady_efficiency=steady_eff,
                               memory_one_mb=one["memory_mb"], ratio=ratio, efficiency=ratio / n, **r)
                    result["throughput"].append(row)
                    num = lambda v: "-" if v is None else f"{v:.1f}"
                    gib = lambda key: f"{max(r[key]):.2f} GiB" if r[key] else "-"
                    errors = lambda key: ", ".join(f"{e:+.2f}%" for e in r[key]) or "-"
                    print(f"| {b} | {n} | {stage} | {r['samples_per_second']:.1f} | {one['samples_per_second']:.1f} | "
                          f"{ratio:.3f} | {ratio / n:.1%} | {num(steady_n)} | {num(steady_one)} | "
                          f"{'-' if steady_eff is None else f'{steady_eff:.1%}'} | "
                          f"{max(r['memory_per_gpu_mb'])} | {one['memory_mb']} | "
                          f"{gib('predicted_nvml_gib')} | {gib('measured_nvml_gib')} | {gib('nccl_buffers_gib')} | "
                          f"{errors('nvml_prediction_error_pct')}; "
                          f"{errors('ledger_prediction_error_pct')} |", flush=True)
    failed = False
    if args.losses:
        with tempfile.TemporaryDirectory() as tmp:
            runs = [(args.precision, True), (args.precision, False)] if args.precision != "fp32" else []
            runs += [("fp32", False)]
            if args.loss_cases:
                case = lambda r: "fp32" if r[0] == "fp32" else "dropout" if r[1] else "no-dropout"
                runs = [r for r in runs if case(r) in args.loss_cases]
            for precision, dropout, gpus, stage in [(p_, d_, n, z) for n in args.gpus for z in args.zero_stage
                                                    for p_, d_ in runs]:
                r = compare_losses(args, tmp, precision, dropout, gpus, stage)
                result["losses"].append(r)
                rtol = None if dropout else args.fp32_rtol if precision == "fp32" else args.bf16_rtol
                ok = rtol is None or r["max_rel_loss"] <= rtol
                failed |= not ok
                what = f"{precision}, dropout {'0.1' if dropout else 'off'}"
                limit = "reported only" if rtol is None else f"limit {rtol:.0e}"
                print(f"losses {what}, {gpus} GPUs, ZeRO stage {stage} ({limit}): {r['steps']} steps, global batch {r['global_batch']}: max relative "
                      f"difference {r['max_rel_loss']:.2e} (mean {r['mean_rel_loss']:.2e}), grad norm "
                      f"{r['max_rel_grad_norm']:.2e}; first {r['first'][0]:.6f} vs {r['first'][1]:.6f}, last "
                      f"{r['last'][0]:.6f} vs {r['last'][1]:.6f}{'' if ok else '  FAILED'}", flush=True)
    if args.json:
        json.dump(result, open(args.json, "w"), indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
