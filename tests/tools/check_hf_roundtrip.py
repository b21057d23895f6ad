#!/usr/bin/env python3
"""check_hf_roundtrip.py: a model saved by `anatomy train` (the final one and a checkpoint-N) loads
with transformers' BertForSequenceClassification.from_pretrained and gives the logits that
`anatomy forward` gives for the same batch (float32, evaluation mode, within 1e-5 of the largest logit).

Needs torch, transformers, safetensors and numpy (the GPU machine has them):

    python3 tests/tools/check_hf_roundtrip.py --anatomy build/anatomy [--device cpu]

Exit code 0 when every comparison holds; prints each one.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from transformers import BertForSequenceClassification


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--anatomy", default="build/anatomy")
    parser.add_argument("--device", default="cpu")
    a = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run")
        subprocess.run([a.anatomy, "train", "--model", "bert-mini", "--device", a.device, "--dummy-size", "24",
                        "--dummy-seq-len", "64", "--per-device-train-batch-size", "4", "--max-steps", "6",
                        "--learning-rate", "1e-3", "--save-strategy", "steps", "--save-steps", "3", "--no-progress",
                        "--output-dir", out], check=True, stdout=subprocess.DEVNULL)
        rng = np.random.default_rng(0)
        ids = rng.integers(100, 30000, (3, 40)).astype(np.int64)
        mask = np.ones_like(ids)
        mask[1, 30:] = 0
        types = np.zeros_like(ids)
        types[:, 20:] = 1
        inputs = os.path.join(tmp, "inputs.safetensors")
        save_file({"input_ids": ids, "attention_mask": mask, "token_type_ids": types}, inputs)
        for model_dir in [out, os.path.join(out, "checkpoint-3")]:
            logits_file = os.path.join(tmp, "logits.safetensors")
            subprocess.run([a.anatomy, "forward", "--model", model_dir, "--inputs", inputs, "--output", logits_file,
                            "--device", a.device], check=True, stdout=subprocess.DEVNULL)
            ours = load_file(logits_file)["logits"].astype(np.float64)
            model = BertForSequenceClassification.from_pretrained(model_dir, attn_implementation="eager").eval()
            with torch.no_grad():
                theirs = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                               token_type_ids=torch.from_numpy(types)).logits.double().numpy()
            rel = np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs))  # against the logits' scale
            good = rel <= 1e-5
            ok &= bool(good)
            print(f"{os.path.relpath(model_dir, tmp)}: max relative difference {rel:.2e} "
                  f"({'ok' if good else 'FAIL'}), logits {theirs.ravel()[:4]}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
