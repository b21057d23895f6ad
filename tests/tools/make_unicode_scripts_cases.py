#!/usr/bin/env python3
"""make_unicode_scripts_cases.py: writes tests/fixtures/tokenizers-scripts/cases.jsonl, the pieces that Hugging Face
`tokenizers`' UnicodeScripts pre-tokenizer cuts texts into, for tests/test_unicode_scripts.cpp.

One JSON object a line:
  {"name": ..., "text": ..., "normalize": [[op, args...], ...], "pieces": [[normalized, start, end], ...]}
      normalize (optional): steps applied to the text before the pre-tokenizer, in order, as NormalizedString's
      methods: ["lowercase"], ["replace", pattern, content] (a literal pattern), ["prepend", text];
      pieces: each piece's normalized string and the bytes [start, end) of "text" it comes from.

Texts: hand-written mixes of scripts (Latin, Han, Hiragana, Katakana and U+30FC, Cyrillic, Greek, Arabic,
Hebrew, Hangul, Devanagari, Thai, digits, punctuation, spaces of several kinds, emoji with joiners and
modifiers, combining marks, code points the library's table does not know), random texts over those
characters (fixed seed), and "table" texts that walk the code space: every 31st code point of planes 0 to 3
and 14 (every 4093rd elsewhere), and the two code points on each side of every script boundary of Perl's
Unicode::UCD (scripts/gen_unicode_scripts.py reads it), 200 to a text. The pieces come from the library
itself (PreTokenizedString, get_splits of the original in bytes); without normalization they are checked
against pre_tokenize_str too.

    /tmp/tokvenv/bin/pip install tokenizers
    /tmp/tokvenv/bin/python tests/tools/make_unicode_scripts_cases.py
"""
import json
import os
import random
import sys

import tokenizers
from tokenizers import PreTokenizedString, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from gen_unicode_scripts import is_surrogate, perl_scripts  # noqa: E402

SEED = "anatomy-unicode-scripts-cases-1"
PRE = pre_tokenizers.UnicodeScripts()

TEXTS = [
    "", " ", "   ", "a", " a", "  ab ", "a b", "ab ", "\u0378", "\u0378a", "a\u0378b", "1a", "a1", "a1b",
    "どこで生れ。Yes", "Apples are りんご 林檎", "東京タワーはとても高いです。Tokyo Tower is tall.",
    "カタカナーとひらがなと漢字ー", "ー", " ー", "xーy", "ーア", "アー", "Ｔｏｋｙｏ ﾄｳｷｮｳ ｰ",
    "Привет, мир! Hello, world!", "Ελληνικά και English και Русский", "Αθήνα2024",
    "مرحبا بالعالم hello العربية123", "שלום עולם abc", "한국어 텍스트와 English 혼합", "한국어日本語",
    "हिन्दी में लिखा गया text", "ภาษาไทย ผสม English", "Ṫëšţ ẇïţħ ďïąçŗïţïçš",
    "e\u0301 a\u0300\u0323 \u0301start", "\u0301", " \u0301a", "a\u0301\u0410\u0301", "\u05d0\u05b0\u05d1",
    "\u0915\u094d\u0937", "Emoji: 😀 👍🏽 👨‍👩‍👧 🇫🇷🇩🇪 #️⃣ ❤️", "😀😀abc😀", "a\u200db", "a\u200cb\u2060c",
    "tab\tnewline\nCR\r nbsp\u00a0ideographic\u3000end", "\u3000あ", "\u00a0a", "\u2028a\u2029",
    "3.14159 + 2,718 = 5,859.59 (approx.)", "$100 €200 ¥300 £400", "“quotes” «guillemets» 「括弧」",
    "a-b_c/d\\e|f~g", "日本語、中文，한국어。", "x\u30fb\u30fcy", "\u3005\u3006\u3007\u303b",
    "\u4e00\u3400\U00020000\U0002b740", "\U0001d400\U0001d7ce", "\ufffd\ufffdab", "\U000e0001\U000e0020x",
    "\ufe0f\ufe0fa", "a\U000e0100b", "ab\U0010fffd", "\U0001e900\U0001e922x", "\u0560\u0561",
    "\u0589\u0531 \u061c\u0627", "\u0951\u0915\u0953\u0954", "\u1c80\u0410", "\u08a0\u0870\u0627",
    "\U00016fe4\U00016fe0\U00017000", "\U00011900\U0001e290", "\u1ab0\u1abf\u1ac0a",
]

NORMALIZED = [
    ([["lowercase"]], ["İstanbul ありがとう ー 東京", "ÀÉÎ ΣΑΣ ЖЖ", "ǅ Ǆ ǆ 1A"]),
    ([["replace", " ", "\u2581"], ["prepend", "\u2581"]],
     ["Hello world 世界 ー です", " leading  spaces", "   ", "", "a", "日本 語"]),
    ([["lowercase"], ["replace", " ", "\u2581"], ["prepend", "\u2581"]], ["İstanbul ありがとう ー 東京"]),
    ([["replace", "ー", "--"]], ["カー ター ー", "ーー"]),
]

ALPHABET = list("aZ09 .,!?-'") + [
    "\u00e9", "\u0301", "\u0300", "\u4e00", "\u6771", "\u3042", "\u3093", "\u30a2", "\u30f3", "\u30fc", "\u3001",
    "\u3002", "\u0416", "\u0436", "\u03b1", "\u03a9", "\u0627", "\u0644", "\u0661", "\u05d0", "\uac00", "\u1100",
    "\u0915", "\u094d", "\u0e01", "\u0e33", "\U0001F600", "\U0001F3FD", "\u200d", "\u00a0", "\u3000", "\t",
    "\n", "\u0378", "\u0560", "\U0001e900", "\ufe0f", "\u2581", "\uff21", "\uff76", "\U00020000", "\u0589",
]


def byte_offsets(text, char_offsets):
    starts = [0]
    for c in text:
        starts.append(starts[-1] + len(c.encode()))
    return [starts[i] for i in char_offsets]


def pieces_of(text, steps):
    """[[normalized, start, end], ...] as the library cuts `text` after the normalization `steps`."""
    pretokenized = PreTokenizedString(text)

    def normalize(n):
        for op, *args in steps:
            getattr(n, op)(*args)

    if steps:
        pretokenized.normalize(normalize)
    PRE.pre_tokenize(pretokenized)
    pieces = [[s, start, end] for s, (start, end), _ in pretokenized.get_splits("original", "byte")]
    if not steps:
        direct = []
        for s, (start, end) in PRE.pre_tokenize_str(text):
            direct.append([s] + byte_offsets(text, [start, end]))
        assert direct == pieces, (text, direct, pieces)
    return pieces


def table_texts():
    """Texts that walk the code space (see the module's description)."""
    _, perl = perl_scripts()
    chosen = set(cp for cp in range(0, 0x110000, 31) if cp < 0x40000 or 0xE0000 <= cp < 0xF0000)
    chosen.update(range(0x40000, 0x110000, 4093))
    for cp in range(1, 0x110000):
        if perl[cp] != perl[cp - 1]:
            chosen.update(range(cp - 2, min(cp + 2, 0x110000)))
    chosen = sorted(cp for cp in chosen if not is_surrogate(cp))
    return ["".join(chr(cp) for cp in chosen[i:i + 200]) for i in range(0, len(chosen), 200)]


def main():
    out_dir = os.path.join(ROOT, "tests/fixtures/tokenizers-scripts")
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(SEED)
    lines = []

    def case(name, text, steps=None):
        line = {"name": name, "text": text}
        if steps:
            line["normalize"] = steps
        line["pieces"] = pieces_of(text, steps or [])
        lines.append(line)

    for i, text in enumerate(TEXTS):
        case(f"mixed {i}", text)
    for j, (steps, texts) in enumerate(NORMALIZED):
        for i, text in enumerate(texts):
            case(f"normalized {j} {i}", text, steps)
    for i in range(150):
        case(f"random {i}", "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 24))))
    for i, text in enumerate(table_texts()):
        case(f"table {i}", text)

    path = os.path.join(out_dir, "cases.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    print(f"wrote {path}: {len(lines)} cases, {os.path.getsize(path)} bytes (tokenizers {tokenizers.__version__})")


if __name__ == "__main__":
    main()
