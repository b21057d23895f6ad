#!/usr/bin/env python3
"""check_hf_family_roundtrip.py: for each model fixture given (a Hugging Face checkpoint of any family
the engine has, with its reference.safetensors), `anatomy train` fine-tunes it for 4 steps on the
reference's two batches, saving a checkpoint at step 2; the final directory and checkpoint-2 load with
transformers' AutoModelForSequenceClassification (AutoModelForTokenClassification,
AutoModelForQuestionAnswering, AutoModelForMaskedLM or AutoModelForMultipleChoice, as config.json's "architectures" says), and its float32 logits (start
and end logits for question answering) in evaluation mode equal the
logits `anatomy forward` gives on the same batch, within 1e-5 of the largest logit.

    python3 tests/tools/check_hf_family_roundtrip.py --anatomy build/anatomy [--device cpu] FIXTURE_DIR...

Needs torch, transformers, safetensors and numpy (the GPU machine has them). Exit code 0 when every
comparison holds; prints each one.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from transformers import (AutoModelForMaskedLM, AutoModelForMultipleChoice, AutoModelForQuestionAnswering,
                          AutoModelForSequenceClassification,
                          AutoModelForTokenClassification)

INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--anatomy", default="build/anatomy")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("fixtures", nargs="+")
    a = parser.parse_args()
    ok = True
    for fixture in a.fixtures:
        ref = load_file(os.path.join(fixture, "reference.safetensors"))
        with tempfile.TemporaryDirectory() as tmp:
            train = {k: np.concatenate([ref[k], ref[k + "_1"]])
                     for k in INPUTS + ("labels", "start_positions", "end_positions") if k in ref}
            if "labels" in train and train["labels"].dtype == np.float64:
                train["labels"] = train["labels"].astype(np.float32)
            save_file(train, os.path.join(tmp, "train.safetensors"))
            inputs = {k: ref[k] for k in INPUTS if k in ref}
            save_file(inputs, os.path.join(tmp, "inputs.safetensors"))
            out = os.path.join(tmp, "run")
            with open(os.path.join(fixture, "config.json")) as f:  # a *ForMaskedLM checkpoint trains as one if asked
                task = ["--task", "masked-lm"] if json.load(f)["architectures"][0].endswith("ForMaskedLM") else []
            subprocess.run([a.anatomy, "train", "--model", fixture, *task, "--train-file", os.path.join(tmp, "train.safetensors"),
                            "--per-device-train-batch-size", str(len(ref["input_ids"])), "--max-steps", "4",
                            "--learning-rate", "1e-3", "--save-strategy", "steps", "--save-steps", "2", "--no-progress",
                            "--device", a.device, "--output-dir", out], check=True, stdout=subprocess.DEVNULL)
            for model_dir in [out, os.path.join(out, "checkpoint-2")]:
                logits_file = os.path.join(tmp, "logits.safetensors")
                subprocess.run([a.anatomy, "forward", "--model", model_dir, *task, "--inputs",
                                os.path.join(tmp, "inputs.safetensors"), "--output", logits_file, "--device", a.device],
                               check=True, stdout=subprocess.DEVNULL)
                written = load_file(logits_file)
                qa = "start_logits" in written  # question answering: the start and end logits, stacked
                ours = (np.stack([written["start_logits"], written["end_logits"]]) if qa
                        else written["logits"]).astype(np.float64)
                with open(os.path.join(model_dir, "config.json")) as f:
                    architecture = json.load(f)["architectures"][0]
                auto = (AutoModelForTokenClassification if architecture.endswith("ForTokenClassification")
                        else AutoModelForQuestionAnswering if architecture.endswith("ForQuestionAnswering")
                        else AutoModelForMaskedLM if architecture.endswith("ForMaskedLM")
                        else AutoModelForMultipleChoice if architecture.endswith("ForMultipleChoice")
                        else AutoModelForSequenceClassification)
                model = auto.from_pretrained(model_dir, attn_implementation="eager").eval()
                with torch.no_grad():
                    result = model(**{k: torch.from_numpy(v) for k, v in inputs.items()})
                    theirs = (torch.stack([result.start_logits, result.end_logits]) if qa
                              else result.logits).double().numpy()
                rel = np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs))
                good = rel <= 1e-5
                ok &= bool(good)
                print(f"{os.path.basename(fixture)} {os.path.relpath(model_dir, tmp)}: {type(model).__name__}, "
                      f"max relative difference {rel:.2e} ({'ok' if good else 'FAIL'})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
