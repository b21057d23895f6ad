#!/usr/bin/env python3
"""make_license_dataset.py: a small real-text classification task from the
license texts Debian ships in /usr/share/common-licenses: each paragraph,
labelled with the license it comes from. Standard library only, deterministic.

Writes into --output-dir:
  train.jsonl, validation.jsonl   one {"text": paragraph, "label": license} a line
  vocab.txt                       a WordPiece vocabulary made from the training paragraphs
  manifest.json                   the settings, counts and the sha256 of every source file

Paragraphs are the blocks between blank lines, white space collapsed; those of
fewer than --min-words words are dropped, and so is a paragraph that occurs
(after collapsing white space and case) in more than one license, since its
label would be ambiguous. A paragraph goes to validation when the first 8 hex
digits of the sha256 of its text, modulo 1000, fall below 1000 x
--validation-fraction: the split depends on the text alone, not on the order
or on which other licenses are included.

The vocabulary: [PAD] [UNK] [CLS] [SEP] [MASK], every character of the
training text (after BERT's normalization: lowercase, accents stripped) and
its "##" continuation, then the words that occur at least twice, most frequent
first (ties alphabetically), up to --vocab-size entries. Words are split as
BertTokenizer's pre-tokenizer splits them (white space, then every punctuation
character a word of its own), so every word the model sees either is an entry
or falls back to characters.

    python3 scripts/make_license_dataset.py --output-dir data/licenses
"""

import argparse
import hashlib
import json
import os
import re
import sys
import unicodedata
from collections import Counter

DEFAULT_LICENSES = ["Apache-2.0", "Artistic", "BSD", "CC0-1.0", "GFDL-1.3", "GPL-2", "GPL-3", "LGPL-2.1",
                    "LGPL-3", "MPL-2.0"]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def paragraphs(text):
    for block in re.split(r"\n[ \t\r\f\v]*\n", text):
        collapsed = " ".join(block.split())
        if collapsed:
            yield collapsed


def is_punctuation(ch):
    # BertTokenizer's _is_punctuation: ASCII non-alphanumeric printable characters, and Unicode P*.
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def normalize(text):
    text = unicodedata.normalize("NFD", text.lower())
    return "".join(ch for ch in text if unicodedata.category(ch) != "Mn")


def words(text):
    out = []
    for token in normalize(text).split():
        current = ""
        for ch in token:
            if is_punctuation(ch):
                if current:
                    out.append(current)
                    current = ""
                out.append(ch)
            else:
                current += ch
        if current:
            out.append(current)
    return out


def in_validation(text, fraction):
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return int(digest[:8], 16) % 1000 < round(1000 * fraction)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--licenses-dir", default="/usr/share/common-licenses")
    parser.add_argument("--licenses", default=",".join(DEFAULT_LICENSES),
                        help="comma-separated file names in --licenses-dir (the labels)")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--validation-fraction", type=float, default=0.2)
    parser.add_argument("--min-words", type=int, default=8)
    parser.add_argument("--vocab-size", type=int, default=4000)
    args = parser.parse_args()
    if not 0 < args.validation_fraction < 1:
        sys.exit("error: --validation-fraction must be between 0 and 1")

    names = [n for n in args.licenses.split(",") if n]
    by_license = {}
    hashes = {}
    for name in names:
        path = os.path.join(args.licenses_dir, name)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            sys.exit(f"error: {path}: {e.strerror}")
        hashes[name] = hashlib.sha256(raw).hexdigest()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            sys.exit(f"error: {path}: not UTF-8 ({e})")
        seen = set()
        kept = []
        for p in paragraphs(text):
            if len(p.split()) < args.min_words or p.lower() in seen:
                continue
            seen.add(p.lower())
            kept.append(p)
        by_license[name] = kept
    owners = Counter(p.lower() for kept in by_license.values() for p in kept)
    train, validation = [], []
    dropped_shared = 0
    for name in names:
        for p in by_license[name]:
            if owners[p.lower()] > 1:
                dropped_shared += 1
                continue
            (validation if in_validation(p, args.validation_fraction) else train).append({"text": p, "label": name})

    counts = Counter(w for example in train for w in words(example["text"]))
    chars = sorted({ch for w in counts for ch in w})
    vocab = list(SPECIAL)
    vocab += chars
    vocab += ["##" + ch for ch in chars]
    present = set(vocab)
    for word, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        if len(vocab) >= args.vocab_size or n < 2:
            break
        if word not in present:
            vocab.append(word)
            present.add(word)

    os.makedirs(args.output_dir, exist_ok=True)

    def write(name, text):
        path = os.path.join(args.output_dir, name)
        with open(path + ".tmp", "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(path + ".tmp", path)

    write("train.jsonl", "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in train))
    write("validation.jsonl", "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in validation))
    write("vocab.txt", "".join(token + "\n" for token in vocab))
    manifest = {
        "licenses": names,
        "sha256": hashes,
        "validation_fraction": args.validation_fraction,
        "min_words": args.min_words,
        "vocab_size": len(vocab),
        "train": dict(sorted(Counter(e["label"] for e in train).items())),
        "validation": dict(sorted(Counter(e["label"] for e in validation).items())),
        "dropped_shared_paragraphs": dropped_shared,
    }
    write("manifest.json", json.dumps(manifest, indent=2) + "\n")
    print(f"{len(train)} training and {len(validation)} validation paragraphs of {len(names)} licenses "
          f"({dropped_shared} shared paragraphs dropped), vocabulary of {len(vocab)} tokens, in {args.output_dir}")


if __name__ == "__main__":
    main()
