#!/usr/bin/env python3
"""inference.py: `anatomy evaluate` against Hugging Face inference on the same GPU, same data, one run.

The data: N sequences of lengths uniform in [min_len, max_len] (ids uniform in [100, 30000), labels 0),
right padded to max_len, written once to a safetensors file that both sides read. Each side runs in its
own process (nvidia-smi polled for the peak memory), on bert-large-uncased's architecture with random
weights, in batches of B sequences in file order, one untimed warm-up batch first:

- anatomy: `anatomy evaluate --bf16` (weights in bf16 only, batches packed without padding; also
  `--padding longest` to show what packing is worth);
- Hugging Face: BertForSequenceClassification in bf16 (model.to(torch.bfloat16)), attn_implementation
  "sdpa", eval(), torch.inference_mode(), each batch padded to its longest sequence with an attention
  mask (what DataCollatorWithPadding gives), logits copied to the host per batch as anatomy does.

    python3 bench/inference.py --anatomy build/anatomy [--sequences 2048] [--batch 32] [--json out.json]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

from gpu_memory import PeakMemory

HF_SCRIPT = r'''
import json, sys, time, torch
from safetensors.numpy import load_file
from transformers import BertConfig, BertForSequenceClassification, logging
logging.set_verbosity_error()
cfg = json.loads(sys.argv[1])
data = load_file(cfg["data"])
ids, mask = torch.from_numpy(data["input_ids"]), torch.from_numpy(data["attention_mask"])
lengths = mask.sum(1)
config = BertConfig()
config.update(dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096))
model = BertForSequenceClassification._from_config(config, attn_implementation="sdpa").to("cuda", torch.bfloat16).eval()
B, n = cfg["batch"], ids.shape[0]
def batch(i):
    L = int(lengths[i:i + B].max())
    return ids[i:i + B, :L].to("cuda", non_blocking=True), mask[i:i + B, :L].to("cuda", non_blocking=True)
with torch.inference_mode():
    x, m = batch(0)
    model(input_ids=x, attention_mask=m).logits.float().cpu()  # warm-up, untimed
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(0, n, B):
        x, m = batch(i)
        model(input_ids=x, attention_mask=m).logits.float().cpu()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
print("RESULT " + json.dumps(dict(seconds=seconds, samples_per_second=n / seconds,
                                   tokens_per_second=int(lengths.sum()) / seconds)))
'''


def make_data(path, n, min_len, max_len, seed):
    import numpy as np
    from safetensors.numpy import save_file
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_len, max_len + 1, n)
    ids = rng.integers(100, 30000, (n, max_len)).astype(np.int64)
    mask = (np.arange(max_len)[None, :] < lengths[:, None]).astype(np.int64)
    ids *= mask
    save_file({"input_ids": ids, "attention_mask": mask, "labels": np.zeros(n, dtype=np.int64)}, path)
    return int(lengths.sum())


def run(cmd):
    with PeakMemory() as mem:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd[:3])}...\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout, mem.peak


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--anatomy", default="build/anatomy")
    parser.add_argument("--sequences", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--min-len", type=int, default=64)
    parser.add_argument("--max-len", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default="")
    a = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "varlen.safetensors")
        tokens = make_data(data, a.sequences, a.min_len, a.max_len, a.seed)
        print(f"{a.sequences} sequences, {tokens} tokens (uniform {a.min_len}..{a.max_len}), batch {a.batch}",
              flush=True)
        rows = []
        for padding in ["free", "longest"]:
            metrics = os.path.join(tmp, f"metrics-{padding}.json")
            out, peak = run([a.anatomy, "evaluate", "--bf16", "--device", "cuda", "--no-progress", "--input", data,
                             "--per-device-eval-batch-size", str(a.batch), "--padding", padding, "--metrics", metrics])
            with open(metrics) as f:
                m = json.load(f)
            rows.append(dict(side=f"anatomy, padding {padding}", samples_per_second=m["samples_per_second"],
                             tokens_per_second=m["tokens_per_second"], seconds=m["seconds"], peak_mb=peak))
            print(f"anatomy --padding {padding}: {m['samples_per_second']:.1f} samples/s, {peak} MB", flush=True)
        out, peak = run([sys.executable, "-c", HF_SCRIPT, json.dumps(dict(data=data, batch=a.batch))])
        hf = json.loads(re.search(r"RESULT (.*)", out).group(1))
        rows.append(dict(side="Hugging Face (bf16, SDPA, padded to the longest)", peak_mb=peak, **hf))
        print(f"Hugging Face: {hf['samples_per_second']:.1f} samples/s, {peak} MB", flush=True)
    print()
    print("| | samples/s | tokens/s | time (s) | peak NVML MB | speed vs HF |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['side']} | {r['samples_per_second']:.1f} | {r['tokens_per_second']:.0f} | {r['seconds']:.2f} | "
              f"{r['peak_mb']} | {r['samples_per_second'] / hf['samples_per_second']:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(sequences=a.sequences, tokens=tokens, batch=a.batch, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
