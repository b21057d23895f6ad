#!/usr/bin/env python3
"""make_token_alignment_fixture.py: run_ner.py's preparation of word-tagged sentences, made with
transformers, as the reference of the engine's (data/token_data.h).

For the sentences of tests/fixtures/ner-task/validation.conll (and a few with accents and punctuation
inside words), tokenized as pre-split words with truncation to MAX_LENGTH, it writes the input_ids and
the labels run_ner's tokenize_and_align_labels gives them, with label_all_tokens off and on, for:
  - the task's own vocab.txt through BertTokenizerFast (do_lower_case=True), and
  - tests/fixtures/tokenizers/roberta-bpe through AutoTokenizer(add_prefix_space=True), as run_ner
    loads a RoBERTa tokenizer.
The label list is run_ner's get_label_list (the sorted distinct tags of the training file).

    python3 tests/tools/make_token_alignment_fixture.py REPO_DIR OUT_FILE

Needs transformers (and tokenizers).
"""
import json
import os
import sys

from transformers import AutoTokenizer, BertTokenizerFast

MAX_LENGTH = 24
EXTRA = [
    (["Zoë", "Müller-Lüdenscheidt", "visited", "São", "Paulo", "."], ["B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O"]),
    (["O'Neil", "(", "Atlas", "Labs", ")", "said", "no", "!"], ["B-PER", "O", "B-ORG", "I-ORG", "O", "O", "O", "O"]),
    (["Anna"] * 30, ["B-PER"] + ["I-PER"] * 29),  # truncated
]


def read_conll(path):
    sentences, words, tags = [], [], []
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if not line:
            if words:
                sentences.append((words, tags))
            words, tags = [], []
            continue
        parts = line.split()
        words.append(parts[0])
        tags.append(parts[-1])
    if words:
        sentences.append((words, tags))
    return sentences


def align(tokenizer, sentences, label_to_id, label_list, label_all_tokens):
    b_to_i = []
    for idx, label in enumerate(label_list):
        if label.startswith("B-") and label.replace("B-", "I-") in label_list:
            b_to_i.append(label_list.index(label.replace("B-", "I-")))
        else:
            b_to_i.append(idx)
    enc = tokenizer([w for w, _ in sentences], is_split_into_words=True, truncation=True, max_length=MAX_LENGTH)
    out = []
    for i, (_, tags) in enumerate(sentences):
        labels, previous = [], None
        for word in enc.word_ids(batch_index=i):
            if word is None:
                labels.append(-100)
            elif word != previous:
                labels.append(label_to_id[tags[word]])
            else:
                labels.append(b_to_i[label_to_id[tags[word]]] if label_all_tokens else -100)
            previous = word
        out.append({"input_ids": enc["input_ids"][i], "labels": labels})
    return out


def main():
    repo, out_file = sys.argv[1], sys.argv[2]
    task = os.path.join(repo, "tests/fixtures/ner-task")
    train = read_conll(os.path.join(task, "train.conll"))
    label_list = sorted({t for _, tags in train for t in tags} | {"B-PER", "I-PER", "B-LOC", "I-LOC"})
    label_to_id = {l: i for i, l in enumerate(label_list)}
    sentences = read_conll(os.path.join(task, "validation.conll"))[:40] + EXTRA
    tokenizers = {
        "wordpiece": BertTokenizerFast(os.path.join(task, "vocab.txt"), do_lower_case=True),
        "roberta-bpe": AutoTokenizer.from_pretrained(os.path.join(repo, "tests/fixtures/tokenizers/roberta-bpe"),
                                                     add_prefix_space=True),
    }
    result = {"made_by": "tests/tools/make_token_alignment_fixture.py", "max_length": MAX_LENGTH,
              "labels": label_list, "sentences": [{"words": w, "tags": t} for w, t in sentences], "cases": {}}
    for name, tok in tokenizers.items():
        for all_tokens in (False, True):
            result["cases"][f"{name}{'-all' if all_tokens else ''}"] = align(tok, sentences, label_to_id, label_list,
                                                                             all_tokens)
    with open(out_file, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
