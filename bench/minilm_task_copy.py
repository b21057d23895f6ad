#!/usr/bin/env python3
"""minilm_task_copy.py: a smaller copy of all-MiniLM-L6-v2 for one task, to carry to a GPU machine whose
uploads are limited (the model is 91 MB; the limit, with the repository and the binary, leaves ~35 MB).

Two changes, both said in every result made with the copy:
1. the vocabulary is cut to the tokens that the task's texts use (with the special tokens), the ids
   renumbered in their original order, and the word embedding rows gathered to match. For these texts the
   copy tokenizes to the same tokens (greedy longest-match WordPiece only ever picked the kept ones); this
   script checks that with the `tokenizers` library on every text, so the model computes the same function
   on the task as the original;
2. the weights are stored in bfloat16 (both engines upcast them to float32 when they load them).

    python3 bench/minilm_task_copy.py --model DIR --data tests/fixtures/license-text --out DIR2
"""
import argparse
import json
import os
import shutil

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    texts = []
    for name in ("train.jsonl", "validation.jsonl"):
        with open(os.path.join(args.data, name), encoding="utf-8") as f:
            texts += [json.loads(line)["text"] for line in f if line.strip()]
    doc = json.load(open(os.path.join(args.model, "tokenizer.json"), encoding="utf-8"))
    assert doc["model"]["type"] == "WordPiece", "this copy only cuts WordPiece vocabularies"
    full = Tokenizer.from_str(json.dumps(doc))
    full.no_truncation()
    full.no_padding()
    encodings = full.encode_batch(texts)
    used = {i for e in encodings for i in e.ids}
    used |= {t["id"] for t in doc["added_tokens"]}
    for token in ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"):
        used.add(doc["model"]["vocab"][token])
    kept = sorted(used)
    new_id = {old: new for new, old in enumerate(kept)}
    id_to_token = {i: t for t, i in doc["model"]["vocab"].items()}
    doc["model"]["vocab"] = {id_to_token[old]: new for old, new in new_id.items()}
    for t in doc["added_tokens"]:
        t["id"] = new_id[t["id"]]
    for special in doc["post_processor"]["special_tokens"].values():
        special["ids"] = [new_id[i] for i in special["ids"]]
    if doc.get("padding"):
        doc["padding"]["pad_id"] = new_id[doc["padding"]["pad_id"]]

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    cut = Tokenizer.from_file(os.path.join(args.out, "tokenizer.json"))
    cut.no_truncation()
    cut.no_padding()
    for text, e, c in zip(texts, encodings, cut.encode_batch(texts)):
        assert [new_id[i] for i in e.ids] == c.ids and e.offsets == c.offsets, f"the cut vocabulary changes {text!r}"

    weights = load_file(os.path.join(args.model, "model.safetensors"))
    name = "embeddings.word_embeddings.weight"
    weights[name] = weights[name][torch.tensor(kept)]
    weights = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous() for k, v in weights.items()}
    save_file(weights, os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    config = json.load(open(os.path.join(args.model, "config.json")))
    config["vocab_size"] = len(kept)
    config["pad_token_id"] = new_id[config.get("pad_token_id", 0)]
    json.dump(config, open(os.path.join(args.out, "config.json"), "w"), indent=2)
    for extra in ("tokenizer_config.json", "special_tokens_map.json"):
        if os.path.exists(os.path.join(args.model, extra)):
            shutil.copy(os.path.join(args.model, extra), args.out)
    size = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(f"{args.out}: vocabulary {len(id_to_token)} -> {len(kept)} tokens (the same tokens for all {len(texts)} "
          f"texts), weights bfloat16, {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
