#!/usr/bin/env python3
"""make_choice_data_fixture.py: SWAG-style multiple-choice data and run_swag.py's preparation of it, as
Hugging Face runs it, into tests/fixtures/choice-data:

- swag.jsonl: examples built from tests/fixtures/license-text/validation.jsonl: the first half of a sentence as
  `sent1`, its next two words as `sent2`, the rest of it as the right ending and the rests of three other
  sentences as the wrong ones, the right one at a seeded place (`label`);
- train.jsonl: the same from license-text/train.jsonl (the multiple-choice task test trains on it and evaluates
  on swag.jsonl);
- expected.json: run_swag's preprocess_function on them (BertTokenizerFast of license-text's vocab.txt,
  lowercased; first sentences [sent1] * 4, second sentences [sent2 + " " + ending_i], truncation=True,
  max_length=64): each example's input_ids, token_type_ids and attention_mask per choice.

    python3 tests/tools/make_choice_data_fixture.py

Needs transformers.
"""
import json
import os
import random

from transformers import BertTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "fixtures", "license-text")
OUT = os.path.join(HERE, "..", "fixtures", "choice-data")


def make_examples(path, seed, limit):
    rng = random.Random(seed)
    texts = [json.loads(line)["text"] for line in open(path) if line.strip()]
    texts = [t for t in texts if len(t.split()) >= 8]
    rests = []
    examples = []
    for t in texts:
        words = t.split()
        half = len(words) // 2
        examples.append((" ".join(words[:half]), " ".join(words[half:half + 2]), " ".join(words[half + 2:])))
        rests.append(" ".join(words[half + 2:]))
    out = []
    for i, (sent1, sent2, right) in enumerate(examples[:limit]):
        wrong = rng.sample([r for j, r in enumerate(rests) if j != i and r != right], 3)
        label = rng.randrange(4)
        endings = wrong[:label] + [right] + wrong[label:]
        row = {"sent1": sent1, "sent2": sent2, "label": label}
        row.update({f"ending{k}": e for k, e in enumerate(endings)})
        out.append(row)
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    examples = make_examples(os.path.join(SRC, "validation.jsonl"), 7, 40)
    with open(os.path.join(OUT, "swag.jsonl"), "w") as f:
        for row in examples:
            f.write(json.dumps(row) + "\n")
    with open(os.path.join(OUT, "train.jsonl"), "w") as f:
        for row in make_examples(os.path.join(SRC, "train.jsonl"), 11, 1000):
            f.write(json.dumps(row) + "\n")
    tok = BertTokenizerFast(os.path.join(SRC, "vocab.txt"), do_lower_case=True)
    # run_swag's preprocess_function
    first = [[e["sent1"]] * 4 for e in examples]
    second = [[f"{e['sent2']} {e[f'ending{k}']}" for k in range(4)] for e in examples]
    enc = tok(sum(first, []), sum(second, []), truncation=True, max_length=64)
    grouped = {k: [v[i: i + 4] for i in range(0, len(v), 4)] for k, v in enc.items()}
    json.dump({"description": "run_swag.py's preprocess_function (truncation=True, max_length=64) on swag.jsonl "
                              "with BertTokenizerFast of tests/fixtures/license-text/vocab.txt, lowercased; made by "
                              "tests/tools/make_choice_data_fixture.py",
               "max_seq_length": 64, "labels": [e["label"] for e in examples],
               "input_ids": grouped["input_ids"], "token_type_ids": grouped["token_type_ids"],
               "attention_mask": grouped["attention_mask"]}, open(os.path.join(OUT, "expected.json"), "w"))
    print(len(examples), "examples")


if __name__ == "__main__":
    main()
