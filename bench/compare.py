#!/usr/bin/env python3
"""compare.py: anatomy against Hugging Face Trainer on the same GPU, same settings, one run.

For each configuration it trains bert-large-uncased, or the model the configuration names (roberta-large,
electra-large-discriminator, distilbert-base-uncased: each family's usual size, as anatomy's preset
and as the same config.json keys given to transformers' AutoConfig) (random init, the seed's dummy data:
ids uniform in [100, 30000), labels 0, the configs' dropout) once with `anatomy train` and once with HF Trainer
(PyTorch + transformers must be importable; bench/hf_trainer.py), each in its own process, polling nvidia-smi for the
peak memory used, and prints one table: samples/s, peak NVML MB, MFU and our/their ratio.

    python3 bench/compare.py --anatomy build/anatomy [--configs fp32-b4-eager,bf16-b32-sdpa,...] [--samples N]
                             [--repeats R]

With --repeats R (default 1) each configuration runs R times on each side, alternating (anatomy, Trainer,
anatomy, ...), and the table gives each side's median samples/s and its largest peak memory: Trainer's
rate moved by up to 6.5% between calls in docs/BENCHMARKS.md, and the median of alternating runs keeps a
slow or fast moment of the GPU from deciding the ratio. Every run's figures go to --json.

Each side's rate is given twice: over the whole run (anatomy's "Samples/second", Trainer's
train_samples_per_second) and after the first step ("steady"), whose one-time work (loading kernels
and plans, creating library handles, growing memory pools) both sides pay inside their timers:
anatomy prints "Samples/second after the first step", and Trainer's steps are timed with CUDA events
recorded at each step's end (hf_trainer.py's step_times), so neither waits for the clock.

MFU = samples/s x training FLOPs per sample (matrix products only, BASELINES.md's count)
/ the GPU's dense bf16 peak (989.4 TFLOP/s for H100 SXM and H200).

Before its measured run, each configuration trains anatomy for 2 steps at the same shapes (unless
--no-warm-up): that first run times cuBLASLt's candidate algorithms for every product shape and
caches the choices (~/.cache/anatomy/gemm_algos.json, docs/training.md: ANATOMY_GEMM_TUNING), and builds
cuDNN's attention plans and keeps them (~/.cache/anatomy/cudnn_plans/), as any earlier run on the
machine would have. The measured run then reads both: a one-time cost per machine, like a
compiled-kernel cache, kept out of the figure. Trainer gets a 2-step warm-up run too: its first
process on a fresh machine ran up to 13% slower than the next ones (docs/BENCHMARKS.md, the
e0e181f entry: 220.7 then 254.7 samples/s at batch 32, while its later configurations stayed within 1%),
which fits kernels that the libraries compile at run time and cache between processes.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench_util import figure
from gpu_memory import PeakMemory

FUSED = dict(optim="adamw_torch_fused")
BF16 = dict(bf16=True, tf32=True, **FUSED)
# Other families: anatomy's preset, and its config for transformers (model_type, config.json keys, and the
# sizes for the FLOP count: layers, hidden, intermediate).
MODELS = {
    "bert-large-uncased": ("bert", None, (24, 1024, 4096)),
    "roberta-large": ("roberta", dict(vocab_size=50265, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                      intermediate_size=4096, max_position_embeddings=514, type_vocab_size=1,
                                      layer_norm_eps=1e-5, pad_token_id=1), (24, 1024, 4096)),
    "electra-large-discriminator": ("electra", dict(embedding_size=1024, hidden_size=1024, num_hidden_layers=24,
                                                    num_attention_heads=16, intermediate_size=4096),
                                    (24, 1024, 4096)),
    "distilbert-base-uncased": ("distilbert", dict(), (6, 768, 3072)),
    "modernbert-large": ("modernbert", dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                                            intermediate_size=2624), (28, 1024, 2624)),
    "deberta-v3-large": ("deberta-v2", dict(vocab_size=128100, hidden_size=1024, num_hidden_layers=24,
                                            num_attention_heads=16, intermediate_size=4096, relative_attention=True,
                                            position_buckets=256, norm_rel_ebd="layer_norm", share_att_key=True,
                                            pos_att_type="p2c|c2p", max_relative_positions=-1,
                                            position_biased_input=False, type_vocab_size=0, pooler_hidden_size=1024,
                                            layer_norm_eps=1e-7), (24, 1024, 4096)),
}
CONFIGS = {
    # name: (anatomy flags, HF TrainingArguments overrides, HF attention, samples, batch[, model])
    "fp32-b4-eager": ([], dict(), "eager", 1024, 4),      # the seed's vanilla run
    # the seed's run with our float32 products in split TF32 (--split-tf32: about 22 of float32's 24 bits);
    # Trainer's in plain float32, as in fp32-b4-eager
    "fp32-b4-eager-split": (["--split-tf32"], dict(), "eager", 1024, 4),
    "fp32-b4-sdpa": ([], dict(), "sdpa", 1024, 4),
    "tf32-b4-sdpa": (["--tf32"], dict(tf32=True), "sdpa", 1024, 4),
    "bf16-b4-sdpa": (["--bf16"], dict(bf16=True), "sdpa", 1024, 4),
    "bf16-b32-sdpa": (["--bf16", "--tf32"], dict(bf16=True, tf32=True, **FUSED), "sdpa", 4096, 32),
    "bf16-b64-sdpa": (["--bf16", "--tf32"], dict(bf16=True, tf32=True, **FUSED), "sdpa", 4096, 64),
    "roberta-large-bf16-b32": (["--bf16", "--tf32"], BF16, "sdpa", 4096, 32, "roberta-large"),
    "electra-large-bf16-b32": (["--bf16", "--tf32"], BF16, "sdpa", 4096, 32, "electra-large-discriminator"),
    "distilbert-base-bf16-b64": (["--bf16", "--tf32"], BF16, "sdpa", 8192, 64, "distilbert-base-uncased"),
    # transformers' DeBERTa-v2 has only its eager attention (no SDPA)
    "deberta-v3-large-bf16-b16": (["--bf16", "--tf32"], BF16, "eager", 2048, 16, "deberta-v3-large"),
    # ModernBERT at long sequences: (..., model, sequence length)
    "modernbert-large-bf16-s1024": (["--bf16", "--tf32"], BF16, "sdpa", 512, 8, "modernbert-large", 1024),
    "modernbert-large-bf16-s8192": (["--bf16", "--tf32"], BF16, "sdpa", 32, 1, "modernbert-large", 8192),
    # Task heads: (..., model, sequence length, task)
    "token-bf16-b64-s256": (["--bf16", "--tf32"], BF16, "sdpa", 4096, 64, "bert-large-uncased", 256,
                            "token-classification"),
    "qa-bf16-b32-s384": (["--bf16", "--tf32"], BF16, "sdpa", 4096, 32, "bert-large-uncased", 384,
                         "question-answering"),
    "mlm-bf16-b32-s512": (["--bf16", "--tf32"], BF16, "sdpa", 2048, 32, "bert-large-uncased", 512, "masked-lm"),
    # 4 choices an example: batch 16 runs 64 sequences
    "mc-bf16-b16-s256": (["--bf16", "--tf32"], BF16, "sdpa", 2048, 16, "bert-large-uncased", 256, "multiple-choice"),
}

# Hugging Face's side: one Trainer run per process, settings in, one JSON line out (shared with anatomy bench).
HF_TRAINER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_trainer.py")


def flops_per_sample(layers=24, hidden=1024, intermediate=4096, seq=512):
    return 6 * layers * (4 * hidden ** 2 + 2 * hidden * intermediate) * seq + 3 * layers * 4 * seq ** 2 * hidden


def run(cmd, env=None):
    with PeakMemory() as mem:
        start = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.time() - start
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd[:3])}...\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout, mem.peak, wall


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--anatomy", default="build/anatomy")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--samples", type=int, default=0, help="override each configuration's sample count")
    parser.add_argument("--peak-tflops", type=float, default=989.4)
    parser.add_argument("--json", default="")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each side, alternating; the table takes the medians (default 1)")
    parser.add_argument("--no-warm-up", action="store_true",
                        help="measure without a 2-step warm-up run of each side first (ours fills the "
                             "matrix-product tuning cache)")
    a = parser.parse_args()
    if a.repeats < 1:
        parser.error(f"--repeats {a.repeats}: must be at least 1")
    rows = []
    for name in a.configs.split(","):
        flags, hf_args, attn, samples, batch, *named = CONFIGS[name]
        model = named[0] if named else "bert-large-uncased"
        seq_len = named[1] if len(named) > 1 else 512
        task = named[2] if len(named) > 2 else "sequence-classification"
        model_type, hf_config, sizes = MODELS[model]
        samples = a.samples or samples
        common = [a.anatomy, "train", "--no-progress", "--device", "cuda", "--per-device-train-batch-size", str(batch)]
        if named:
            common += ["--model", model, "--dummy-seq-len", str(seq_len), "--task", task]
        hf_cfg = dict(samples=samples, batch=batch, attn=attn, args=hf_args, step_times=True, seq_len=seq_len,
                      task=task)
        if hf_config is not None:
            hf_cfg.update(model_type=model_type, config=hf_config)
        if not a.no_warm_up:
            with tempfile.TemporaryDirectory() as warm:
                run(common + flags + ["--dummy-size", str(2 * batch), "--max-steps", "2", "--output-dir", warm])
            run([sys.executable, HF_TRAINER, json.dumps(dict(hf_cfg, samples=2 * batch))])
        ours_runs, hf_runs = [], []
        for i in range(a.repeats):
            ours_out, ours_mem, ours_wall = run(common + flags + ["--dummy-size", str(samples)])
            parameters = int(figure(r"^Training \S+ \(([0-9]+) parameters\)", ours_out, "the parameter count")[-1])
            ours_runs.append(dict(samples_per_second=float(figure(r"^Samples/second: ([0-9.]+)", ours_out,
                                                                  "Samples/second")[-1]),
                                  steady_samples_per_second=float(
                                      figure(r"^Samples/second after the first step: ([0-9.]+)", ours_out,
                                             "Samples/second after the first step")[-1]),
                                  peak_mb=ours_mem, wall_s=ours_wall))
            hf_out, hf_mem, hf_wall = run([sys.executable, HF_TRAINER, json.dumps(hf_cfg)])
            hf_result = json.loads([line for line in hf_out.splitlines() if line.startswith("{")][-1])
            if hf_result["status"] != "ok":
                sys.exit(f"{name}: Hugging Face {hf_result['status']}: "
                         f"{hf_result.get('error') or hf_result.get('reason')}")
            if hf_result.get("parameters") != parameters:
                sys.exit(f"{name}: Trainer's {hf_result.get('model_class')} has {hf_result.get('parameters')} "
                         f"parameters, anatomy's {model} {parameters}: not the same model")
            steps_ms = hf_result["step_ms"]
            if len(steps_ms) != -(-samples // batch):
                sys.exit(f"{name}: Trainer timed {len(steps_ms)} steps, not {-(-samples // batch)}")
            hf_runs.append(dict(samples_per_second=hf_result["train_samples_per_second"],
                                steady_samples_per_second=(samples - batch) / (sum(steps_ms[1:]) / 1000),
                                first_step_ms=steps_ms[0], peak_mb=hf_mem, wall_s=hf_wall))
            run_no = f" (run {i + 1} of {a.repeats})" if a.repeats > 1 else ""
            print(f"{name}{run_no}: anatomy {ours_runs[-1]['samples_per_second']:.2f}/s "
                  f"({ours_runs[-1]['steady_samples_per_second']:.2f} after step 1) {ours_mem} MB "
                  f"({ours_wall:.0f}s wall); HF {hf_runs[-1]['samples_per_second']:.2f}/s "
                  f"({hf_runs[-1]['steady_samples_per_second']:.2f} after step 1) {hf_mem} MB ({hf_wall:.0f}s wall)",
                  flush=True)
        ours = statistics.median(r["samples_per_second"] for r in ours_runs)
        theirs = statistics.median(r["samples_per_second"] for r in hf_runs)
        ours_steady = statistics.median(r["steady_samples_per_second"] for r in ours_runs)
        theirs_steady = statistics.median(r["steady_samples_per_second"] for r in hf_runs)
        sequences = 4 if task == "multiple-choice" else 1  # an example's sequences
        mfu = lambda s: 100 * s * sequences * flops_per_sample(*sizes, seq=seq_len) / (a.peak_tflops * 1e12)
        rows.append(dict(config=name, samples=samples, repeats=a.repeats, ours=ours, theirs=theirs,
                         ours_steady=ours_steady, theirs_steady=theirs_steady,
                         ours_mb=max(r["peak_mb"] for r in ours_runs), theirs_mb=max(r["peak_mb"] for r in hf_runs),
                         ours_mfu=mfu(ours), theirs_mfu=mfu(theirs), ours_runs=ours_runs, theirs_runs=hf_runs))
    print()
    print("| configuration | samples | anatomy samples/s | HF samples/s | ratio | anatomy steady | HF steady | "
          "steady ratio | anatomy peak NVML MB | HF peak NVML MB | memory ratio | anatomy MFU % | HF MFU % |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['config']} | {r['samples']} | {r['ours']:.2f} | {r['theirs']:.2f} | {r['ours'] / r['theirs']:.2f} | "
              f"{r['ours_steady']:.2f} | {r['theirs_steady']:.2f} | {r['ours_steady'] / r['theirs_steady']:.2f} | "
              f"{r['ours_mb']} | {r['theirs_mb']} | {r['ours_mb'] / r['theirs_mb']:.2f} | {r['ours_mfu']:.1f} | "
              f"{r['theirs_mfu']:.1f} |")
    print("(steady: samples/s after the first step; MFU from the whole-run rates)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
