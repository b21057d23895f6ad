#!/usr/bin/env python3
"""check_hf_text_model.py: a classifier that `anatomy train` fine-tuned on text loads in Hugging Face as
it is — AutoTokenizer and BertForSequenceClassification.from_pretrained on the output directory — and
gives the predictions `anatomy predict` gives: the same token ids (checked through `anatomy tokenize`),
the same label names (config.json's id2label) and the same probabilities (float32 on both sides, within
--atol; the kernels differ, so not bit for bit).

It trains the license task of the README (tests/fixtures/license-text) first, on the GPU when there is
one. Needs torch, transformers and tokenizers (the GPU machine has them):

    python3 tests/tools/check_hf_text_model.py --anatomy build/anatomy [--data tests/fixtures/license-text]

Exit code 0 when every comparison holds.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import AutoTokenizer, BertForSequenceClassification


def run(cmd):
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
        raise SystemExit(f"exit code {p.returncode}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--anatomy", required=True)
    ap.add_argument("--data", default="tests/fixtures/license-text")
    ap.add_argument("--max-seq-length", type=int, default=64)
    ap.add_argument("--epochs", default="8")
    ap.add_argument("--atol", type=float, default=1e-4)
    a = ap.parse_args()
    val = os.path.join(a.data, "validation.jsonl")
    texts = [json.loads(line)["text"] for line in open(val) if line.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model")
        run([a.anatomy, "train", "--model", "bert-tiny", "--train-file", os.path.join(a.data, "train.jsonl"),
             "--validation-file", val, "--vocab", os.path.join(a.data, "vocab.txt"), "--max-seq-length",
             str(a.max_seq_length), "--per-device-train-batch-size", "8", "--num-train-epochs", a.epochs,
             "--learning-rate", "1e-3", "--warmup-steps", "30", "--eval-strategy", "epoch", "--group-by-length",
             "--no-progress", "--output-dir", model])
        preds_path = os.path.join(tmp, "predictions.jsonl")
        run([a.anatomy, "predict", "--model", model, "--input", val, "--max-seq-length", str(a.max_seq_length),
             "--output", preds_path, "--no-progress"])
        ours = [json.loads(line) for line in open(preds_path)]
        if len(ours) != len(texts):
            raise SystemExit(f"{len(ours)} predictions for {len(texts)} texts")

        tok = AutoTokenizer.from_pretrained(model)
        hf = BertForSequenceClassification.from_pretrained(model, attn_implementation="eager").eval()
        id2label = hf.config.id2label
        # Token ids: anatomy tokenize with the model directory's vocabulary against the Hugging Face tokenizer.
        enc = tok(texts, truncation=True, max_length=a.max_seq_length)
        inp = os.path.join(tmp, "texts.jsonl")
        with open(inp, "w") as f:
            for t in texts:
                f.write(json.dumps({"text": t}) + "\n")
        lower = json.load(open(os.path.join(model, "tokenizer_config.json"))).get("do_lower_case", True)
        ours_ids = [json.loads(line)["input_ids"] for line in
                    run([a.anatomy, "tokenize", "--vocab", os.path.join(model, "vocab.txt"), "--input", inp,
                         "--do-lower-case", "true" if lower else "false",
                         "--max-length", str(a.max_seq_length), "--truncation"]).splitlines() if line.startswith("{")]
        id_mismatch = sum(x != y for x, y in zip(ours_ids, enc["input_ids"]))
        worst, label_mismatch = 0.0, 0
        with torch.no_grad():
            for i, text in enumerate(texts):
                x = tok(text, truncation=True, max_length=a.max_seq_length, return_tensors="pt")
                p = torch.softmax(hf(**x).logits.double(), -1)[0]
                q = torch.tensor(ours[i]["probabilities"], dtype=torch.float64)
                worst = max(worst, float((p - q).abs().max()))
                label_mismatch += id2label[int(p.argmax())] != ours[i]["label"]
        print(f"{len(texts)} texts: token ids differ in {id_mismatch}, labels differ in {label_mismatch}, "
              f"largest probability difference {worst:.2e} (tolerance {a.atol:g}); labels {sorted(id2label.values())}")
        ok = id_mismatch == 0 and label_mismatch == 0 and worst <= a.atol
        print("OK" if ok else "FAILED")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
