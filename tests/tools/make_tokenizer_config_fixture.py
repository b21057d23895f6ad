#!/usr/bin/env python3
"""make_tokenizer_config_fixture.py: writes tests/fixtures/tokenizer-config/cases.json, what transformers'
AutoTokenizer makes of a tokenizer.json from tests/fixtures/tokenizers/ under a tokenizer_config.json that
asks for something else (do_lower_case, strip_accents, tokenize_chinese_chars, cls/sep/pad tokens,
add_prefix_space, trim_offsets). Each case names its base fixture and the config; the test copies the
base's tokenizer.json next to the config in a temporary directory and compares the ids, type ids, offsets
and the padding id.

    /tmp/tokvenv/bin/python tests/tools/make_tokenizer_config_fixture.py
"""
import json
import os
import shutil
import tempfile

import tokenizers
import transformers
from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = [
    ["Hello WORLD, Ünïcödé façade!", None],
    ["naïve café 東京 and 北京大学", "The Quick brown fox's tail"],
    ["  leading spaces\tand tabs ", None],
    ["CamelCase HTTPServer résumé", "ÉCOLE élève"],
]
CASES = [
    ("bert-lower-over-cased", "wordpiece-cased", {"tokenizer_class": "BertTokenizer", "do_lower_case": True}),
    ("bert-cased-over-uncased", "wordpiece-uncased",
     {"tokenizer_class": "BertTokenizer", "do_lower_case": False, "strip_accents": False}),
    ("bert-class-defaults", "wordpiece-cased", {"tokenizer_class": "BertTokenizerFast"}),
    ("bert-strip-chinese-cls", "wordpiece-uncased",
     {"tokenizer_class": "BertTokenizer", "strip_accents": True, "tokenize_chinese_chars": False,
      "cls_token": "[MASK]", "pad_token": {"content": "[UNK]", "__type": "AddedToken"}}),
    ("distilbert-cased", "wordpiece-uncased", {"tokenizer_class": "DistilBertTokenizer", "do_lower_case": False}),
    ("electra-cased", "wordpiece-uncased", {"tokenizer_class": "ElectraTokenizerFast", "do_lower_case": False}),
    ("roberta-prefix", "roberta-bpe", {"tokenizer_class": "RobertaTokenizer", "add_prefix_space": True}),
    ("roberta-tokens", "roberta-bpe",
     {"tokenizer_class": "RobertaTokenizer", "cls_token": "<mask>", "pad_token": "<unk>", "trim_offsets": False}),
    ("gpt2-prefix", "gpt2-bpe", {"tokenizer_class": "GPT2Tokenizer", "add_prefix_space": True}),
    ("other-class-pad", "modernbert-bpe", {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "[SEP]"}),
]


def main():
    out_dir = os.path.join(ROOT, "fixtures", "tokenizer-config")
    os.makedirs(out_dir, exist_ok=True)
    cases = []
    for name, base, config in CASES:
        with tempfile.TemporaryDirectory() as d:
            shutil.copy(os.path.join(ROOT, "fixtures", "tokenizers", base, "tokenizer.json"), d)
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump(config, f)
            tok = AutoTokenizer.from_pretrained(d)
            encodings = []
            for text, pair in TEXTS:
                e = tok(text, pair, return_offsets_mapping=True, return_token_type_ids=True)
                encodings.append({"text": text, "text_pair": pair, "input_ids": e["input_ids"],
                                  "token_type_ids": e["token_type_ids"],
                                  "offsets": [list(o) for o in e["offset_mapping"]]})
            cases.append({"name": name, "base": base, "config": config, "class": type(tok).__name__,
                          "pad_id": tok.pad_token_id if tok.pad_token_id is not None else -1,
                          "encodings": encodings})
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump({"made_with": f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}",
                   "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases written to {out_dir}/cases.json")


if __name__ == "__main__":
    main()
