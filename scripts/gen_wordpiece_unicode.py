#!/usr/bin/env python3
"""gen_wordpiece_unicode.py: writes src/anatomy/data/generated/wordpiece_unicode.cpp, the Unicode tables of the
WordPiece tokenizer (src/anatomy/data/wordpiece.cpp).

The tokenizer must give exactly the ids of Hugging Face's BertTokenizerFast (transformers 5: BertTokenizer),
whose normalizer and pre-tokenizer are the Rust `tokenizers` library's BertNormalizer and BertPreTokenizer.
They take their Unicode data from three places of three ages:

  * categories (control, format and private-use characters that clean_text drops; nonspacing marks that
    strip_accents drops; punctuation that the pre-tokenizer isolates) from the crate unicode_categories 0.1.1,
    whose tables are Unicode 8.0 (characters assigned later belong to no category there);
  * NFD (decompositions and canonical combining classes, for strip_accents) from the crate
    unicode-normalization-alignments 0.1.12: Unicode 9.0.0;
  * to_lowercase and White_Space from Rust's standard library (the Unicode of the compiler that built the
    wheel: 16.0 for tokenizers 0.23).

Python's unicodedata (Unicode 14.0.0 in Python 3.11) is the specification this script starts from: every
property below is first computed from it as Hugging Face's code defines it (bert.rs: is_whitespace,
is_control = Cc/Cf/Co except \\t\\n\\r, is_chinese_char ranges, NFD then drop Mn, to_lowercase; the
pre-tokenizer's is_bert_punc = ASCII punctuation or P*). Then, because identical ids are the goal, the
installed `tokenizers` is asked about every code point (0 to 0x10FFFF, surrogates excepted), and where the
two disagree the library's answer is taken. The disagreements (all of them code points whose data changed
between the crates' Unicode versions and Python's) are counted, with examples, in the generated file's
header and on stdout, so the tables say which Unicode they are.

Run it in a virtual environment with tokenizers installed (tests/tools/make_wordpiece_fixture.py needs the
same one):

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers
    /tmp/tokvenv/bin/python scripts/gen_wordpiece_unicode.py [--out src/anatomy/data/generated/wordpiece_unicode.cpp]
"""
import argparse
import os
import string
import sys
import unicodedata

import tokenizers
from tokenizers import normalizers, pre_tokenizers

# Flags of a code point; wordpiece_unicode.h documents them.
REMOVE, SPACE, PUNCT, CHINESE, DECOMPOSES, NONSPACING, LOWERCASE, COMBINING = (1 << i for i in range(8))

# Rust's char::is_whitespace: the White_Space property (PropList.txt), which unicodedata does not expose.
# It has not changed since Unicode 6.3.
WHITE_SPACE = set(range(0x09, 0x0E)) | {0x20, 0x85, 0xA0, 0x1680} | set(range(0x2000, 0x200B)) | {
    0x2028, 0x2029, 0x202F, 0x205F, 0x3000}

# bert.rs is_chinese_char (note 0x2B920, where the Python BertTokenizer has 0x2B820).
CHINESE_RANGES = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
                  (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]

HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3


def code_points():
    return [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]


def is_chinese(cp):
    return any(lo <= cp <= hi for lo, hi in CHINESE_RANGES)


def hangul_nfd(cp):
    s = cp - HANGUL_FIRST
    lead, vowel, trail = 0x1100 + s // 588, 0x1161 + (s % 588) // 28, 0x11A7 + s % 28
    return chr(lead) + chr(vowel) + (chr(trail) if trail != 0x11A7 else "")


def spec(cps):
    """Every property from unicodedata, as Hugging Face's code defines it."""
    out = {}
    for cp in cps:
        c = chr(cp)
        cat = unicodedata.category(c)
        remove = cp in (0, 0xFFFD) or (cat in ("Cc", "Cf", "Co") and c not in "\t\n\r")
        out[cp] = {
            "remove": remove,
            "space": cp in WHITE_SPACE,
            "punct": c in string.punctuation or cat.startswith("P"),
            "nfd": unicodedata.normalize("NFD", c),
            "mn": cat == "Mn",
            "ccc": unicodedata.combining(c),
            "lower": c.lower(),
        }
    return out


def probe(cps, py):
    """The same properties as the installed tokenizers computes them."""
    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False,
                                       lowercase=False)
    chinese = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=True, strip_accents=False,
                                         lowercase=False)
    strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True,
                                       lowercase=False)
    lower = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=False,
                                       lowercase=True)
    nfd = normalizers.NFD()
    pre = pre_tokenizers.BertPreTokenizer()
    out = {}
    for cp in cps:
        c = chr(cp)
        cleaned = clean.normalize_str(c)
        assert cleaned in ("", " ", c), (hex(cp), cleaned)
        words = [w for w, _ in pre.pre_tokenize_str("a" + c + "b")]
        if words == ["a", "b"]:
            space, punct = True, False
        elif words == ["a", c, "b"]:
            space, punct = False, True
        else:
            assert words == ["a" + c + "b"], (hex(cp), words)
            space, punct = False, False
        assert (chinese.normalize_str(c) == " " + c + " ") == is_chinese(cp), hex(cp)
        decomposed = nfd.normalize_str(c)
        stripped = strip.normalize_str(c)
        # A code point that NFD keeps is a nonspacing mark exactly when strip_accents drops it.
        mn = decomposed == c and stripped == ""
        # Its combining class is not 0 exactly when NFD moves it before U+0345 (class 240, the largest);
        # classes are stable, so the value is unicodedata's.
        ccc = 0
        if decomposed == c and cp != 0x345 and nfd.normalize_str("\u0345" + c) == c + "\u0345":
            ccc = py[cp]["ccc"]
            assert 0 < ccc < 240, hex(cp)
        elif cp == 0x345:
            ccc = 240
        out[cp] = {
            "remove": cleaned == "" or (cp in (0, 0xFFFD)),
            "space": space,
            "punct": punct,
            "nfd": decomposed,
            "mn": mn,
            "ccc": ccc,
            "lower": lower.normalize_str(c),
            "stripped": stripped,
        }
        if cleaned == " ":
            assert space or c in "\t\n\r", hex(cp)
    # strip_accents = NFD, then drop the nonspacing marks: check it composes for every code point.
    for cp in cps:
        p = out[cp]
        expect = "".join(d for d in p["nfd"] if not out[ord(d)]["mn"])
        assert expect == p["stripped"], (hex(cp), expect, p["stripped"])
        for d in p["nfd"]:
            assert out[ord(d)]["nfd"] == d, hex(cp)
    return out


def compare(cps, py, hf):
    """Where the library departs from unicodedata, by property: {property: [code points]}."""
    diffs = {}
    for cp in cps:
        for key in ("remove", "space", "punct", "nfd", "mn", "ccc", "lower"):
            if key in ("mn", "ccc") and hf[cp]["nfd"] != chr(cp):
                continue  # only the marks that NFD leaves matter
            if py[cp][key] != hf[cp][key]:
                diffs.setdefault(key, []).append(cp)
    return diffs


def c_array(values, per_line=16, fmt="{}"):
    lines = []
    for i in range(0, len(values), per_line):
        lines.append("    " + ", ".join(fmt.format(v) for v in values[i:i + per_line]) + ",")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--out", default=os.path.join(root, "src/anatomy/data/generated/wordpiece_unicode.cpp"))
    args = parser.parse_args()

    cps = code_points()
    py = spec(cps)
    hf = probe(cps, py)
    diffs = compare(cps, py, hf)

    flags = [0] * 0x110000
    decompositions, lowercases, classes = [], [], []
    for cp in cps:
        p = hf[cp]
        f = 0
        if p["remove"]:
            f |= REMOVE
        if p["space"]:
            f |= SPACE
        if p["punct"]:
            f |= PUNCT
        if is_chinese(cp):
            f |= CHINESE
        if p["nfd"] != chr(cp):
            f |= DECOMPOSES
            if HANGUL_FIRST <= cp <= HANGUL_LAST:
                assert p["nfd"] == hangul_nfd(cp), hex(cp)  # computed, not tabulated
            else:
                decompositions.append((cp, [ord(d) for d in p["nfd"]]))
        if p["mn"]:
            f |= NONSPACING
        if p["lower"] != chr(cp):
            f |= LOWERCASE
            lowercases.append((cp, [ord(d) for d in p["lower"]]))
        if p["ccc"]:
            f |= COMBINING
            classes.append((cp, p["ccc"]))
        flags[cp] = f
    # No code point may be both removed and something else that matters before removal.
    assert all(not (flags[cp] & REMOVE and flags[cp] & (PUNCT | CHINESE)) for cp in cps)

    # Two-stage table: 256 code points a block, identical blocks stored once.
    block_ids, blocks, index = {}, [], []
    for b in range(0x110000 // 256):
        block = tuple(flags[b * 256:(b + 1) * 256])
        if block not in block_ids:
            block_ids[block] = len(blocks)
            blocks.append(block)
        index.append(block_ids[block])

    def mapping_table(name, entries):
        data, rows = [], []
        for cp, seq in entries:
            rows.append("    {{0x{:04X}, {}, {}}},".format(cp, len(data), len(seq)))
            data.extend(seq)
        return ("const Mapping k{0}[] = {{\n{1}\n}};\nconst size_t k{0}Count = {2};\n"
                "const char32_t k{0}Data[] = {{\n{3}\n}};\n").format(
                    name, "\n".join(rows), len(entries), c_array(data, 12, "0x{:04X}"))

    summary = []
    for key, name in (("remove", "dropped by clean_text (Cc/Cf/Co)"), ("space", "White_Space"),
                      ("punct", "punctuation"), ("nfd", "NFD"), ("mn", "nonspacing mark (Mn)"),
                      ("ccc", "canonical combining class"), ("lower", "to_lowercase")):
        found = diffs.get(key, [])
        examples = " ".join("U+{:04X}".format(cp) for cp in found[:6])
        summary.append("//   {:<36} {:>6} code points{}".format(
            name + ":", len(found), " (e.g. " + examples + ")" if found else ""))

    blocks_text = "\n".join("  {\n" + c_array(list(b), 32) + "\n  }," for b in blocks)
    classes_text = "\n".join("    {{0x{:04X}, {}}},".format(cp, c) for cp, c in classes)
    header = f"""// wordpiece_unicode.cpp: GENERATED by scripts/gen_wordpiece_unicode.py; do not edit.
//
// The Unicode properties of the WordPiece tokenizer (wordpiece_unicode.h), as Hugging Face tokenizers
// {tokenizers.__version__} (BertNormalizer, BertPreTokenizer) uses them: categories of Unicode 8.0 (the crate
// unicode_categories 0.1.1), NFD of Unicode 9.0.0 (unicode-normalization-alignments 0.1.12), lowercase and
// White_Space of Rust's standard library. Computed from Python {sys.version.split()[0]}'s unicodedata (Unicode
// {unicodedata.unidata_version}) and checked code point by code point against the library; the library's answer
// was taken where they differ:
{chr(10).join(summary)}
"""
    body = f"""
#include "anatomy/data/wordpiece_unicode.h"

namespace anatomy::data::unicode {{

const uint16_t kBlockIndex[0x1100] = {{
{c_array(index, 24)}
}};

const uint8_t kBlocks[{len(blocks)}][256] = {{
{blocks_text}
}};

{mapping_table("Decompositions", decompositions)}
{mapping_table("LowercaseMappings", lowercases)}
const CombiningClass kCombiningClasses[] = {{
{classes_text}
}};
const size_t kCombiningClassCount = {len(classes)};

}}  // namespace anatomy::data::unicode
"""
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(header + body)
    print(f"wrote {args.out}: {len(blocks)} blocks, {len(decompositions)} decompositions, "
          f"{len(lowercases)} lowercase mappings, {len(classes)} combining classes")
    print(f"tokenizers {tokenizers.__version__} against unicodedata {unicodedata.unidata_version}:")
    print("\n".join(line[3:] for line in summary))


if __name__ == "__main__":
    main()
