#!/usr/bin/env python3
"""tokenizer.py: `anatomy tokenize` against Hugging Face tokenizers (Rust), one core.

The text: every file of /usr/share/common-licenses concatenated, its non-empty lines repeated until the
corpus has --megabytes of text; as one text a line (`lines`, ~70 bytes each: sentences) and as paragraphs of
about 2,000 bytes (`paragraphs`: documents of a few hundred tokens). The vocabulary: the uncased WordPiece
fixture (tests/fixtures/wordpiece-uncased/vocab.txt) unless --vocab says otherwise. Both sides encode the
same strings with [CLS]/[SEP], no truncation or padding, on one core: this process and the `anatomy`
child are pinned to one CPU (sched_setaffinity, which children inherit) and RAYON_NUM_THREADS=1 keeps the
Rust side on one thread.

- anatomy: `anatomy tokenize --benchmark --threads 1`: the encoding alone (the JSON lines are parsed
  before the clock starts), best of 3 rounds;
- Hugging Face: BertWordPieceTokenizer(vocab, lowercase=True).encode_batch(texts) and encode_batch_fast
  (no offsets), on the Python strings, best of 3 rounds each.

With --tokenizer FILE (repeatable), each tokenizer.json is compared instead of the vocabulary: anatomy runs
`tokenize --tokenizer FILE` and Hugging Face Tokenizer.from_file(FILE) with its own truncation and padding
switched off (as transformers does when a call asks for none).

First, both encode the `lines` corpus once (not repeated) and the ids are compared: the figures are only
printed when every id agrees.

    /tmp/tokvenv/bin/python bench/tokenizer.py --anatomy build/anatomy [--megabytes 20] [--cpu 0]
    /tmp/tokvenv/bin/python bench/tokenizer.py --anatomy build/anatomy --tokenizer tests/fixtures/tokenizers/*/tokenizer.json
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"  # before tokenizers starts its thread pool
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import tokenizers  # noqa: E402
from tokenizers import BertWordPieceTokenizer, Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def license_lines():
    lines = []
    for path in sorted(p for p in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(p)):
        with open(path, encoding="utf-8", errors="replace") as f:
            lines.extend(line.strip() for line in f if line.strip())
    return lines


def corpus(lines, megabytes, paragraph_bytes=None):
    texts, size, i = [], 0, 0
    target = megabytes * 1e6
    while size < target:
        if paragraph_bytes:
            parts, n = [], 0
            while n < paragraph_bytes:
                parts.append(lines[i % len(lines)])
                n += len(parts[-1].encode()) + 1
                i += 1
            text = " ".join(parts)
        else:
            text = lines[i % len(lines)]
            i += 1
        texts.append(text)
        size += len(text.encode())
    return texts


def write_jsonl(path, texts):
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")


def time_hf(fn, texts, rounds=3):
    best, tokens = float("inf"), 0
    for _ in range(rounds):
        start = time.perf_counter()
        encodings = fn(texts)
        best = min(best, time.perf_counter() - start)
        tokens = sum(len(e.ids) for e in encodings)
    return best, tokens


def time_anatomy(binary, source, path):
    out = subprocess.run([binary, "tokenize", *source, "--input", path, "--benchmark", "--threads", "1"],
                         check=True, capture_output=True, text=True).stdout
    best = float(re.search(r"Best of \d+ rounds: ([0-9.]+) s", out).group(1))
    tokens = int(re.search(r"MB of text, (\d+) tokens", out).group(1))
    return best, tokens


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--anatomy", default=os.path.join(ROOT, "build", "anatomy"))
    parser.add_argument("--vocab", default=os.path.join(ROOT, "tests/fixtures/wordpiece-uncased/vocab.txt"))
    parser.add_argument("--tokenizer", action="append", default=[], help="a tokenizer.json (repeatable)")
    parser.add_argument("--megabytes", type=float, default=20)
    parser.add_argument("--cpu", type=int, default=min(os.sched_getaffinity(0)))
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.cpu})

    lines = license_lines()
    if args.tokenizer:
        for path in args.tokenizer:
            hf = Tokenizer.from_file(path)
            hf.no_truncation()
            hf.no_padding()
            compare(args, lines, hf, ["--tokenizer", path], os.path.relpath(path, ROOT), fast=hf.encode_batch_fast)
    else:
        hf = BertWordPieceTokenizer(args.vocab, lowercase=True)
        compare(args, lines, hf, ["--vocab", args.vocab], os.path.relpath(args.vocab, ROOT),
                fast=hf._tokenizer.encode_batch_fast)


def compare(args, lines, hf, source, name, fast):
    with tempfile.TemporaryDirectory() as tmp:
        # The same ids first.
        check = os.path.join(tmp, "check.jsonl")
        write_jsonl(check, lines)
        out = subprocess.run([args.anatomy, "tokenize", *source, "--input", check, "--threads", "1"],
                             check=True, capture_output=True, text=True).stdout.splitlines()
        ours = [json.loads(line)["input_ids"] for line in out]
        theirs = [e.ids for e in hf.encode_batch(lines)]
        differ = [i for i in range(len(lines)) if ours[i] != theirs[i]]
        if len(ours) != len(theirs) or differ:
            sys.exit(f"the ids differ on {len(differ)} of {len(lines)} lines (first: {lines[differ[0]]!r})")
        print(f"ids identical on all {len(lines)} lines of /usr/share/common-licenses "
              f"({sum(map(len, theirs))} tokens)")
        print(f"one core (CPU {args.cpu}), {name}, tokenizers {tokenizers.__version__}, best of 3 rounds\n")
        print(f"{'corpus':<12} {'texts':>8} {'MB':>6} {'tokens':>9}   {'engine':<34} {'seconds':>8} {'MB/s':>7} "
              f"{'Mtokens/s':>10} {'vs HF':>6}")
        for corpus_name, paragraph in (("lines", None), ("paragraphs", 2000)):
            texts = corpus(lines, args.megabytes, paragraph)
            mb = sum(len(t.encode()) for t in texts) / 1e6
            path = os.path.join(tmp, corpus_name + ".jsonl")
            write_jsonl(path, texts)
            rows = [("tokenizers encode_batch", *time_hf(hf.encode_batch, texts)),
                    ("tokenizers encode_batch_fast", *time_hf(fast, texts)),
                    ("anatomy tokenize --benchmark", *time_anatomy(args.anatomy, source, path))]
            base = min(r[1] for r in rows[:2])
            assert len({r[2] for r in rows}) == 1, f"token counts differ: {rows}"
            for engine, seconds, tokens in rows:
                print(f"{corpus_name:<12} {len(texts):>8} {mb:>6.1f} {tokens:>9}   {engine:<34} {seconds:>8.3f} "
                      f"{mb / seconds:>7.2f} {tokens / seconds / 1e6:>10.2f} {base / seconds:>5.2f}x")
        print()

if __name__ == "__main__":
    main()
