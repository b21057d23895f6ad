#!/usr/bin/env python3
"""memory_accuracy.py: the memory plan against the measurement, on this machine's GPU.

For each configuration it runs `anatomy train` for a few steps with --output-dir and reads the
anatomy.json it writes: the plan's prediction (computed before the run allocated anything) beside
the ledger's measured peak, the pool's segments, the CUDA context and NVML's figure for the process.
It also polls nvidia-smi during the run for the device's peak use. It prints one Markdown table:

    python3 bench/memory_accuracy.py --anatomy build/anatomy [--configs base-fp32-b4,...] [--steps 3]

Configurations are MODEL-PRECISION-bBATCH with an optional -ckpt (--gradient-checkpointing), -sel
(its selective policy), -acc4 (--gradient-accumulation-steps 4), -token (--task token-classification)
or -qa (--task question-answering), -mlm (--task masked-lm) or -mc (--task multiple-choice, 4 choices an
example): bert-base or large (or another family's
preset: roberta, electra, distilbert, electra_small, xlmr, modernbert, modernbert_large), fp32/bf16/fp16, batch 4 or 32; the default runs
the twelve of BERT without a suffix.

Columns: predicted and measured ledger peak (the plan's exactness), predicted NVML total
(pool segments + the context figure the plan assumed) against NVML's use of the process at the end
(the pool keeps its segments, so the end shows the peak), and the rows' sum against NVML
(the unattributed remainder).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from gpu_memory import PeakMemory

MODELS = {"base": "bert-base-uncased", "large": "bert-large-uncased", "roberta": "roberta-large",
          "electra": "electra-large-discriminator", "distilbert": "distilbert-base-uncased",
          "electra_small": "electra-small-discriminator", "xlmr": "xlm-roberta-base",
          "modernbert": "modernbert-base", "modernbert_large": "modernbert-large", "deberta": "deberta-v3-large",
          "deberta_base": "deberta-v3-base"}
PRECISIONS = {"fp32": [], "bf16": ["--bf16"], "fp16": ["--fp16"]}


def all_configs():
    out = {}
    for m in MODELS:
        for p in PRECISIONS:
            for b in (4, 32):
                out[f"{m}-{p}-b{b}"] = (MODELS[m], PRECISIONS[p], b)
                out[f"{m}-{p}-b{b}-ckpt"] = (MODELS[m], PRECISIONS[p] + ["--gradient-checkpointing"], b)
                out[f"{m}-{p}-b{b}-sel"] = (MODELS[m], PRECISIONS[p] + ["--gradient-checkpointing",
                                                                       "--gradient-checkpointing-policy",
                                                                       "selective"], b)
                out[f"{m}-{p}-b{b}-acc4"] = (MODELS[m], PRECISIONS[p] + ["--gradient-accumulation-steps", "4"], b)
                out[f"{m}-{p}-b{b}-token"] = (MODELS[m], PRECISIONS[p] + ["--task", "token-classification"], b)
                out[f"{m}-{p}-b{b}-qa"] = (MODELS[m], PRECISIONS[p] + ["--task", "question-answering"], b)
                out[f"{m}-{p}-b{b}-mlm"] = (MODELS[m], PRECISIONS[p] + ["--task", "masked-lm"], b)
                out[f"{m}-{p}-b{b}-mc"] = (MODELS[m], PRECISIONS[p] + ["--task", "multiple-choice"], b)
    return out


def mib(b):
    return b / 2**20


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--anatomy", required=True)
    ap.add_argument("--configs",
                    default=",".join(c for c in all_configs() if not c.endswith(("-ckpt", "-sel", "-acc4"))
                                     and c.startswith(("base-", "large-"))))
    ap.add_argument("--steps", type=int, default=3)
    opts = ap.parse_args()
    configs = all_configs()
    rows = []
    for name in opts.configs.split(","):
        if name not in configs:
            sys.exit(f"unknown configuration {name}; known: {', '.join(configs)}")
        model, flags, batch = configs[name]
        with tempfile.TemporaryDirectory() as out_dir:
            cmd = [opts.anatomy, "train", "--model", model, "--per-device-train-batch-size", str(batch),
                   "--max-steps", str(opts.steps), "--no-progress", "--output-dir", out_dir] + flags
            with PeakMemory(interval=0.05) as peak:
                run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode != 0:
                print(f"{name}: exit {run.returncode}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}", file=sys.stderr)
                continue
            with open(os.path.join(out_dir, "anatomy.json")) as f:
                a = json.load(f)
        pred = a["predicted"]
        led = a["ledger"]
        unattributed = next(r["at_peak"] for r in a["rows"] if r["key"] == "unattributed")
        nvml = a["nvml_used"]
        rows.append(dict(
            name=name, ledger_pred=pred["peak_total"], ledger_meas=led["peak_total"],
            reserved_pred=pred["reserved_peak"], reserved_meas=led["reserved_peak"],
            nvml_pred=pred["nvml_total"], nvml=nvml, smi_peak_mib=peak.peak,
            context=a["context_bytes"], unattributed=unattributed))
        r = rows[-1]
        print(f"{name}: ledger {mib(r['ledger_pred']):.0f}/{mib(r['ledger_meas']):.0f} MiB, "
              f"NVML predicted {mib(r['nvml_pred']):.0f} measured {mib(nvml):.0f} MiB", file=sys.stderr)

    print("| configuration | ledger peak predicted / measured (MiB) | pool segments predicted / measured (MiB) "
          "| NVML predicted / measured (MiB) | error | unattributed (MiB) | context and kernels (MiB) | nvidia-smi peak (MiB) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        err = 100.0 * (r["nvml_pred"] - r["nvml"]) / r["nvml"] if r["nvml"] > 0 else float("nan")
        print(f"| {r['name']} | {mib(r['ledger_pred']):.1f} / {mib(r['ledger_meas']):.1f} "
              f"| {mib(r['reserved_pred']):.0f} / {mib(r['reserved_meas']):.0f} "
              f"| {mib(r['nvml_pred']):.0f} / {mib(r['nvml']):.0f} | {err:+.2f}% "
              f"| {mib(r['unattributed']):+.0f} | {mib(r['context']):.0f} | {r['smi_peak_mib']} |")


if __name__ == "__main__":
    main()
