#!/usr/bin/env python3
"""make_normalizer_cases.py: writes tests/fixtures/tokenizers-normalizers/cases.jsonl, the expected results of
Hugging Face `tokenizers` for tests/test_tokenizer_normalizers.cpp: normalized strings with the original span
of every normalized character, for each normalizer of tokenizer.json, and the ids and offsets of Unigram
models.

One JSON object a line, of four kinds:
  {"define": NAME, "normalizer": {...}}   a normalizer the cases below name (a big Precompiled charsmap once);
                                          a Sequence's step may be such a name too
  {"define": NAME, "model": {...}}        a Unigram model, likewise
  {"name": ..., "normalizer": NAME or {...}, "text": ..., "normalized": ..., "offsets": [s0, e0, s1, e1, ...]}
      offsets: for each character of "normalized", the bytes [s, e) of "text" it comes from (absent when the
      case checks the string only)
  {"name": ..., "model": NAME, "text": ..., "ids": [...], "offsets": [s0, e0, ...]} or {..., "error": true}
      the Unigram tokens of "text" (one pre-tokenized piece), offsets in its bytes

The spans come from the library itself: a Tokenizer with the normalizer, a pre-tokenizer that isolates every
character ([\\s\\S]) and a WordLevel model that knows none (each character an [UNK] whose offsets are its
original span). The Precompiled charsmaps are SentencePiece's nmt_nfkc (a tiny model trained here) and small
ones built by scripts/gen_tokenizer_unicode.py's build_charsmap to reach the library's grapheme and
replacement quirks. The Unigram models are SentencePiece models trained here (with and without byte
fallback) and a hand-made one with ties, duplicates and no unk_id. Random texts use a fixed seed.

    /tmp/tokvenv/bin/pip install tokenizers sentencepiece regex
    /tmp/tokvenv/bin/python tests/tools/make_normalizer_cases.py
"""
import base64
import io
import json
import os
import random
import sys
import unicodedata

import sentencepiece as spm
import tokenizers
from sentencepiece import sentencepiece_model_pb2
from tokenizers import Regex, Tokenizer, models, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from gen_tokenizer_unicode import build_charsmap  # noqa: E402

SEED = "anatomy-normalizer-cases-1"

CORPUS = [
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs!",
    "Hugging Face's tokenizers normalize text before the model sees it: NFKC, lowercase, accents.",
    "Sphinx of black quartz, judge my vow. How vexingly quick daft zebras jump!",
    "Les élèves étudient à l'école; ça coûte 12,50 € — très cher, n'est-ce pas?",
    "Der Fußgänger überquert die Straße. Größe, Maß und Öl.",
    "Ｆｕｌｌｗｉｄｔｈ ｔｅｘｔ ａｎｄ ｈａｌｆｗｉｄｔｈ ｶﾀｶﾅ with ﬁ and ﬂ ligatures ™ ① ½.",
    "自由软件基金会发布了通用公共许可证。東京都の天気は晴れ。한국어 텍스트를 토큰으로 나눕니다.",
    "Ελληνικά κείμενα και Русский текст для проверки, and Türkçe İstanbul ıı.",
    "यह प्रोग्राम मुफ़्त सॉफ़्टवेयर है। हिन्दी में क्ष, त्र, ज्ञ.",
    "Emoji: 😀 👍🏽 👨‍👩‍👧 🇫🇷🇩🇪 #️⃣ and numbers 0123456789 3.14159.",
] * 8


def byte_offsets(text, char_offsets):
    """Python character offsets of `text` -> byte offsets of its UTF-8."""
    starts = [0]
    for c in text:
        starts.append(starts[-1] + len(c.encode()))
    return [starts[i] for i in char_offsets]


def normalizer_of(json_value):
    """A tokenizers normalizer from its tokenizer.json value."""
    tok = Tokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": json_value,
        "pre_tokenizer": None, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"}}))
    return tok


def normalize(json_value, text):
    """(normalized, flat byte offsets per normalized character) as the library computes them."""
    tok = normalizer_of(json_value)
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), "isolated")
    normalized = tok.normalizer.normalize_str(text) if tok.normalizer else text
    encoding = tok.encode(text, add_special_tokens=False)
    assert len(encoding.offsets) == len(normalized), (text, normalized, encoding.offsets)
    flat = []
    for start, end in encoding.offsets:
        flat.extend(byte_offsets(text, [start, end]))
    return normalized, flat


def train_spm(byte_fallback, rule="nmt_nfkc"):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS), model_writer=model,
                                   vocab_size=900 if byte_fallback else 600,
                                   model_type="unigram", normalization_rule_name=rule, byte_fallback=byte_fallback,
                                   character_coverage=0.98, hard_vocab_limit=False, minloglevel=2,
                                   num_threads=1, seed_sentencepiece_size=10000)
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model.getvalue())
    return proto


def unigram_json(proto):
    unk_id = next(i for i, p in enumerate(proto.pieces) if p.type == 2)  # UNKNOWN
    return {"type": "Unigram", "unk_id": unk_id, "vocab": [[p.piece, p.score] for p in proto.pieces],
            "byte_fallback": proto.trainer_spec.byte_fallback}


def random_texts(rng, alphabet, count, max_len):
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, max_len))) for _ in range(count)]


# Characters that exercise normalization: combining marks of several classes (reordering, composition,
# blocking), Hangul jamo and syllables, compatibility characters, singletons, composition exclusions, CJK,
# emoji with ZWJ and skin tones, regional indicators, Indic consonants and viramas, controls and odd spaces.
ALPHABET = list(
    "aeiouAEIOUcnsyz ,.!?-'0123456789") + [
    "\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u030A", "\u030C", "\u0323", "\u0327", "\u0328",
    "\u0316", "\u031B", "\u0345", "\u05B0", "\u05B4", "\u0591", "\u0F71", "\u0F72", "\u0F74", "\u0F73",
    "\u0344", "\u0340", "\u0343", "\u1100", "\u1161", "\u11A8", "\u11A7", "\uAC00", "\uAC01", "\uD7A3",
    "\u00E9", "\u00C5", "\u212B", "\u2126", "\u1E9B", "\u1E69", "\u1EC7", "\u01D5", "\u0958", "\u2ADC",
    "\uFB01", "\uFB03", "\u2122", "\u2460", "\u00BD", "\u2153", "\u3300", "\u33A1", "\uFF21", "\uFF76",
    "\uFF9E", "\u30AB", "\u3099", "\u309A", "\u1E0A", "\u0130", "\u0131", "\u00DF", "\u1E9E", "\u03A3",
    "\u00A0", "\u2003", "\u3000", "\u200B", "\u200D", "\uFEFF", "\t", "\n", "\r", "\x00", "\x1e", "\x7f",
    "\u0085", "\u4E00", "\u4E8C", "\U00020000", "\U0001F600", "\U0001F44D", "\U0001F3FD", "\u2764",
    "\uFE0F", "\U0001F1EB", "\U0001F1F7", "\u0915", "\u094D", "\u0937", "\u093F", "\u0600", "\u0E01",
    "\u0E33", "\u00A8", "\u02DC", "\u1FEE", "\u0387", "\u037E", "\u2FA1D", "\U0001D400", "\u1D2C",
    "\u2581", "\uFFFD", "\u0670", "\u0651", "\u064E", "\u1F80", "\u0391", "\u03B1",
]


def main():
    out_dir = os.path.join(ROOT, "tests/fixtures/tokenizers-normalizers")
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(SEED)
    lines = []

    def expand(value):
        """A normalizer with the defined ones it names (a name in place of a Sequence step) written out."""
        if isinstance(value, str):
            return expand(defined[value])
        if value.get("type") == "Sequence":
            return dict(value, normalizers=[expand(step) for step in value["normalizers"]])
        return value

    def case(name, normalizer, text, offsets=True):
        normalized, flat = normalize(expand(normalizer), text)
        line = {"name": name, "normalizer": normalizer, "text": text, "normalized": normalized}
        if offsets:
            line["offsets"] = flat
        lines.append(line)

    defined = {}

    def define(name, normalizer):
        defined[name] = normalizer
        lines.append({"define": name, "normalizer": normalizer})

    # --- NF* -------------------------------------------------------------------------------------------------
    nf_texts = [
        "", "abc", "\u00e9", "e\u0301", "\u1e9b\u0323", "a\u0323\u0302\u0301b", "a\u0301\u0323", "\u212b\u2126",
        "\uac00\ud7a3\uac01", "\u1100\u1161\u11a8", "\u1100\u1161\u11a7", "\uac00\u11a8", "\u1100\u1100\u1161",
        "\ufb01\u2460\u00bd\u3300\uff76\uff9e", "\u0958\u2adc\u0f73\u0f75\u0344", "x\u0345\u0301\u0316",
        "\u05b0\u05b4\u0591a\u0591\u05b0", "\u1fee\u0387\u037e\u00a8", "\u01d5\u0055\u0308\u0304",
        "\u0041\u030a\u0301\u0327", "\u0301abc", "\u0301\u0300", "\u0f71\u0f72\u0f74", "\u1e0a\u0323",
        "\U0001d400\u1d2c\u33a1\u2153", "ｶﾞｷﾞ \u30ab\u3099 \u304b\u309a", "\U0002fa1d\U00011938\u0915\u093c",
    ]
    for kind in ("NFD", "NFKD", "NFC", "NFKC"):
        for i, text in enumerate(nf_texts):
            case(f"{kind} {i}", {"type": kind}, text)
        for i, text in enumerate(random_texts(rng, ALPHABET, 60, 24)):
            case(f"{kind} random {i}", {"type": kind}, text)
    # Every code point that NFKD changes (Hangul sampled), in chunks: the tables, entry by entry.
    changing = [cp for cp in range(0xA0, 0x110000) if not 0xD800 <= cp <= 0xDFFF
                and unicodedata.normalize("NFKD", chr(cp)) != chr(cp)
                and not (0xAC00 <= cp <= 0xD7A3 and cp % 97 != 0)]
    for kind in ("NFD", "NFKD", "NFC", "NFKC"):
        for i in range(0, len(changing), 400):
            case(f"{kind} table {i}", {"type": kind}, " ".join(chr(cp) for cp in changing[i:i + 400]),
                 offsets=False)

    # --- Lowercase, StripAccents, Strip, Prepend, Replace, Nmt, ByteLevel, BertNormalizer ------------------
    for i, text in enumerate(["", "ABC", "\u0130stanbul", "A\u0130\u0130b", "\u03a3\u0391\u03a3", "\u1e9e\u00df",
                              "\u2c2f\u0400\U00010400\U0001e900"]):
        case(f"Lowercase {i}", {"type": "Lowercase"}, text)
    for i, text in enumerate(["", "e\u0301t\u0308", "\u00e9", "\u0915\u093f\u094d", "\u0301x\u0301\u0301"]):
        case(f"StripAccents {i}", {"type": "StripAccents"}, text)
        case(f"NFKD+StripAccents {i}", {"type": "Sequence", "normalizers": [
            {"type": "NFKD"}, {"type": "StripAccents"}]}, text)
    for left, right in ((True, True), (True, False), (False, True), (False, False)):
        for i, text in enumerate(["", "  a b  ", "\u3000\u00a0x\u2003\n", "   ", "\u00e9\u00e9  ", "  \u00e9"]):
            case(f"Strip {left} {right} {i}", {"type": "Strip", "strip_left": left, "strip_right": right}, text)
    for i, text in enumerate(["", "a", "hello world", "\u00e9t\u00e9"]):
        case(f"Prepend {i}", {"type": "Prepend", "prepend": "\u2581"}, text)
        case(f"Prepend long {i}", {"type": "Prepend", "prepend": "<s>x"}, text)
    replaces = [
        ({"String": " "}, "\u2581"), ({"String": "ab"}, "X"), ({"String": "\u00e9"}, "e\u0301"),
        ({"String": "aa"}, ""), ({"String": ""}, "-"), ({"Regex": r"\s+"}, " "), ({"Regex": r"\d"}, "#"),
        ({"Regex": "a*"}, "-"), ({"Regex": " {2,}"}, " "), ({"String": "``"}, "\""),
        ({"Regex": "[\u00e9\u00e8]"}, "E"),
    ]
    for j, (pattern, content) in enumerate(replaces):
        for i, text in enumerate(["", "ab aab  aaab", "\u00e9t\u00e9 \u00e8 1 22", "``x``  y", "a"]):
            case(f"Replace {j} {i}", {"type": "Replace", "pattern": pattern, "content": content}, text)
    for i, text in enumerate(random_texts(rng, ALPHABET, 20, 20)):
        case(f"Nmt {i}", {"type": "Nmt"}, text)
        case(f"ByteLevel {i}", {"type": "ByteLevel"}, text)
    bert_texts = ["", "Hello, World!", "H\u00e9llo\tw\u00f6rld\x00\ufffd\u200b", "\u4e00\u4e8cab\u4e09",
                  "\u0130\u00c5\u212b \U00020000x", "a\u0301\u0300\u0323", "\x1e\x7f\u0085\u2028 \r\n"]
    bert_texts += random_texts(rng, ALPHABET, 25, 20)
    for clean in (True, False):
        for chinese in (True, False):
            for strip in (None, True, False):
                for lower in (True, False):
                    config = {"type": "BertNormalizer", "clean_text": clean, "handle_chinese_chars": chinese,
                              "strip_accents": strip, "lowercase": lower}
                    for i, text in enumerate(bert_texts):
                        if i >= 7 and (not clean or not chinese):
                            continue
                        case(f"Bert {clean} {chinese} {strip} {lower} {i}", config, text)

    # --- Precompiled ---------------------------------------------------------------------------------------
    nmt = train_spm(False)
    define("nmt_nfkc", {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(
        nmt.normalizer_spec.precompiled_charsmap).decode()})
    precompiled_texts = [
        "", "abc", "ﬁ ™ ① ½ Ｆｕｌｌ ｶﾞｷﾞ", "™\x1eg", "\x1e\x1eab", "a\x1e", "\u00e9 e\u0301 \u1e9b\u0323",
        "\uac00 \u1100\u1161\u11a8", "\t\n\r\u3000\u00a0 \u200b\ufeff", "😀 👍🏽 👨‍👩‍👧 🇫🇷🇩🇪 #️⃣",
        "\u0915\u094d\u0937 \u0e01\u0e33", "\u2581x", "ｶﾞ\u3099", "x\ufb01\u0301", "\U0001d400\u0301",
    ] + CORPUS[:10]
    for i, text in enumerate(precompiled_texts + random_texts(rng, ALPHABET, 120, 24)):
        case(f"nmt_nfkc {i}", "nmt_nfkc", text)
    # Small charsmaps: removals (at the start, after an expansion), expansions, whole-cluster lookups by the
    # shortest key prefix, keys that are not whole characters, empty replacements.
    small = {b"a": "", b"b": "xyz", "\u00e9".encode(): "e", "e\u0301".encode(): "E", "\ufb01".encode(): "fi",
             "\u00a9".encode(): "(c)", "\u2122".encode(): "TM", b"\x1e": "", "x\u0301".encode(): "",
             "\u0915\u094d".encode(): "K", b"\xf0\x9f": "<emoji>", "\u3099".encode(): "\u309b",
             "\u1100".encode(): "L", "\u11a8\u11a8".encode(): "TT", b"\n": " ", "\u0600".encode(): "P"}
    define("small", {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(build_charsmap(small)).decode()})
    small_alphabet = ["a", "b", "c", "e", "x", "\u00e9", "\u0301", "\u0300", "\ufb01", "\u00a9", "\u200d",
                      "\u2122", "\x1e", "\u0915", "\u094d", "\U0001F600", "\U0001F3FD", "\u3099", "\u30ab",
                      "\u1100", "\u1161", "\u11a8", "\n", "\r", " ", "\U0001F1EB", "\U0001F1F7", "\u0600"]
    small_texts = ["a", "ab", "aab", "ba", "\u2122\x1eg", "\x1eab", "\u00e9\u0301", "x\u0301y", "\u00a9\u200d\u00a9",
                   "\u00a9\u200dx", "\u0915\u094d\u0915", "\U0001F600\u0301", "\u30ab\u3099", "\r\n",
                   "\u0600a", "\u0600b", "\u0600\r", "\u0600\u0600"]
    for i, text in enumerate(small_texts + random_texts(rng, small_alphabet, 150, 16)):
        case(f"small {i}", "small", text)

    # --- Sequences (as real tokenizer.json files have them) -------------------------------------------------
    sequences = {
        "albert": [{"type": "Replace", "pattern": {"String": "``"}, "content": "\""},
                   {"type": "Replace", "pattern": {"String": "''"}, "content": "\""}, {"type": "NFKD"},
                   {"type": "StripAccents"}, {"type": "Lowercase"}, "nmt_nfkc",
                   {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}],
        "llama": [{"type": "Prepend", "prepend": "\u2581"},
                  {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}],
        "t5": ["nmt_nfkc", {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}],
        "mixed": [{"type": "NFC"}, {"type": "Strip", "strip_left": True, "strip_right": True},
                  {"type": "Lowercase"}, {"type": "NFKD"}, {"type": "Prepend", "prepend": "_"}],
    }
    for name, steps in sequences.items():
        define(name, {"type": "Sequence", "normalizers": steps})
        for i, text in enumerate(["", "  ``Hello''   W\u00f6rld  ", "\u00c9t\u00e9 \ufb01 \u0130"] +
                                 random_texts(rng, ALPHABET, 20, 20)):
            case(f"{name} {i}", name, text)

    # --- Unigram -------------------------------------------------------------------------------------------
    unigram_texts = ["\u2581the\u2581quick\u2581brown\u2581fox", "\u2581Hugging\u2581Face's", "\u2581zzzqqq",
                     "\u2581\u00e9l\u00e8ves\u2581\u00e9tudient", "\u2581\u81ea\u7531\u8f6f\u4ef6", "\u2581😀👍🏽",
                     "\u2581\u00df\u00f6\u00e4", "\u2581\U00020000\U00020001x", "x", "\u2581", "\u2581\u2581\u2581",
                     "\u2581Der\u2581Fu\u00dfg\u00e4nger", "\u2581\ud55c\uad6d\uc5b4\u2581\ud14d\uc2a4\ud2b8"]
    for byte_fallback in (False, True):
        name = "spm_bytes" if byte_fallback else "spm"
        proto = train_spm(byte_fallback)
        model = unigram_json(proto)
        lines.append({"define": name, "model": model})
        m = models.Unigram([tuple(v) for v in model["vocab"]], model["unk_id"], byte_fallback)
        corpus_words = [("\u2581" + w) for w in " ".join(CORPUS[:10]).split()]
        random_words = ["\u2581" + "".join(rng.choice(ALPHABET[:40] + ["\u00e9", "\u4e00", "😀", "\u0915", "q"])
                                           for _ in range(rng.randint(1, 12))) for _ in range(60)]
        for i, text in enumerate(unigram_texts + corpus_words[:40] + random_words):
            tokens = m.tokenize(text)
            lines.append({"name": f"{name} {i}", "model": name, "text": text, "ids": [t.id for t in tokens],
                          "offsets": [o for t in tokens for o in t.offsets]})
    # A hand-made model: ties (the first path found wins), a repeated piece (its last id wins), a fused
    # unknown run that is itself a piece, negative and positive scores, and no unk_id (an error when needed).
    hand = [["<unk>", 0.0], ["a", -1.0], ["b", -1.0], ["ab", -2.0], ["abc", -3.0], ["c", -1.5], ["bc", -2.5],
            ["a", -0.5], ["\u00e9", -1.0], ["<0x41>", -5.0], ["<0xC3>", -5.0], ["<0xA9>", -5.0], ["xy", -20.0],
            ["\u00e9\u00e9", -1.5], ["d", 1.0], ["dd", 1.5]]
    for unk_id, byte_fallback, name in ((0, False, "hand"), (0, True, "hand_bytes"), (None, False, "hand_no_unk")):
        model = {"type": "Unigram", "unk_id": unk_id, "vocab": hand, "byte_fallback": byte_fallback}
        lines.append({"define": name, "model": model})
        m = models.Unigram([tuple(v) for v in hand], unk_id, byte_fallback)
        for i, text in enumerate(["a", "ab", "abc", "abcab", "\u00e9\u00e9\u00e9", "xy", "xyx", "zzA", "zA\u00e9",
                                  "ddd", "dddd", "qq\u00e9q", "A", "\u00e9z"]):
            try:
                tokens = m.tokenize(text)
                lines.append({"name": f"{name} {i}", "model": name, "text": text, "ids": [t.id for t in tokens],
                              "offsets": [o for t in tokens for o in t.offsets]})
            except Exception:
                lines.append({"name": f"{name} {i}", "model": name, "text": text, "error": True})

    path = os.path.join(out_dir, "cases.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    print(f"wrote {path}: {len(lines)} lines, {os.path.getsize(path)} bytes (tokenizers {tokenizers.__version__}, "
          f"sentencepiece {spm.__version__})")


if __name__ == "__main__":
    main()
