#!/usr/bin/env python3
"""make_wordpiece_fixture.py: the Hugging Face references of tests/test_wordpiece.cpp, beyond the shared
wordpiece-uncased fixture (copied as it is into tests/fixtures/wordpiece-uncased).

Writes, under tests/fixtures:

  wordpiece-cased/vocab.txt      a cased WordPiece vocabulary (3000 entries) trained with tokenizers'
                                 BertWordPieceTokenizer(lowercase=False) on /usr/share/common-licenses and the
                                 multilingual TEXTS below
  wordpiece-cased/cases.jsonl    TEXTS through BertTokenizerFast(that vocab, do_lower_case=False), in the schema
                                 of wordpiece-uncased/cases.jsonl (text, ids, tokens, slow_agrees, pair_second,
                                 pair_max_length, pair_ids, pair_token_type_ids, pair_attention_mask)
  wordpiece-extra/cases.jsonl    TEXTS through BertTokenizerFast(wordpiece-uncased/vocab.txt), same schema
  wordpiece-extra/batches.jsonl  batches through tokenizer(texts, text_pairs, max_length=, padding=,
                                 truncation=), one a line with the settings (as `anatomy tokenize` flags) and
                                 input_ids / token_type_ids / attention_mask
  wordpiece-extra/unicode.json   every code point (surrogates excepted) in chunks of 4096 consecutive ones,
                                 through BertNormalizer + BertPreTokenizer in four settings (lowercase, strip
                                 accents): a 64-bit FNV-1a hash of the words joined by '\\n' per chunk

BertTokenizerFast is transformers' BertTokenizer (tokenizers' Rust code); `slow_agrees` says whether the
pure-Python BertTokenizerLegacy gives the same ids (they differ on a few characters; the fast one is the
reference). Run in a virtual environment:

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers transformers
    /tmp/tokvenv/bin/python tests/tools/make_wordpiece_fixture.py [--train-vocab]
    /tmp/tokvenv/bin/python tests/tools/make_wordpiece_fixture.py --dump-chunk 3 0x1E000   # debug a chunk
"""
import argparse
import glob
import json
import os
import tempfile

import tokenizers
import transformers
from tokenizers import BertWordPieceTokenizer, normalizers, pre_tokenizers
from transformers import BertTokenizerFast
from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures")

TEXTS = [
    # Latin with accents, ligatures, German sharp s, Turkish dotted I, Scandinavian letters
    "Crème brûlée à la française, Ærøskøbing, Straße, İstanbul, façade, Zürich, Łódź.",
    "ﬁne ﬂow ǅemal Ǆ ǆ — ligatures and digraphs stay (NFD is not NFKD).",
    "e\u0301 a\u0308 o\u0302\u0323 q\u0323\u0307 \u1e0b\u0323 n\u0303\u0303: combining marks in every order",
    "ÉCOLE ÉLÉMENTAIRE; École; école; ECOLE",
    # Greek (final sigma: Rust lowercases letter by letter), Cyrillic, Hebrew, Arabic, Devanagari, Thai
    "ΣΊΣΥΦΟΣ ΟΔΟΣ Ωμέγα ἄλφα ῥῶ",
    "Москва — столица России. Ёлка, йод, Ї.",
    "עברית עם ניקוד: שָׁלוֹם. العربية: مَرْحَبًا. हिन्दी: नमस्ते. ไทย: สวัสดีครับ",
    # CJK: ideographs split, kana and hangul do not; extensions and compatibility ideographs
    "中文字符 mixed 日本語テキストとひらがな 한국어 텍스트입니다",
    "\U00020000\U0002a6df \U0002b81f\U0002b820\U0002b91f\U0002b920 \uf900\ufa6d\U0002f800 \u3400\u4dbf",
    "漢字かな交じり文、句読点。「括弧」『二重』【隅付き】",
    # punctuation and symbols, ASCII and not
    "«quotes» „German“ ‘single’ … ‽ ¿Qué? ¡Hola! ・ ﹏ ⁂ 〜 ～ ￥ § ¶ † ‡ • ‰ ′ ″",
    "$5 + 3 = 8 ^ ` ~ | \\ < > © ® ° ± µ ¬ ¦ ¨ ´ ¸ ¯ × ÷",
    "mail john.doe@example.com or see https://example.org/a?b=c&d=e#frag (v1.2.3-rc4_final)",
    "ＦＵＬＬＷＩＤＴＨ ＡＢＣ１２３！？（）［］",
    # numbers
    "3.14159 1,000,000 2nd 10th ½ ² ³ ① Ⅻ ٣ ३",
    # control, format and odd white space characters
    "a\x00b\x01c\x7fd\x85e\u200bf\u200dg\u00adh\ufeffi\ufffdj\ue000k\U000f0000l",
    "tab\tvertical\x0bform\x0cfeed\x1cfile\x1dgroup line\u2028sep\u2029para\r\nwindows",
    "\u00a0non\u00a0breaking\u2009thin\u3000ideographic\u202fnarrow\u205fmath\u1680ogham",
    "\u200e\u200fbidi\u202a\u202e marks\u2066\u2069 word\u2060joiner",
    # emoji and characters newer than the Rust crates' Unicode
    "Emoji 😀 🥰 🫨 👍🏽 👨‍👩‍👧 ❤️ 🇫🇷",
    "new: \u08e2 \u061d \U00011938 \u0890 \u1abf\u0d81 \ua7cb\ua7cc \U00010d50 \u1c89",
    # special tokens in the text
    "Hello [MASK] world [SEP] x [CLS][PAD][UNK] [mask] [MASK [[MASK]] [ MASK ]",
    # long words: 100 characters is the limit (counted after normalization)
    "a" * 100 + " " + "b" * 101,
    "é" * 100 + " " + "é" * 101 + " ok",
    "x" * 99 + "é" + " " + "y" * 100 + "\u0301",
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "z" * 250,
    # empty and nothing-but-removed
    "",
    "   ",
    "\n\t\r",
    "\u200b\u200b\x00",
    # licence-like text (most of the vocabulary)
    "This program is free software: you can redistribute it and/or modify it under the terms of the "
    "GNU General Public License as published by the Free Software Foundation, either version 3 of the "
    "License, or (at your option) any later version.",
    "THE SOFTWARE IS PROVIDED “AS IS”, WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED.",
    "Don't stop-believing!!! (parentheses) [brackets] {braces} <angle> 'quoted' \"double\"",
]

PAIR_SECONDS = [
    "second segment here",
    "",
    "A much longer second segment, which the truncation has to cut down to size, and more words after it.",
    "中文 pair Ünïcödé",
    "[SEP] inside [CLS]",
]
PAIR_MAX_LENGTHS = [24, 8, 16, 48, 13, 3, 9]


def fast(vocab, lower, strip=None):
    return BertTokenizerFast(vocab, do_lower_case=lower, strip_accents=strip)


def slow(vocab, lower, strip=None):
    return BertTokenizerLegacy(vocab, do_lower_case=lower, strip_accents=strip)


def cases(vocab, lower):
    tok, ref = fast(vocab, lower), slow(vocab, lower)
    out = []
    for i, text in enumerate(TEXTS):
        ids = tok(text)["input_ids"]
        second = PAIR_SECONDS[i % len(PAIR_SECONDS)]
        max_length = PAIR_MAX_LENGTHS[i % len(PAIR_MAX_LENGTHS)]
        pair = tok(text, second, truncation="longest_first", max_length=max_length, padding="max_length")
        out.append({
            "text": text,
            "ids": ids,
            "tokens": tok.convert_ids_to_tokens(ids),
            "slow_agrees": ref(text)["input_ids"] == ids,
            "pair_second": second,
            "pair_max_length": max_length,
            "pair_ids": pair["input_ids"],
            "pair_token_type_ids": pair["token_type_ids"],
            "pair_attention_mask": pair["attention_mask"],
        })
    return out


# Batches: settings as `anatomy tokenize` flags (null: flag absent) and tokenizer(...)'s outputs.
BATCH_SETTINGS = [
    {},
    {"max_length": 12},
    {"max_length": 10, "truncation": True, "padding": "max_length"},
    {"padding": "longest"},
    {"max_length": 16, "truncation": True, "padding": "longest"},
    {"max_length": 40, "padding": "max_length"},
    {"max_length": 2, "truncation": True},
]
PAIR_BATCH_SETTINGS = [
    {},
    {"max_length": 9, "truncation": True},
    {"max_length": 13, "truncation": True, "padding": "longest"},
    {"max_length": 3, "truncation": True},
    {"max_length": 30, "truncation": True, "padding": "max_length"},
    {"max_length": 20},
    {"padding": "longest"},
]


def batches(vocab_name, lower, strip, subset=None):
    vocab = os.path.join(FIXTURES, vocab_name, "vocab.txt")
    tok = fast(vocab, lower, strip)
    texts = [t for t in TEXTS if t.strip() and len(t) < 100][:12] + [""]
    seconds = [PAIR_SECONDS[i % len(PAIR_SECONDS)] for i in range(len(texts))]
    out = []
    for pairs, settings_list in ((None, BATCH_SETTINGS), (seconds, PAIR_BATCH_SETTINGS)):
        for k, settings in enumerate(settings_list):
            if subset is not None and k not in subset:
                continue
            kwargs = {"max_length": settings.get("max_length"), "padding": settings.get("padding", False),
                      "truncation": True if settings.get("truncation") else None}
            enc = tok(texts, pairs, **kwargs) if pairs else tok(texts, **kwargs)
            out.append({
                "vocab": vocab_name,
                "do_lower_case": lower,
                "strip_accents": strip,
                "max_length": settings.get("max_length"),
                "padding": settings.get("padding"),
                "truncation": bool(settings.get("truncation")),
                "texts": texts,
                "text_pairs": pairs,
                "input_ids": enc["input_ids"],
                "token_type_ids": enc["token_type_ids"],
                "attention_mask": enc["attention_mask"],
            })
    return out


# The four normalizer settings of unicode.json: (lowercase, strip_accents).
UNICODE_MODES = [(True, True), (False, False), (True, False), (False, True)]
CHUNK = 4096


def chunk_text(start):
    return "".join(chr(cp) for cp in range(start, start + CHUNK) if not 0xD800 <= cp <= 0xDFFF)


def chunk_words(mode, start):
    lower, strip = UNICODE_MODES[mode]
    norm = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=strip,
                                      lowercase=lower)
    pre = pre_tokenizers.BertPreTokenizer()
    return [w for w, _ in pre.pre_tokenize_str(norm.normalize_str(chunk_text(start)))]


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def unicode_hashes():
    modes = []
    for mode, (lower, strip) in enumerate(UNICODE_MODES):
        hashes = ["{:016x}".format(fnv1a64("\n".join(chunk_words(mode, start)).encode("utf-8")))
                  for start in range(0, 0x110000, CHUNK)]
        modes.append({"lowercase": lower, "strip_accents": strip, "hashes": hashes})
    return {"chunk": CHUNK, "modes": modes}


def train_cased_vocab(path):
    with tempfile.TemporaryDirectory() as tmp:
        extra = os.path.join(tmp, "texts.txt")
        with open(extra, "w", encoding="utf-8") as f:
            f.write("\n".join(TEXTS * 3 + PAIR_SECONDS * 3) + "\n")
        files = sorted(p for p in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(p)) + [extra]
        trainer = BertWordPieceTokenizer(lowercase=False, strip_accents=False)
        trainer.train(files, vocab_size=3000, min_frequency=2, show_progress=False)
        vocab = trainer.get_vocab()
    with open(path, "w", encoding="utf-8") as f:
        for token, _ in sorted(vocab.items(), key=lambda kv: kv[1]):
            f.write(token + "\n")


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dump-chunk", nargs=2, metavar=("MODE", "START"),
                        help="print the words of one chunk of unicode.json (mode 0-3, start code point)")
    parser.add_argument("--train-vocab", action="store_true",
                        help="train wordpiece-cased/vocab.txt anew (the trainer breaks ties in no fixed order, "
                             "so the vocabulary comes out a little different each time; by default the "
                             "committed one is kept, and trained only when it is absent)")
    args = parser.parse_args()
    if args.dump_chunk:
        for w in chunk_words(int(args.dump_chunk[0]), int(args.dump_chunk[1], 0)):
            print(" ".join("U+{:04X}".format(ord(c)) for c in w))
        return

    cased_dir = os.path.join(FIXTURES, "wordpiece-cased")
    extra_dir = os.path.join(FIXTURES, "wordpiece-extra")
    os.makedirs(cased_dir, exist_ok=True)
    os.makedirs(extra_dir, exist_ok=True)
    cased_vocab = os.path.join(cased_dir, "vocab.txt")
    if args.train_vocab or not os.path.exists(cased_vocab):
        train_cased_vocab(cased_vocab)
    uncased_vocab = os.path.join(FIXTURES, "wordpiece-uncased", "vocab.txt")

    write_jsonl(os.path.join(cased_dir, "cases.jsonl"), cases(cased_vocab, lower=False))
    write_jsonl(os.path.join(extra_dir, "cases.jsonl"), cases(uncased_vocab, lower=True))
    rows = (batches("wordpiece-uncased", True, None) + batches("wordpiece-cased", False, None, subset=(0, 2, 4))
            + batches("wordpiece-cased", True, False, subset=(1, 3)))
    write_jsonl(os.path.join(extra_dir, "batches.jsonl"), rows)
    with open(os.path.join(extra_dir, "unicode.json"), "w", encoding="utf-8") as f:
        json.dump(unicode_hashes(), f)
        f.write("\n")
    print(f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}: wrote {cased_dir} and "
          f"{extra_dir} ({len(TEXTS)} texts, {len(rows)} batches)")


if __name__ == "__main__":
    main()
