#!/usr/bin/env python3
"""make_mlm_data_fixture.py: run_mlm's data preparation and DataCollatorForLanguageModeling's masking, as Hugging
Face runs them, on tests/fixtures/license-text (its train.jsonl texts, its WordPiece vocab.txt, lowercased), into
tests/fixtures/mlm-data/expected.json:

- "group_texts": run_mlm's tokenize_function (return_special_tokens_mask=True) and group_texts (datasets'
  map(batched=True), 1000 lines a call) at max_seq_length 64: every block's input_ids and special_tokens_mask;
- "line_by_line": the line-by-line path (blank lines dropped, truncation to 64): the same fields per line;
- "masking": the collator's masking (mlm_probability 0.15) of the blocks, 200 times with torch's generator:
  the fraction of eligible tokens chosen, and of the chosen ones replaced by [MASK], by another token, kept.

    python3 tests/tools/make_mlm_data_fixture.py

Needs transformers and torch.
"""
import json
import os

import torch
from transformers import BertTokenizerFast, DataCollatorForLanguageModeling

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "fixtures", "license-text")
OUT = os.path.join(HERE, "..", "fixtures", "mlm-data")
L = 64

tok = BertTokenizerFast(os.path.join(SRC, "vocab.txt"), do_lower_case=True)
texts = [json.loads(line)["text"] for line in open(os.path.join(SRC, "train.jsonl")) if line.strip()]


def group_texts(examples):  # run_mlm's
    concatenated = {k: sum(examples[k], []) for k in examples.keys()}
    total = len(concatenated[list(examples.keys())[0]])
    total = (total // L) * L
    return {k: [t[i: i + L] for i in range(0, total, L)] for k, t in concatenated.items()}


blocks = {"input_ids": [], "special_tokens_mask": []}
for start in range(0, len(texts), 1000):
    enc = tok(texts[start:start + 1000], return_special_tokens_mask=True)
    g = group_texts({"input_ids": enc["input_ids"], "special_tokens_mask": enc["special_tokens_mask"]})
    for k in blocks:
        blocks[k] += g[k]

lines = [t for t in texts if len(t) > 0 and not t.isspace()]
lbl = tok(lines, truncation=True, max_length=L, return_special_tokens_mask=True)

collator = DataCollatorForLanguageModeling(tok, mlm_probability=0.15)
torch.manual_seed(0)
ids = torch.tensor(blocks["input_ids"])
special = torch.tensor(blocks["special_tokens_mask"])
eligible = chosen = replaced = random = kept = 0
for _ in range(200):
    inputs, labels = collator.torch_mask_tokens(ids.clone(), special_tokens_mask=special.clone())
    picked = labels != -100
    assert not (picked & (special == 1)).any()
    eligible += int((special == 0).sum())
    chosen += int(picked.sum())
    replaced += int((picked & (inputs == tok.mask_token_id)).sum())
    random += int((picked & (inputs != tok.mask_token_id) & (inputs != ids)).sum())
    kept += int((picked & (inputs == ids)).sum())

json.dump({
    "description": "run_mlm's group_texts and line_by_line preparation of tests/fixtures/license-text/train.jsonl "
                   "(BertTokenizerFast of its vocab.txt, lowercased, max_seq_length 64) and "
                   "DataCollatorForLanguageModeling(mlm_probability=0.15)'s masking rates over 200 maskings of the "
                   "blocks, made by tests/tools/make_mlm_data_fixture.py",
    "max_seq_length": L,
    "mask_token_id": tok.mask_token_id,
    "group_texts": blocks,
    "line_by_line": {"input_ids": lbl["input_ids"], "special_tokens_mask": lbl["special_tokens_mask"]},
    "masking": {"eligible": eligible, "chosen": chosen, "replaced_by_mask": replaced, "replaced_by_random": random,
                "kept": kept},
}, open(os.path.join(OUT, "expected.json"), "w"))
print(len(blocks["input_ids"]), "blocks;", len(lines), "lines; chosen", chosen / eligible, "mask", replaced / chosen,
      "random", random / chosen, "kept", kept / chosen)
