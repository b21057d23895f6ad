#!/usr/bin/env python3
"""tokenizer_corpus.py: the texts that check_tokenizer_exactness.py encodes with Hugging Face's `tokenizers`
and with `anatomy tokenize --tokenizer`, and the training text of make_tokenizer_fixtures.py.

The corpus is made deterministically from files of this machine (Debian's /usr/share/common-licenses,
/usr/share/doc/*/copyright, the translations of /usr/share/locale/*/LC_MESSAGES/*.mo, Python's standard
library in /usr/lib/python3.*, C headers in /usr/include) and from generated cases (CJK, emoji with ZWJ
sequences, flags and keycaps, combining marks, Hangul jamo, Devanagari, control and format characters, odd
white space, words of more than 100 characters, digits, case, accented Latin, Turkish dotted I, sharp s,
ligatures, full-width forms, empty and white-space-only texts, the special tokens' strings in the text,
random code points of every plane, and pairs). Another machine has other files, so the corpus is always
written to a file first and both sides encode that same file:

    python3 tests/tools/tokenizer_corpus.py --output /tmp/tokenizer_corpus.jsonl [--stats]

One JSON object a line: {"kind": "...", "text": "...", "text_pair": "..."}; "text_pair" is present on the
pair records only (a few have it null: no pair). `anatomy tokenize` ignores "kind". Standard library only.
"""
import argparse
import glob
import json
import os
import random
import re
import struct
import sys
import unicodedata

SEED = "anatomy-tokenizer-corpus-1"

# The strings of the fixtures' special and added tokens (make_tokenizer_fixtures.py adds the ADDED_* ones to
# the added-tokens fixture): the corpus puts them into texts in every position.
SPECIAL_STRINGS = [
    "[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "<s>", "</s>", "<pad>", "<unk>", "<mask>", "<|endoftext|>",
    "<cls>", "<sep>", "<|begin_of_text|>", "<|end_of_text|>", "[unused1]", "▁", "</w>", "##",
]
ADDED_SPECIAL = ["<cls>", "<sep>", "<pad>", "<unk>", "<mask>", "[LSTRIP]", "[RSTRIP]", "<|im_start|>", "<|im_end|>"]
ADDED_NORMAL = ["hello world", "New York", "cat", "Straße", "ﬁle", "@@", "<ab>", "<abc>", "naïve", "😀🎉",
                "ing", "东京", "  padded  ", "[MASK]"]

MULTILINGUAL = [
    # Chinese, Japanese, Korean
    "自由软件基金会发布了通用公共许可证的第三版，允许用户自由地运行、学习、修改和分发软件。",
    "本程序是自由软件；您可以依照自由软件基金会发表的GNU通用公共许可证条款重新发布和修改它。",
    "我们在2026年11月27日测试了分词器：中文、English、数字123和标点符号！",
    "東京都の天気は晴れのち曇り、最高気温は１８度です。ソフトウェアの使用許諾契約書をお読みください。",
    "このプログラムはフリーソフトウェアです。ひらがなとカタカナと漢字が混ざった文章をトークン化します。",
    "ｶﾀｶﾅ（半角）とカタカナ（全角）、そして「括弧」や『二重括弧』も試します。",
    "이 프로그램은 자유 소프트웨어입니다. 한국어 텍스트를 토큰으로 나누는 시험을 합니다.",
    "대한민국의 수도는 서울이며, 한글은 세종대왕이 만들었습니다.",
    # Arabic, Persian, Hebrew (with and without vowel marks)
    "هذا البرنامج برنامج حر؛ يمكنك إعادة توزيعه و/أو تعديله وفقًا لشروط رخصة جنو العمومية.",
    "اللُّغَةُ العَرَبِيَّةُ جَمِيلَةٌ، والأرقام ١٢٣٤٥٦٧٨٩٠ تكتب من اليسار إلى اليمين.",
    "این برنامه یک نرم‌افزار آزاد است؛ نیم‌فاصله و اعداد ۱۲۳۴ را آزمایش می‌کنیم.",
    "זוהי תוכנה חופשית; שָׁלוֹם עוֹלָם, ועברית ללא ניקוד.",
    # Indic and South-East Asian
    "यह प्रोग्राम मुफ़्त सॉफ़्टवेयर है; आप इसे पुनर्वितरित और संशोधित कर सकते हैं।",
    "हिन्दी में संयुक्ताक्षर जैसे क्ष, त्र, ज्ञ और श्र, तथा अंक ०१२३४५६७८९ भी होते हैं।",
    "বাংলা ভাষায় লেখা একটি বাক্য, এবং তামিল: இது ஒரு இலவச மென்பொருள்.",
    "โปรแกรมนี้เป็นซอฟต์แวร์เสรี ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Tiếng Việt có nhiều dấu: Nguyễn, Trường, Đường, người, được, khuỷu.",
    "ພາສາລາວ, ភាសាខ្មែរ, မြန်မာဘာသာ, ᠮᠣᠩᠭᠣᠯ, བོད་ཡིག",
    # European
    "Dieses Programm ist freie Software: Sie können es unter den Bedingungen der GNU General Public License weitergeben. Straße, Größe, Maß, STRASSE, ẞ.",
    "Ce programme est un logiciel libre ; vous pouvez le redistribuer. Déjà vu, crème brûlée, naïve, cœur, Œuvre.",
    "Este programa es software libre: puede redistribuirlo. ¿Qué tal? ¡Muy bien! Niño, año, pingüino.",
    "İstanbul'da ılık bir gün; Iğdır, ŞİŞLİ, şişli, çiğköfte, ÖĞRENCİ, öğrenci.",
    "Łódź, Kraków, Gdańsk, źdźbło, żółć; Čeština: příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Ελληνικά: ΟΔΥΣΣΕΥΣ, Οδυσσεύς, σοφός, ΣΟΦΟΣ, ἄλφα, ῥῶ, ᾅδης.",
    "Русский язык: Съешь же ещё этих мягких французских булок, да выпей чаю. Ёлка, ЁЛКА.",
    "Українська: Чуєш їх, доцю, га? Кумедна ж ти, прощайся без ґольфів!",
    "Íslenska: Þetta er ókeypis hugbúnaður; ð, þ, æ, ö. Dansk: Ærø, Øresund, Århus.",
    # Other scripts
    "Հայերեն՝ Բարեւ աշխարհ, և Ջ. ქართული: გამარჯობა მსოფლიო. አማርኛ: ሰላም ለዓለም።",
    "ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ, ᐃᓄᒃᑎᑐᑦ, ꆈꌠꁱꂷ, ߒߞߏ, ܠܫܢܐ ܣܘܪܝܝܐ, ދިވެހި",
    # emoji and symbols
    "Emoji: 😀 😂 🥲 👍🏽 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 ❤️ 1️⃣ #️⃣ 🫠 ☺︎ ✌🏿",
    "Math: ∀x∈ℝ, x²≥0; ∑ᵢ aᵢ = ∫₀¹ f(x) dx ≈ 3.14159; α+β=γ, ½ + ¼ = ¾, ℌ𝔢𝔩𝔩𝔬 𝐁𝐨𝐥𝐝.",
    "Currency: $100, €99,99, £5, ¥1000, ₹500, ₩1,000, ₿0.001, ¢, ₽.",
    # combining marks
    "Combining: e\u0301 a\u0300 o\u0308 n\u0303 c\u0327 Z\u0335\u0327\u0301a\u0338\u0300l\u0336g\u0334o\u0337, "
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af (jamo) 한글",
]


# ---------------------------------------------------------------------------------------------- sources
def _read(path, limit=None):
    try:
        with open(path, "rb") as f:
            data = f.read() if limit is None else f.read(limit)
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


def _clean(text):
    # Texts go through JSON; lone surrogates cannot. U+FFFD stays (it is a real character to test).
    return "".join(c for c in text if not 0xD800 <= ord(c) <= 0xDFFF)


def license_files():
    seen, out = set(), []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        real = os.path.realpath(path)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        out.append(path)
    return out


def copyright_files():
    return sorted(p for p in glob.glob("/usr/share/doc/*/copyright") if os.path.isfile(p))


def python_files():
    dirs = sorted(glob.glob("/usr/lib/python3.[0-9]*"))
    return sorted(glob.glob(os.path.join(dirs[-1], "*.py"))) if dirs else []


def header_files():
    return sorted(glob.glob("/usr/include/*.h"))


def read_mo(path):
    """The translated strings (msgstr, plural forms split) of a gettext .mo file, or [] if unreadable."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return []
    if len(data) < 28:
        return []
    magic = struct.unpack("<I", data[:4])[0]
    order = "<" if magic == 0x950412DE else ">" if magic == 0xDE120495 else None
    if order is None:
        return []
    try:
        _, count, originals, translations = struct.unpack(order + "4I", data[4:20])
        charset, out = "utf-8", []
        for i in range(count):
            olen, ooff = struct.unpack(order + "2I", data[originals + 8 * i: originals + 8 * i + 8])
            tlen, toff = struct.unpack(order + "2I", data[translations + 8 * i: translations + 8 * i + 8])
            raw = data[toff: toff + tlen]
            if olen == 0:
                m = re.search(rb"charset=([A-Za-z0-9_-]+)", raw)
                if m:
                    charset = m.group(1).decode("ascii").lower()
                continue
            out.append(raw)
        if charset not in ("utf-8", "utf8"):
            return []
        texts = []
        for raw in out:
            for form in raw.split(b"\0"):
                try:
                    s = form.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                if s.strip():
                    texts.append(s)
        return texts
    except struct.error:
        return []


def translations_by_locale():
    """{locale: [strings]} for every directory of /usr/share/locale, in sorted order."""
    out = {}
    for locale_dir in sorted(glob.glob("/usr/share/locale/*/LC_MESSAGES")):
        locale = locale_dir.split("/")[-2]
        texts = []
        for mo in sorted(glob.glob(os.path.join(locale_dir, "*.mo"))):
            texts.extend(read_mo(mo))
        if texts:
            out[locale] = texts
    return out


def paragraphs(text):
    return [p.strip("\n") for p in re.split(r"\n\s*\n", text) if p.strip()]


# ------------------------------------------------------------------------------------------- generators
def _cp_range(rng, lo, hi, n):
    return "".join(chr(rng.randint(lo, hi)) for _ in range(n))


SCRIPT_RANGES = {
    "latin-ext": (0x0100, 0x024F), "ipa": (0x0250, 0x02AF), "greek": (0x0370, 0x03FF),
    "cyrillic": (0x0400, 0x04FF), "armenian": (0x0531, 0x0587), "hebrew": (0x05D0, 0x05EA),
    "arabic": (0x0620, 0x064A), "syriac": (0x0710, 0x072F), "thaana": (0x0780, 0x07A5),
    "devanagari": (0x0905, 0x0939), "bengali": (0x0985, 0x09B9), "gurmukhi": (0x0A05, 0x0A39),
    "tamil": (0x0B85, 0x0BB9), "telugu": (0x0C05, 0x0C39), "thai": (0x0E01, 0x0E30), "lao": (0x0E81, 0x0EB0),
    "tibetan": (0x0F40, 0x0F6C), "myanmar": (0x1000, 0x102A), "georgian": (0x10D0, 0x10FA),
    "hangul-jamo": (0x1100, 0x11FF), "ethiopic": (0x1200, 0x135A), "cherokee": (0x13A0, 0x13F5),
    "canadian": (0x1401, 0x166C), "khmer": (0x1780, 0x17B3), "mongolian": (0x1820, 0x1878),
    "hiragana": (0x3041, 0x3096), "katakana": (0x30A1, 0x30FA), "bopomofo": (0x3105, 0x312F),
    "cjk": (0x4E00, 0x9FFF), "cjk-ext-a": (0x3400, 0x4DBF), "yi": (0xA000, 0xA48C),
    "hangul": (0xAC00, 0xD7A3), "cjk-compat": (0xF900, 0xFAD9), "halfwidth": (0xFF61, 0xFF9F),
    "cjk-ext-b": (0x20000, 0x2A6DF), "math-alnum": (0x1D400, 0x1D7FF), "gothic": (0x10330, 0x1034A),
    "cuneiform": (0x12000, 0x12399), "egyptian": (0x13000, 0x1342E), "emoji": (0x1F300, 0x1FAFF),
    "private-use": (0xE000, 0xF8FF), "supp-pua": (0xF0000, 0xF00FF),
}

COMBINING = [(0x0300, 0x036F), (0x1AB0, 0x1ACE), (0x1DC0, 0x1DFF), (0x20D0, 0x20F0), (0xFE20, 0xFE2F)]

EMOJI = [
    "😀", "😂", "🥲", "🫠", "🤖", "👍", "👍🏻", "👍🏽", "👍🏿", "✌️", "✌🏿", "❤️", "❤", "♥️", "☺️", "☺︎",
    "👩‍💻", "🧑🏽‍💻", "👨‍👩‍👧‍👦", "👩‍❤️‍💋‍👨", "🏳️‍🌈", "🏳️‍⚧️", "🏴‍☠️", "🐻‍❄️", "😶‍🌫️", "❤️‍🔥",
    "🇫🇷", "🇯🇵", "🇺🇳", "🇪🇺", "🇺🇸", "🇩🇪", "🇮🇳", "🇨🇳", "🇦", "🇿", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "🏴󠁧󠁢󠁷󠁬󠁳󠁿",
    "1️⃣", "#️⃣", "*️⃣", "0⃣", "🔟", "©️", "®️", "™️", "↔️", "⬆️", "🅰️", "🆗", "🈶", "🀄", "🃏",
    "🙂\ufe0e", "\u200d", "👁️‍🗨️", "🧔‍♂️", "🤷🏼‍♀️", "🦸🏾", "🫶🏽", "🪿", "🫨", "🩷",
]

SPACES = ["\u00a0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003", "\u2004", "\u2005", "\u2006", "\u2007",
          "\u2008", "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff", "\u200b",
          "\u180e", "\u0085", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", " ", "  "]

CONTROLS = [chr(c) for c in range(0x00, 0x20)] + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0)] + [
    "\u00ad", "\u200c", "\u200d", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
    "\u2060", "\u2061", "\u2062", "\u2063", "\u2064", "\u2066", "\u2067", "\u2068", "\u2069", "\u206a",
    "\u206f", "\ufff9", "\ufffa", "\ufffb", "\ufffc", "\ufffd", "\U000e0001", "\U000e0020", "\U000e007f",
    "\u034f", "\u061c", "\u115f", "\u1160", "\u17b4", "\u180b", "\ufe00", "\ufe0f", "\U000e0100",
]

WORDS = ("the of and to in is that for it as with was on be by this are or software license copyright "
         "program free distribute modify terms conditions warranty merchantability fitness purpose source "
         "code binary form notice permission granted provided above following author contributors work "
         "derivative version foundation public general library lesser tokenizer encoding offsets pair "
         "unbelievable rerun undo preprocessing walking running internationalization").split()

WORD_SHAPES = ["lower", "Title", "UPPER", "camelCase", "snake_case", "kebab-case", "MiXeD", "dotted.name",
               "PascalCaseWord", "HTTPServerError", "iPhone", "McDonald's", "O'Neill", "x86_64", "utf-8",
               "e.g.", "i.e.", "U.S.A.", "Dr.", "can't", "won't", "DON'T", "it's", "we're", "I've", "you'll",
               "he'd", "'s", "'S", "'tis", "y'all", "rock'n'roll", "l'homme", "dell'arte"]

CASE_CASES = [
    "İstanbul", "İSTANBUL", "istanbul", "ıi İI", "Iı", "İ", "i\u0307", "I\u0307", "ǅemal", "ǄEMAL", "ǆemal",
    "Straße", "STRASSE", "straße", "ẞ", "ß", "ﬀ ﬁ ﬂ ﬃ ﬄ ﬅ ﬆ", "ﬁnance", "ﬂour", "ΟΔΟΣ", "Οδος", "ὈΔΥΣΣΕΎΣ",
    "ΣΑΣ", "σς", "ᾼ ᾳ ῼ", "ŉ", "ǰ", "ΐ", "և", "ﬓ", "Ꭰ ꭰ", "Ǳ ǲ ǳ", "Ǉ ǈ ǉ", "Å Å Å", "K K", "Ω Ω",
    "µ μ", "ſ", "ẛ", "ﬅ", "Ⅻ ⅻ", "Ⓐ ⓐ", "𐐀 𐐨", "ＡＢＣ ａｂｃ",
]

ACCENT_WORDS = ["café", "naïve", "résumé", "façade", "jalapeño", "Ångström", "Øresund", "Šibenik", "Ærø",
                "crème brûlée", "Zürich", "Łódź", "Dvořák", "São Paulo", "Nguyễn", "Đà Nẵng", "Ḥaḍramawt",
                "Āḷvār", "ǫ ǭ", "ŵ ŷ", "ĳ Ĳ", "Ŀl·l", "Ȁȁ", "ẞ", "Ő ő Ű ű", "Ỹ ỹ"]

PUNCT = [
    "Hello, world!", "What?!?", "...", "…", "--", "—", "–", "-", "(a) [b] {c} <d>", "«quoted»", "„German“",
    "‘single’ “double”", "'straight' \"double\"", "¿Qué? ¡Sí!", "、。「」『』【】〔〕", "‽ ⁂ ※ † ‡ • ‰ ′ ″ ‴",
    "https://example.org/path/to/file.html?query=1&b=2#frag", "mailto:john.doe+tag@example.co.uk",
    "/usr/share/common-licenses/GPL-3", "C:\\Windows\\System32\\drivers\\etc\\hosts", "~/.config/app.json",
    "<a href=\"x\">link</a>", "**bold** _it_ `code`", "# Heading\n- item\n- item", "{\"key\": [1, 2.5, null]}",
    "a=b&&c||d", "x->y; *p++; i += 1; a != b", "#!/bin/sh", "@user #hashtag", "$HOME %PATH% ${VAR}",
    "smile :-) :) ;-) :D <3 ¯\\_(ツ)_/¯", "!!!???", "''", '""', "'", '"', "`", "~", "^", "|", "\\", "@@", "##",
    "</w>", "▁", "Ġ", "Ċ", "ĠĠ",
]

DIGITS = ["0", "7", "42", "123", "1234", "12345", "123456789", "3.14159", "2.718281828459045", "1,000,000",
          "1.000.000,00", "1e10", "-273.15", "+1", "0x1F", "0b1010", "007", "2026-11-27", "12:34:56", "v1.2.3",
          "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "০১২৩৪৫৬৭৮৯", "๐๑๒๓๔๕๖๗๘๙", "０１２３４５６７８９",
          "¹²³⁴⁵", "₀₁₂₃", "½ ⅓ ¼ ⅞", "① ② ⑩ ⑳", "Ⅰ Ⅱ Ⅻ", "𝟎𝟏𝟐", "🄁", "〇一二三", "3rd", "21st", "100%",
          "$5.00", "€10", "1/2", "9999999999999999999999", "3.14.15.92", "1_000_000", "1'000'000"]

LONG_PIECES = ["a", "é", "e\u0301", "ab", "xyz", "Straße", "中", "日本", "한", "ا", "ह", "😀", "👍🏽", "1",
               "antidisestablishment", "ﬁ", "Ａ", "\u00a0"]


def gen_long_word(rng):
    piece = rng.choice(LONG_PIECES)
    target = rng.choice([98, 99, 100, 101, 102, 120, 150, 200, 256, 300, 500, 1000, 2000])
    word = ""
    while len(word) + len(piece) <= target:
        word += piece
    if rng.random() < 0.3:
        word += rng.choice(["é", "x", "9", "\u0301", "🎉"])
    around = rng.choice(["{}", "{} end", "start {}", "start {} end", "{} {}", "({})", "{}."])
    return around.replace("{}", word, 1).replace("{}", "short", 1)


def gen_words(rng, n):
    out = []
    for _ in range(n):
        w = rng.choice(WORDS)
        shape = rng.random()
        if shape < 0.15:
            w = w.upper()
        elif shape < 0.3:
            w = w.capitalize()
        out.append(w)
    return " ".join(out)


def gen_script_text(rng, names=None):
    names = names or sorted(SCRIPT_RANGES)
    parts = []
    for _ in range(rng.randint(1, 8)):
        lo, hi = SCRIPT_RANGES[rng.choice(names)]
        parts.append(_cp_range(rng, lo, hi, rng.randint(1, 12)))
    sep = rng.choice([" ", " ", "", ", ", "\u3000", "\u00a0"])
    return sep.join(parts)


def gen_combining(rng):
    kind = rng.randrange(6)
    if kind == 0:  # Latin bases with a stack of combining marks
        out = []
        for _ in range(rng.randint(1, 10)):
            base = rng.choice("aeiouAEIOUnNcCzZsSyYgq")
            marks = "".join(chr(rng.randint(*rng.choice(COMBINING))) for _ in range(rng.randint(0, 4)))
            out.append(base + marks)
        return rng.choice(["", " "]).join(out)
    if kind == 1:  # NFD of accented words
        w = rng.choice(ACCENT_WORDS)
        return unicodedata.normalize(rng.choice(["NFD", "NFC", "NFKD"]), w) + " " + gen_words(rng, 3)
    if kind == 2:  # conjoining Hangul jamo (L V [T]), mixed with syllables
        out = []
        for _ in range(rng.randint(1, 6)):
            s = chr(rng.randint(0x1100, 0x1112)) + chr(rng.randint(0x1161, 0x1175))
            if rng.random() < 0.6:
                s += chr(rng.randint(0x11A8, 0x11C2))
            if rng.random() < 0.3:
                s = chr(rng.randint(0xAC00, 0xD7A3))
            out.append(s)
        return rng.choice(["", " "]).join(out)
    if kind == 3:  # Devanagari consonant clusters with virama, nukta, vowel signs, candrabindu
        out = []
        for _ in range(rng.randint(1, 6)):
            s = chr(rng.randint(0x0915, 0x0939))
            if rng.random() < 0.3:
                s += "\u093c"
            if rng.random() < 0.4:
                s += "\u094d" + chr(rng.randint(0x0915, 0x0939))
            if rng.random() < 0.6:
                s += chr(rng.randint(0x093e, 0x094c))
            if rng.random() < 0.2:
                s += rng.choice(["\u0901", "\u0902", "\u0903"])
            out.append(s)
        return " ".join(out)
    if kind == 4:  # Arabic with harakat, Hebrew with points, Thai with tone marks
        a = "".join(chr(rng.randint(0x0628, 0x064A)) + chr(rng.randint(0x064B, 0x0652)) for _ in range(5))
        h = "".join(chr(rng.randint(0x05D0, 0x05EA)) + chr(rng.randint(0x05B0, 0x05BC)) for _ in range(4))
        t = "".join(chr(rng.randint(0x0E01, 0x0E2E)) + chr(rng.randint(0x0E48, 0x0E4B)) for _ in range(4))
        return " ".join(rng.sample([a, h, t], 3))
    # lone marks: at the start, after spaces, after punctuation
    m = chr(rng.randint(*rng.choice(COMBINING)))
    return rng.choice([m + "abc", "abc " + m, m, m + m + m, "." + m, "[CLS]" + m, m + " " + m, "\u0301"])


def gen_fuzz_unicode(rng):
    out = []
    for _ in range(rng.randint(1, 60)):
        r = rng.random()
        if r < 0.35:
            cp = rng.randint(0x20, 0x2FFF)
        elif r < 0.55:
            cp = rng.randint(0x3000, 0xFFFF)
        elif r < 0.75:
            cp = rng.randint(0x10000, 0x3FFFF)
        elif r < 0.8:
            cp = rng.randint(0xE0000, 0x10FFFF)
        else:
            out.append(rng.choice([" ", " ", " ", "a", "e", "1", ".", "\u00a0", "\t"]))
            continue
        if 0xD800 <= cp <= 0xDFFF:
            cp = 0xFFFD
        out.append(chr(cp))
    return "".join(out)


def gen_fuzz_ascii(rng):
    alphabet = [chr(c) for c in range(0x20, 0x7F)] + [" "] * 12 + ["\t", "\n"]
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 120)))


def gen_special(rng):
    tokens = SPECIAL_STRINGS + ADDED_SPECIAL + ADDED_NORMAL
    tok = rng.choice(tokens)
    variants = [
        "{t}", "{t}{t}", " {t} ", "  {t}  ", "a{t}b", "a {t} b", "hello {t} world", "{t} hello", "hello {t}",
        "hello{t}", "{t}hello", "hello  {t}  world", "{t} {t} {t}", "\t{t}\n", "\u3000{t}\u3000",
        "{lower}", "{upper}", "[{t}]", "<{t}>", "{t}.", "({t})", "{half}", "{t}{other}", "{other} {t} {other}",
        "The {t} token is {t}.", "{t}\u0301", "é{t}é", "中{t}文", "😀{t}😀", "{t}123", "123{t}",
    ]
    v = rng.choice(variants)
    return v.format(t=tok, lower=tok.lower(), upper=tok.upper(), half=tok[: max(1, len(tok) // 2)],
                    other=rng.choice(tokens))


def gen_whitespace(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        parts.append(rng.choice(SPACES) * rng.choice([1, 1, 1, 2, 3]))
        if rng.random() < 0.7:
            parts.append(rng.choice(WORDS + ["中文", "é", "[CLS]", "<mask>", "123", "😀"]))
    return "".join(parts)


def gen_control(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        if rng.random() < 0.5:
            parts.append(rng.choice(CONTROLS) * rng.choice([1, 1, 2]))
        else:
            parts.append(rng.choice(WORDS + ["中", "é", "😀", "[SEP]", " "]))
    return "".join(parts)


def gen_emoji(rng):
    parts = []
    for _ in range(rng.randint(1, 10)):
        r = rng.random()
        if r < 0.6:
            parts.append(rng.choice(EMOJI))
        elif r < 0.85:
            parts.append(rng.choice(WORDS))
        else:
            parts.append(rng.choice(["!", ".", "#", "中文", "123", "😀😀😀", "\u200d", "\ufe0f"]))
    return rng.choice([" ", "", " ", "\u200d"]).join(parts)


def gen_cjk(rng):
    r = rng.random()
    if r < 0.3:
        return rng.choice(MULTILINGUAL[:8])[: rng.randint(3, 60)]
    if r < 0.7:
        return gen_script_text(rng, ["cjk", "cjk", "hiragana", "katakana", "hangul", "halfwidth", "bopomofo",
                                     "cjk-ext-a", "cjk-ext-b", "cjk-compat"])
    words = []
    for _ in range(rng.randint(2, 10)):
        words.append(rng.choice([gen_script_text(rng, ["cjk"]), rng.choice(WORDS), "，", "。", "123", "ＡＢＣ",
                                 rng.choice(["東京", "北京", "서울", "ソフト", "ひらがな", "〇", "々", "〻"])]))
    return rng.choice(["", " "]).join(words)


def gen_shapes(rng):
    return " ".join(rng.choice(WORD_SHAPES + CASE_CASES) for _ in range(rng.randint(1, 8)))


def gen_fullwidth(rng):
    s = gen_words(rng, rng.randint(1, 6)) + rng.choice(["!", "?", "(1)", "[x]", " 123", "~"])
    full = "".join(chr(ord(c) + 0xFEE0) if 0x21 <= ord(c) <= 0x7E else ("\u3000" if c == " " else c) for c in s)
    return rng.choice([full, full + " " + s, "ｶﾀｶﾅ " + full, "㍿㌀㎏㎡㏄ " + full, full.upper()])


def gen_bytes_edge(rng):
    edges = ["\x7f", "\x80", "\u00ff", "\u0100", "\u07ff", "\u0800", "\u0fff", "\u1000", "\uffef", "\ufffd",
             "\ufffe", "\uffff", "\U00010000", "\U0001f600", "\U0010fffd", "\U0010ffff", "\U000e0041", "\U000f0000"]
    return "".join(rng.choice(edges + [" ", "a"]) for _ in range(rng.randint(1, 16)))


def gen_digits(rng):
    parts = [rng.choice(DIGITS) for _ in range(rng.randint(1, 6))]
    if rng.random() < 0.5:
        parts.insert(rng.randrange(len(parts) + 1), gen_words(rng, 2))
    return rng.choice([" ", "", ", ", "-"]).join(parts)


def gen_accents(rng):
    parts = [rng.choice(ACCENT_WORDS) for _ in range(rng.randint(1, 6))]
    text = " ".join(parts)
    return unicodedata.normalize(rng.choice(["NFC", "NFC", "NFD"]), text) if rng.random() < 0.5 else text


def gen_compat(rng):
    pool = ["ﬁ", "ﬂ", "ﬀ", "ﬃ", "①", "⑳", "Ⅻ", "¼", "½", "™", "℠", "℃", "℉", "ℌ", "ℍ", "𝔥𝔢𝔩𝔩𝔬", "𝐁𝐨𝐥𝐝",
            "𝓢𝓬𝓻𝓲𝓹𝓽", "Å", "Ω", "K", "㍿", "㌀", "㎏", "㏄", "ｶ", "ﾞ", "ｶﾞ", "ﾊﾟ", "ᵃ", "ⁿ", "₂", "x²", "…",
            "‥", "′″", "㈱", "㊙", "🄰", "🅐", "Ⓐ", "ǆ", "ĳ", "ŉ", "ſt", "ﬅ", "ﬆ", "ﹰ", "ﷺ", "ﷻ", "\u2474",
            "\u00a8", "\u00b4", "\u02dc", "\u0385", "\u1fed", "\ufb1d", "\ufb2a", "\ufb4f", "\u0344"]
    return rng.choice([" ", "", "-"]).join(rng.choice(pool) for _ in range(rng.randint(1, 8)))


def gen_mixed(rng, pools):
    kinds = sorted(pools)
    parts = []
    for _ in range(rng.randint(2, 4)):
        pool = pools[rng.choice(kinds)]
        if pool:
            t = rng.choice(pool)
            parts.append(t[: rng.randint(1, 80)])
    return rng.choice([" ", "", "\n", " | "]).join(parts)


# ---------------------------------------------------------------------------------------------- corpus
def _sample_lines(rng, texts, count, min_len=1, max_len=2000):
    lines = []
    for text in texts:
        for line in text.split("\n"):
            if min_len <= len(line.strip()) and len(line) <= max_len:
                lines.append(line)
    if len(lines) <= count:
        return lines
    return rng.sample(lines, count)


def file_records():
    """Records made of the machine's files: licences, copyright files, code, translations."""
    records = []

    def add(kind, texts):
        records.extend({"kind": kind, "text": _clean(t)} for t in texts)

    licenses = [_read(p) for p in license_files()]
    rng = random.Random(SEED + ":license")
    add("license-line", _sample_lines(rng, licenses, 900))
    paras = [p for text in licenses for p in paragraphs(text)]
    add("license-paragraph", rng.sample(paras, min(350, len(paras))))
    if licenses:  # one whole licence: a long text (the one nearest 10,000 characters)
        add("license-whole", [min(licenses, key=lambda t: abs(len(t) - 10_000))])

    rng = random.Random(SEED + ":copyright")
    copyrights = [_read(p, 200_000) for p in copyright_files()]
    add("copyright", _sample_lines(rng, copyrights, 1100))

    rng = random.Random(SEED + ":python")
    py = [_read(p, 300_000) for p in python_files()]
    add("code-python", _sample_lines(rng, py, 800))
    blocks = []
    for text in py:
        lines = text.split("\n")
        if len(lines) > 20:
            start = rng.randrange(len(lines) - 12)
            blocks.append("\n".join(lines[start: start + rng.randint(3, 12)]))
    add("code-block", rng.sample(blocks, min(120, len(blocks))))

    rng = random.Random(SEED + ":c")
    headers = [_read(p, 300_000) for p in header_files()]
    add("code-c", _sample_lines(rng, headers, 400))

    rng = random.Random(SEED + ":translation")
    by_locale = translations_by_locale()
    # Scripts beyond Latin get more lines: they are what the tokenizers split in unusual ways.
    heavy = {"zh_CN", "zh_TW", "zh_HK", "ja", "ko", "ar", "fa", "he", "hi", "bn", "ta", "te", "th", "ru", "uk",
             "el", "ka", "hy", "am", "km", "my", "si", "vi", "tr", "ur", "ml", "kn", "gu", "pa", "mr", "ne", "lo"}
    trans = []
    for locale in sorted(by_locale):
        texts = [t for t in by_locale[locale] if len(t) <= 3000]
        want = 60 if locale in heavy else 10
        trans.extend(rng.sample(texts, min(want, len(texts))))
    add("translation", trans)
    return records


GENERATED = [  # kind, count, generator
    ("cjk", 250, gen_cjk), ("emoji", 250, gen_emoji), ("combining", 250, gen_combining),
    ("control", 150, gen_control), ("whitespace", 200, gen_whitespace), ("long-word", 150, gen_long_word),
    ("digits", 150, gen_digits), ("case", 150, gen_shapes), ("accents", 150, gen_accents),
    ("fullwidth", 80, gen_fullwidth), ("compat", 120, gen_compat), ("special-tokens", 300, gen_special),
    ("scripts", 250, lambda rng: gen_script_text(rng)), ("fuzz-unicode", 300, gen_fuzz_unicode),
    ("fuzz-ascii", 200, gen_fuzz_ascii), ("bytes-edge", 60, gen_bytes_edge),
]

EMPTY_TEXTS = ["", " ", "  ", "\t", "\n", "\r\n", " \t \n ", "\u00a0", "\u3000", "\u2028", "\u2029", "\ufeff",
               "\u200b", "\u200b\u200b", "\x00", "\u200d", "\u00ad", "\u0085", "\x0b\x0c", "\u180e", "\u1680",
               "\u202f\u205f", "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a", "\ufe0f",
               "\u0301", "\U000e0001"]

FIXED = [  # hand-picked texts for every case the brief names, first in the file
    "Hello world!", "hello world", "HELLO WORLD", "Hello, [MASK] world.", "The quick brown fox jumps over the lazy dog.",
    "e\u0301", "\u00e9", "Ame\u0301lie", "Amélie", "ﬁ", "ﬁne", "İ", "i̇stanbul", "ß", "STRASSE", "ẞ",
    "ＦＵＬＬＷＩＤＴＨ　ＴＥＸＴ１２３", "a\u00a0b", "a\u2028b", "a\u3000b", "a\ufeffb", "a\u200bb", "\ufeffBOM at start",
    "tab\tseparated\tvalues", "line1\nline2\r\nline3\rline4", "x" * 101, "x" * 100, "x" * 99, "é" * 101,
    "a" * 1000, "[CLS]", "[SEP]", "<mask>", "</s>", "<s>", "<pad>", "<unk>", "<|endoftext|>", "[CLS] text [SEP]",
    "<s>text</s>", "text <mask> text", "text<mask>text", "text  <mask>  text", "👨‍👩‍👧‍👦", "🇫🇷🇩🇪",
    "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "1️⃣", "한국어", "\u1100\u1161\u11a8", "नमस्ते", "क्षत्रिय", "中文字符", "日本語テキスト",
    "مرحبا بالعالم", "שלום", "12345678901234567890", "3.14", "CamelCaseWord", "don't", "DON'T", " leading space",
    "trailing space ", "  both  ", "multiple   spaces   inside", "\x00\x01\x02", "\x7f\x80\x9f", "\ufffd",
    "\U0010ffff", "\U000f0000", "\ue000",
]

PAIR_EDGES = [("", ""), ("a", ""), ("", "b"), (" ", " "), ("text", "\u200b"), ("[CLS]", "[SEP]"),
              ("<s>", "</s>"), ("<mask>", " <mask> "), ("hello", "hello"), ("x" * 150, "y" * 150),
              ("中文", "日本語"), ("👍🏽", "🇫🇷"), ("e\u0301", "\u0301"), ("\t\n", "\u3000")]


def generate():
    """The corpus: a list of {"kind", "text"[, "text_pair"]} records, in a deterministic order."""
    records = [{"kind": "fixed", "text": t} for t in FIXED]
    records += [{"kind": "empty", "text": t} for t in EMPTY_TEXTS]
    records += [{"kind": "multilingual", "text": t} for t in MULTILINGUAL]
    for text in MULTILINGUAL:  # each sentence cut in pieces too (the middle of a word, of a cluster)
        rng = random.Random(SEED + ":multilingual:" + text[:10])
        for _ in range(3):
            a = rng.randrange(len(text))
            records.append({"kind": "multilingual", "text": text[a: a + rng.randint(1, 40)]})
    records += file_records()
    for kind, count, gen in GENERATED:
        rng = random.Random(SEED + ":" + kind)
        records += [{"kind": kind, "text": _clean(gen(rng))} for _ in range(count)]

    pools = {}  # the texts by kind, for the mixed texts and the pairs (the whole licence is too long to repeat)
    for r in records:
        if r["kind"] != "license-whole":
            pools.setdefault(r["kind"], []).append(r["text"])
    rng = random.Random(SEED + ":mixed")
    records += [{"kind": "mixed", "text": _clean(gen_mixed(rng, pools))} for _ in range(300)]

    # Pairs: the first text and the second from different kinds; short and long; edge cases.
    rng = random.Random(SEED + ":pairs")
    kinds = sorted(pools)
    pairs = [{"kind": "pair-edge", "text": a, "text_pair": b} for a, b in PAIR_EDGES]
    for _ in range(1600):
        a = rng.choice(pools[rng.choice(kinds)])
        b = rng.choice(pools[rng.choice(kinds)])
        if rng.random() < 0.5:
            a, b = a[:200], b[:200]
        pairs.append({"kind": "pair", "text": a, "text_pair": b})
    pairs += [{"kind": "pair-empty", "text": rng.choice(pools["fixed"]), "text_pair": rng.choice(EMPTY_TEXTS)}
              for _ in range(40)]
    pairs += [{"kind": "pair-null", "text": t, "text_pair": None} for t in ("null pair", "", "[SEP]")]
    records += pairs

    out, seen = [], set()
    for r in records:
        key = (r["text"], r.get("text_pair", "\0none"))
        if key in seen:
            continue
        seen.add(key)
        out.append(r)
    return out


def write_jsonl(records, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def read_jsonl(path):
    """Records of a JSON-lines corpus (split on '\\n' only: U+2028 and U+0085 are text, not line ends)."""
    with open(path, "r", encoding="utf-8", newline="\n") as f:
        data = f.read()
    return [json.loads(line) for line in data.split("\n") if line.strip(" \t\r")]


def training_texts():
    """Text to train the fixtures' vocabularies on: licences, part of the copyright files, Python code,
    translations and the multilingual samples above (repeated, so that their characters get pieces)."""
    texts = [_read(p) for p in license_files()]
    texts += [_read(p, 20_000) for p in copyright_files()[::3]]
    texts += [_read(p, 40_000) for p in python_files()[::6]]
    rng = random.Random(SEED + ":training")
    for locale, strings in sorted(translations_by_locale().items()):
        texts.extend(rng.sample(strings, min(150, len(strings))))
    texts += MULTILINGUAL * 20
    return [_clean(t) for t in texts if t.strip()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True, help="the JSON-lines file to write")
    parser.add_argument("--stats", action="store_true", help="print the lines and characters per kind")
    args = parser.parse_args()
    records = generate()
    write_jsonl(records, args.output)
    chars = sum(len(r["text"]) + len(r.get("text_pair") or "") for r in records)
    print(f"{args.output}: {len(records)} lines, {chars} characters, "
          f"{sum(1 for r in records if 'text_pair' in r)} with text_pair")
    if args.stats:
        kinds = {}
        for r in records:
            k = kinds.setdefault(r["kind"], [0, 0])
            k[0] += 1
            k[1] += len(r["text"]) + len(r.get("text_pair") or "")
        for kind, (n, c) in kinds.items():
            print(f"  {kind:20s} {n:6d} lines {c:9d} characters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
