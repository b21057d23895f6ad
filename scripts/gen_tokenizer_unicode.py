#!/usr/bin/env python3
"""gen_tokenizer_unicode.py: writes src/anatomy/data/generated/tokenizer_unicode.cpp, the Unicode tables of the
tokenizer.json normalizers and pre-tokenizers (src/anatomy/data/tokenizer/unicode_tables.h) beyond those that
the WordPiece tokenizer already has (src/anatomy/data/wordpiece_unicode.h: canonical decompositions, canonical
combining classes, to_lowercase, White_Space, BertNormalizer's categories).

The normalizers must give exactly the strings and offsets of Hugging Face's Rust `tokenizers`, which takes its
Unicode data from several crates of several ages:

  * NFKD/NFKC (compatibility decompositions, canonical compositions) and StripAccents' is_combining_mark
    (Mn, Mc, Me) from unicode-normalization-alignments 0.1.12: Unicode 9.0.0;
  * the grapheme clusters of the Precompiled normalizer (Grapheme_Cluster_Break, Extended_Pictographic,
    Indic_Conjunct_Break) from unicode-segmentation 1.13 (the probes below show it without the characters
    that Unicode 17.0 added);
  * char::is_numeric (Digits pre-tokenizer: Nd, Nl, No) from Rust's standard library;
  * the Punctuation pre-tokenizer's is_punc (ASCII punctuation or P*) from unicode_categories 0.1.1: Unicode 8.0.

Python is the specification this script starts from: unicodedata (Unicode 14.0.0 in Python 3.11) for the
decompositions, compositions and categories, and the `regex` module (Unicode 17.0) for the grapheme
properties, which unicodedata lacks. Then the installed `tokenizers` is asked about every code point (0 to 0x10FFFF,
surrogates excepted), and where the two disagree the library's answer is taken. The grapheme properties are
probed through Precompiled normalizers built here (build_charsmap: a SentencePiece double array whose keys end
a grapheme cluster early or late, so the library's output shows where it put the boundaries); only the
properties that can change a Precompiled result are observable that way (ExtendLike = Extend, ZWJ or
SpacingMark; Prepend; Control for code points of up to 3 bytes; Extended_Pictographic), and those are the ones
checked. The disagreements are counted, with examples, in the generated file's header and on stdout.

Run it in a virtual environment with tokenizers and regex installed (tests/tools/make_normalizer_cases.py needs
the same one):

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers regex
    /tmp/tokvenv/bin/python scripts/gen_tokenizer_unicode.py [--out src/anatomy/data/generated/tokenizer_unicode.cpp]
"""
import argparse
import os
import string
import struct
import sys
import unicodedata

# Grapheme categories, in the order of unicode_tables.h's GraphemeCategory.
GRAPHEME_CATEGORIES = ["Any", "CR", "LF", "Control", "Extend", "ZWJ", "Regional_Indicator", "Prepend",
                       "SpacingMark", "L", "V", "T", "LV", "LVT", "Extended_Pictographic", "InCB_Consonant"]
CAT = {name: i for i, name in enumerate(GRAPHEME_CATEGORIES)}
EXTEND_LIKE = {CAT["Extend"], CAT["ZWJ"], CAT["SpacingMark"]}
CONTROL_LIKE = {CAT["Control"], CAT["CR"], CAT["LF"]}

# Flags above the 4 bits of the grapheme category; unicode_tables.h documents them.
INCB_LINKER, INCB_EXTEND, NUMERIC, PUNCTUATION, COMBINING_MARK, COMPAT, COMPOSE_FIRST, COMPOSE_SECOND = (
    1 << i for i in range(4, 12))

HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3


def code_points():
    return [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]


def build_charsmap(entries):
    """A SentencePiece precompiled_charsmap (what tokenizer.json's Precompiled holds, base64 aside): a u32 byte
    size, a Darts double array of u32 units mapping key bytes to offsets in the replacement blob, and the
    blob of NUL-terminated replacements. `entries` maps key bytes (no NUL) to replacement strings. Every trie
    node gets a block of 256 units of its own: wasteful, simple, and valid for a few thousand nodes."""
    blob = bytearray()
    root = {}
    for key, replacement in entries.items():
        node = root
        for byte in key:
            assert byte != 0
            node = node.setdefault(byte, {})
        node[None] = len(blob)
        blob += replacement.encode() + b"\0"
    units = [0] * 256

    def place(node, position):
        base = len(units)
        units.extend([0] * 256)
        offset = position ^ base
        assert offset < (1 << 21)
        units[position] = (units[position] & 0x1FF) | (offset << 10)
        if None in node:
            units[position] |= 1 << 8  # has a leaf: its value unit is at base ^ 0
            units[base] = (1 << 31) | node[None]
        for label in sorted(k for k in node if k is not None):
            units[base ^ label] = label
            place(node[label], base ^ label)

    place(root, 0)
    return struct.pack("<I", 4 * len(units)) + struct.pack("<%dI" % len(units), *units) + bytes(blob)


def spec(cps):
    """Every property from Python (unicodedata, regex), as the crates define it."""
    import regex
    everything = "".join(chr(cp) for cp in cps)

    def having(pattern):
        return {ord(m.group()) for m in regex.finditer(pattern, everything)}

    grapheme = {}
    for name in GRAPHEME_CATEGORIES[1:14]:
        for cp in having(r"\p{Grapheme_Cluster_Break=" + name + "}"):
            grapheme[cp] = CAT[name]
    for name, prop in (("Extended_Pictographic", r"\p{Extended_Pictographic}"),
                       ("InCB_Consonant", r"\p{InCB=Consonant}")):
        for cp in having(prop):
            assert cp not in grapheme, hex(cp)  # both are Grapheme_Cluster_Break=Other
            grapheme[cp] = CAT[name]
    linkers, incb_extend = having(r"\p{InCB=Linker}"), having(r"\p{InCB=Extend}")
    # unicode-segmentation's fast path for ASCII.
    for cp in range(0x7F):
        grapheme[cp] = CAT["LF"] if cp == 0x0A else CAT["CR"] if cp == 0x0D else CAT["Control"] if cp < 0x20 \
            else CAT["Any"]

    out = {}
    for cp in cps:
        c = chr(cp)
        cat = unicodedata.category(c)
        out[cp] = {
            "nfd": unicodedata.normalize("NFD", c),
            "nfkd": unicodedata.normalize("NFKD", c),
            "mark": cat in ("Mn", "Mc", "Me"),
            "numeric": cat in ("Nd", "Nl", "No"),
            "punct": c in string.punctuation or cat.startswith("P"),
            "grapheme": grapheme.get(cp, CAT["Any"]),
            "linker": cp in linkers,
            "incb_extend": cp in incb_extend,
        }
    # Canonical compositions: the two-code-point canonical decompositions that NFC recomposes (the primary
    # composites; Hangul syllables are arithmetic).
    compositions = {}
    for cp in cps:
        d = unicodedata.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue
        parts = [int(p, 16) for p in d.split()]
        if len(parts) == 2 and unicodedata.normalize("NFC", chr(parts[0]) + chr(parts[1])) == chr(cp):
            compositions[(parts[0], parts[1])] = cp
    return out, compositions


def probe(cps, py_compositions):
    """The same properties as the installed tokenizers computes them."""
    from tokenizers import normalizers, pre_tokenizers
    nfd, nfkd, nfc = normalizers.NFD(), normalizers.NFKD(), normalizers.NFC()
    strip = normalizers.StripAccents()
    digits = pre_tokenizers.Digits(individual_digits=True)
    punct = pre_tokenizers.Punctuation()
    after_a = normalizers.Precompiled(build_charsmap({b"a": "Z"}))
    lead = normalizers.Precompiled(build_charsmap({bytes([b]): "Z" for b in range(0xC2, 0xF5)}))
    emoji = normalizers.Precompiled(build_charsmap({"\u00a9".encode(): "Z"}))

    def splits(pre, c):
        words = [w for w, _ in pre.pre_tokenize_str("a" + c + "b")]
        if words == ["a", c, "b"]:
            return True
        assert words == ["a" + c + "b"], (hex(ord(c)), words)
        return False

    out = {}
    for cp in cps:
        c = chr(cp)
        p = {
            "nfd": nfd.normalize_str(c),
            "nfkd": nfkd.normalize_str(c),
            "mark": strip.normalize_str(c) == "",
            "numeric": splits(digits, c),
            "punct": splits(punct, c),
        }
        # Grapheme boundaries, seen through Precompiled (a grapheme cluster shorter than 6 bytes is looked up
        # whole, by its shortest key prefix): "a" + c is one cluster iff c is ExtendLike; c + "a" iff c is
        # Prepend; c + U+0301 is two iff c is Control, CR or LF; U+00A9 ZWJ c is one iff c is
        # Extended_Pictographic (or ExtendLike).
        p["extend_like"] = after_a.normalize_str("a" + c) == "Z"
        if cp >= 0x80:
            p["prepend"] = lead.normalize_str(c + "a") == "Z"
            if cp < 0x10000:
                p["control"] = lead.normalize_str(c + "\u0301") != "Z"
        p["pictographic"] = "\u200d" in emoji.normalize_str("\u00a9\u200d" + c)
        out[cp] = p
    compositions = {}
    for (a, b), c in py_compositions.items():
        if nfc.normalize_str(chr(a) + chr(b)) == chr(c):
            compositions[(a, b)] = c
    return out, compositions


def reconcile(cps, py, hf, py_compositions, hf_compositions):
    """The tables, from the library's answers; and where the library departs from Python, by property."""
    diffs = {}
    props = {}
    for cp in cps:
        s, h = py[cp], hf[cp]
        for key in ("nfd", "nfkd", "mark", "numeric", "punct"):
            if s[key] != h[key]:
                diffs.setdefault(key, []).append(cp)
        cat = s["grapheme"]
        # Observable grapheme properties: take the library's.
        if h["extend_like"] != (cat in EXTEND_LIKE):
            diffs.setdefault("extend", []).append(cp)
            cat = CAT["Extend"] if h["extend_like"] else CAT["Any"]
        if "prepend" in h and h["prepend"] != (cat == CAT["Prepend"]):
            diffs.setdefault("prepend", []).append(cp)
            cat = CAT["Prepend"] if h["prepend"] else CAT["Any"]
        if "control" in h and h["control"] != (cat in CONTROL_LIKE):
            diffs.setdefault("control", []).append(cp)
            cat = CAT["Control"] if h["control"] else CAT["Any"]
        if not h["extend_like"] and h["pictographic"] != (cat == CAT["Extended_Pictographic"]):
            diffs.setdefault("pictographic", []).append(cp)
            cat = CAT["Extended_Pictographic"] if h["pictographic"] else CAT["Any"]
        props[cp] = dict(h, grapheme=cat, linker=s["linker"], incb_extend=s["incb_extend"])
    missing = sorted(set(py_compositions) - set(hf_compositions))
    if missing:
        diffs["compose"] = [py_compositions[pair] for pair in missing]
    return props, diffs


def c_array(values, per_line=16, fmt="{}"):
    lines = []
    for i in range(0, len(values), per_line):
        lines.append("    " + ", ".join(fmt.format(v) for v in values[i:i + per_line]) + ",")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--out", default=os.path.join(root, "src/anatomy/data/generated/tokenizer_unicode.cpp"))
    args = parser.parse_args()

    import regex
    import tokenizers

    cps = code_points()
    py, py_compositions = spec(cps)
    hf, hf_compositions = probe(cps, py_compositions)
    props, diffs = reconcile(cps, py, hf, py_compositions, hf_compositions)

    flags = [0] * 0x110000
    compat = []
    for cp in cps:
        p = props[cp]
        f = p["grapheme"]
        if p["linker"]:
            f |= INCB_LINKER
        if p["incb_extend"]:
            f |= INCB_EXTEND
        if p["numeric"]:
            f |= NUMERIC
        if p["punct"]:
            f |= PUNCTUATION
        if p["mark"]:
            f |= COMBINING_MARK
        if p["nfkd"] != p["nfd"]:
            # The crate's full compatibility decomposition; the canonical one (wordpiece_unicode) otherwise.
            f |= COMPAT
            assert not HANGUL_FIRST <= cp <= HANGUL_LAST
            compat.append((cp, [ord(d) for d in p["nfkd"]]))
        flags[cp] = f
    pairs = sorted(hf_compositions.items())
    for (a, b), _ in pairs:
        flags[a] |= COMPOSE_FIRST
        flags[b] |= COMPOSE_SECOND
    # (Hangul syllables compose by arithmetic, before the table is asked.)

    # Two-stage table, identical blocks stored once; the block size that makes the smallest table.
    best = None
    for shift in (5, 6, 7, 8):
        size = 1 << shift
        ids, blocks, index = {}, [], []
        for b in range(0x110000 >> shift):
            block = tuple(flags[b * size:(b + 1) * size])
            if block not in ids:
                ids[block] = len(blocks)
                blocks.append(block)
            index.append(ids[block])
        cost = 2 * len(index) + 2 * size * len(blocks)
        if best is None or cost < best[0]:
            best = (cost, shift, index, blocks)
    _, shift, index, blocks = best

    data, rows = [], []
    for cp, seq in compat:
        rows.append("{{0x{:04X}, {}, {}}}".format(cp, len(data), len(seq)))
        data.extend(seq)
    assert len(data) < 65536 and max(len(seq) for _, seq in compat) < 256

    names = (("nfd", "canonical decomposition (NFD)"), ("nfkd", "compatibility decomposition (NFKD)"),
             ("compose", "canonical composition"), ("mark", "combining mark (Mn, Mc, Me)"),
             ("numeric", "numeric (Nd, Nl, No)"), ("punct", "punctuation"),
             ("extend", "grapheme: Extend, ZWJ, SpacingMark"), ("prepend", "grapheme: Prepend"),
             ("control", "grapheme: Control, CR, LF"), ("pictographic", "grapheme: Extended_Pictographic"))
    summary = []
    for key, name in names:
        found = diffs.get(key, [])
        examples = " ".join("U+{:04X}".format(cp) for cp in found[:6])
        summary.append("//   {:<40} {:>6} code points{}".format(
            name + ":", len(found), " (e.g. " + examples + ")" if found else ""))

    python, ucd = sys.version.split()[0], unicodedata.unidata_version
    header = f"""// tokenizer_unicode.cpp: GENERATED by scripts/gen_tokenizer_unicode.py; do not edit.
//
// The Unicode properties of the tokenizer.json normalizers and pre-tokenizers (unicode_tables.h), as Hugging
// Face tokenizers {tokenizers.__version__} uses them: NFKD, compositions and combining marks of Unicode 9.0.0
// (unicode-normalization-alignments 0.1.12), grapheme clusters of unicode-segmentation 1.13, is_numeric of
// Rust's standard library, punctuation of Unicode 8.0 (unicode_categories 0.1.1). Computed from Python
// {python}'s unicodedata (Unicode {ucd}) and the regex module {regex.__version__} (grapheme properties), and
// checked code point by code point against the library; the library's answer was taken where they differ
// (for the grapheme properties, those that a Precompiled result can show):
{chr(10).join(summary)}
"""
    blocks_text = "\n".join("  {\n" + c_array(list(b), 32) + "\n  }," for b in blocks)
    pairs_text = c_array(["{{0x{:04X}, 0x{:04X}, 0x{:04X}}}".format(a, b, c) for (a, b), c in pairs], 4)
    body = f"""
#include "anatomy/data/tokenizer/unicode_tables.h"

namespace anatomy::data::tok::unicode_tables {{

static_assert(kBlockShift == {shift}, "unicode_tables.h and this file disagree on the block size");

const uint16_t kIndex[{len(index)}] = {{
{c_array(index, 24)}
}};

const uint16_t kBlocks[{len(blocks)}][{1 << shift}] = {{
{blocks_text}
}};

const Decomposition kCompatibility[] = {{
{c_array(rows, 6)}
}};
const size_t kCompatibilityCount = {len(compat)};
const char32_t kCompatibilityData[] = {{
{c_array(data, 12, "0x{:04X}")}
}};

const Composition kCompositions[] = {{
{pairs_text}
}};
const size_t kCompositionCount = {len(pairs)};

}}  // namespace anatomy::data::tok::unicode_tables
"""
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(header + body)
    print(f"wrote {args.out}: {len(blocks)} blocks of {1 << shift}, {len(compat)} compatibility decompositions, "
          f"{len(pairs)} compositions")
    print(f"tokenizers {tokenizers.__version__} against unicodedata {unicodedata.unidata_version} "
          f"and regex {regex.__version__}:")
    print("\n".join(line[3:] for line in summary))


if __name__ == "__main__":
    main()
