#!/usr/bin/env python3
"""make_task_tokenizer_fixtures.py: what transformers' fast tokenizers give the task heads, for the exactness tests of
TextTokenizer::encode_words, encode_overflowing and sequence_ids (tests/test_task_tokenizers.cpp).

Writes tests/fixtures/task-tokenizers/:

  inputs.json          the inputs, shared by every tokenizer:
                         "words": 340 pre-split sentences (the texts and pairs of tokenizers/corpus-subset.jsonl
                           split on white space, then hand-written ones: punctuation, accents in NFC and NFD, CJK,
                           other scripts, emoji, special-token strings, words with a space inside, words that
                           normalize to nothing, long words);
                         "qa": question/context pairs: "long" (contexts of 300 to 3,000 characters made of the
                           corpus' texts, and an empty one), "short" (150 to 800 characters, an empty question, a
                           short context, and a question too long for 64 tokens), "tiny" (150 and 300);
                         "pairs": ordinary texts and pairs (the corpus' pairs and 12 single texts).
  <name>.json          one tokenizer's outputs (see CASES below), each encoding one line:
                         "words": tokenizer(words, is_split_into_words=True, truncation=True,
                           max_length=WORDS_MAX_LENGTH, padding=True, return_offsets_mapping=True), with word_ids()
                           and sequence_ids();
                         "qa": for each (max_length, stride, padding, inputs) of QA_SETTINGS, tokenizer(questions,
                           contexts, truncation="only_second", max_length, stride, return_overflowing_tokens=True,
                           return_offsets_mapping=True, padding) on the examples the library accepts, with
                           sequence_ids() and overflow_to_sample_mapping, and the error of each one it refuses;
                         "qa_errors": the library's errors for strides too large for max_length (checked when
                           truncation is set) and for the room the question leaves (Encoding::truncate's panic);
                         "pairs": tokenizer(texts, pairs, padding=True) without truncation and with
                           truncation=True, max_length=24, with sequence_ids() (no padding where there is no pad
                           token).
  <name>/vocab.txt     for the vocab.txt cases: the WordPiece fixture's vocabulary, a token a line, by id.

An encoding is stored up to its last attended token, with "length" the padded length: the script checks that the
padding is pad_id, type id 0, attention 0, offsets (0, 0) and word and sequence ids None before it leaves it out.
Offsets are flat [start, end, start, end, ...]; token_type_ids and sequence_ids are strings of digits, "-" for
None; word_ids a list, null for None.

The reference is transformers' tokenizer call (truncation, overflowing windows, padding, word_ids and
sequence_ids are its and the tokenizers library's). The tokenizer is AutoTokenizer.from_pretrained(dir) when the
pipeline it runs is the tokenizer.json's; where transformers 5 rebuilds a different one (XLMRobertaTokenizer and
DebertaV2Tokenizer make their normalizer and pre-tokenizer from the model class, not from the file), the
tokenizer.json is loaded as it is through PreTrainedTokenizerFast(tokenizer_file=...) with the same special
tokens, since anatomy runs the file; the script reports how many sentences AutoTokenizer would encode otherwise.
roberta-bpe-prefix is AutoTokenizer.from_pretrained(dir, add_prefix_space=True): RobertaTokenizer rebuilds its
ByteLevel pre-tokenizer and RobertaProcessing with add_prefix_space=True, which is the file with every ByteLevel
add_prefix_space set to true (checked here). The vocab.txt cases are BertTokenizer.from_pretrained(the directory
of vocab.txt, do_lower_case=...).

    /tmp/tokvenv/bin/python tests/tools/make_task_tokenizer_fixtures.py [--out DIR]
"""
import argparse
import json
import os
import sys
import unicodedata
import warnings

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("RUST_BACKTRACE", "0")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
TOKENIZERS = os.path.join(FIXTURES, "tokenizers")
DEFAULT_OUT = os.path.join(FIXTURES, "task-tokenizers")

import tokenizers  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoTokenizer, BertTokenizer, PreTrainedTokenizerFast  # noqa: E402

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()

WORDS_MAX_LENGTH = 24
# (max_length, stride, padding, which contexts): run_qa's 384/128 with padding to max_length, then small windows,
# the last padded to the longest window of the batch (padding=True).
QA_SETTINGS = [(384, 128, "max_length", "long"), (64, 16, "max_length", "short"), (40, 8, "longest", "tiny")]
PAIRS_MAX_LENGTH = 24

# name: (source, what, options). source: a directory of tokenizers/ (its tokenizer.json), or "vocab:<dir>" (the
# vocabulary of tokenizers/<dir>, as vocab.txt). words/qa/pairs: which sections to write.
CASES = {
    "wordpiece-uncased-vocab": ("vocab:wordpiece-uncased", {"lowercase": True}, ("words", "qa", "pairs")),
    "wordpiece-cased-vocab": ("vocab:wordpiece-cased", {"lowercase": False}, ("words", "qa")),
    "wordpiece-uncased": ("wordpiece-uncased", {}, ("words", "qa", "pairs")),
    "roberta-bpe-prefix": ("roberta-bpe", {"add_prefix_space": True}, ("words", "qa-short")),
    "roberta-bpe": ("roberta-bpe", {}, ("words", "qa", "pairs")),
    "xlmr-unigram": ("xlmr-unigram", {}, ("words", "qa", "pairs")),
    "debertav3-unigram": ("debertav3-unigram", {}, ("words", "qa", "pairs")),
    "modernbert-bpe": ("modernbert-bpe", {}, ("words", "qa", "pairs")),
    "wordpiece-cased": ("wordpiece-cased", {}, ("pairs",)),
    "char-bpe": ("char-bpe", {}, ("pairs",)),
    "gpt2-bpe": ("gpt2-bpe", {}, ("pairs",)),
    "llama3-bpe": ("llama3-bpe", {}, ("pairs",)),
    "sequence-unigram": ("sequence-unigram", {}, ("pairs",)),
    "added-tokens": ("added-tokens", {}, ("pairs",)),
}

HAND_WORDS = [
    ["Hello", ",", "world", "!"],
    ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."],
    ["(", "U.S.A.", ")", "--", "$", "3.50", "/", "lb", ";", "'s", "\"quoted\"", "...", "?!"],
    ["«", "Bonjour", "»", ",", "dit", "l'homme", "—", "c'est", "ça", "."],
    ["Café", "naïve", "Zürich", "ÉCOLE", "Ångström", "façade", "coöperate"],
    [unicodedata.normalize("NFD", w) for w in ["Café", "naïve", "Zürich", "ÉCOLE", "Ångström"]],
    ["İstanbul", "STRASSE", "Straße", "ẞ", "ǅemal", "ﬁne", "ΣΊΣΥΦΟΣ"],
    ["東京", "は", "日本の首都です", "。"],
    ["北京大学", "的", "学生", "，", "李明", "。"],
    ["서울", "특별시", "는", "대한민국", "의", "수도", "이다", "."],
    ["Москва", "—", "столица", "России", "."],
    ["القاهرة", "عاصمة", "مصر", "."],
    ["नई", "दिल्ली", "भारत", "की", "राजधानी", "है", "।"],
    ["กรุงเทพ", "มหานคร"],
    ["😀", "👍🏽", "🇫🇷", "👨‍👩‍👧", "1️⃣", "❤️", "great", "!!"],
    ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "text"],
    ["<s>", "</s>", "<mask>", "<pad>", "<unk>", "text"],
    ["a[MASK]b", "x<mask>y", "[SEP]end"],
    ["New York", "is", "big"],
    [" leading", "trailing ", " both ", "in  side"],
    ["tab\there", "new\nline"],
    ["\u0301", "accent", "\u200b", "zero", "\x00", "nul"],
    ["\u00ad", "soft", "\ufeff", "bom"],
    ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t", "u",
     "v", "w", "x", "y", "z", "1", "2", "3", "4", "5", "6", "7", "8", "9", "0"],
    ["x" * 99, "y" * 100, "z" * 101],
    ["supercalifragilisticexpialidocious", "antidisestablishmentarianism", "Donaudampfschifffahrtsgesellschaft"],
    ["def", "main", "(", "argv", ")", ":", "return", "0", "#", "comment"],
    ["x=1;y=2", "a->b", "i++", "&&", "||", "<=", ">=", "!="],
    ["1,234.56", "३४५", "٣٤٥", "１２３", "½", "²", "Ⅻ"],
    ["ＦＵＬＬＷＩＤＴＨ", "ｋａｎａ", "ｶﾀｶﾅ"],
    ["I", "'m", "gon", "na", "do", "n't", "it"],
    ["Ruby", "on", "Rails", "vs.", "Node.js", "and", "C++", "/", "C#"],
    ["e-mail", "john.doe@example.com", "https://example.org/a?b=c"],
    ["single"],
]

QUESTIONS = [
    "What does the licence permit?",
    "Who holds the copyright?",
    "Quelle est la licence du logiciel ?",
    "誰がこのプログラムを書いたのですか？",
    "Which [MASK] does <s> the </s> text mention?",
    "Is there any warranty, express or implied, for the program and its documentation as described?",
    "x",
]
# A question too long for 64 tokens with any of the tokenizers: the library refuses it (only_second).
LONG_QUESTION = " ".join(["What is the meaning of the following words of the licence and its many conditions"] * 5)


def corpus_rows():
    with open(os.path.join(TOKENIZERS, "corpus-subset.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f.read().split("\n") if line]


def make_inputs():
    rows = corpus_rows()
    words = []
    for row in rows:
        for text in (row["text"], row.get("text_pair")):
            if text and text.split():
                words.append(text.split())
    words.extend(HAND_WORDS)

    # Contexts: the corpus' non-empty texts in order, joined by a space until each reaches its length.
    texts = [r["text"] for r in rows if r["text"].strip() and r["kind"] not in ("long-word", "fuzz-unicode")]
    texts += [r["text_pair"] for r in rows if r.get("text_pair") and r["text_pair"].strip()]
    at = 0

    def context(length):
        nonlocal at
        parts, size = [], 0
        while size < length:
            parts.append(texts[at % len(texts)])
            size += len(parts[-1]) + 1
            at += 1
        return " ".join(parts)

    qa = {"long": [], "short": [], "tiny": []}
    for i, length in enumerate([300, 1200, 3000]):
        qa["long"].append({"question": QUESTIONS[i % len(QUESTIONS)], "context": context(length)})
    qa["long"].append({"question": QUESTIONS[0], "context": ""})
    for i, length in enumerate([150, 400, 800]):
        qa["short"].append({"question": QUESTIONS[(i + 3) % len(QUESTIONS)], "context": context(length)})
    qa["short"].append({"question": "", "context": context(300)})
    qa["short"].append({"question": QUESTIONS[1], "context": "Short context."})
    qa["short"].append({"question": LONG_QUESTION, "context": context(400)})
    for i, length in enumerate([150, 300]):
        qa["tiny"].append({"question": QUESTIONS[(i + 5) % len(QUESTIONS)], "context": context(length)})

    pairs = [{"text": r["text"], "text_pair": r.get("text_pair")} for r in rows if "text_pair" in r]
    pairs += [{"text": r["text"], "text_pair": None} for r in rows[:12]]
    return {"words": words, "qa": qa, "pairs": pairs}


def pipeline(tokenizer_json):
    document = json.loads(tokenizer_json) if isinstance(tokenizer_json, str) else tokenizer_json
    return {k: document.get(k) for k in ("normalizer", "pre_tokenizer", "post_processor", "model")}


def with_prefix_space(value):
    """The pipeline part `value` with every ByteLevel add_prefix_space true."""
    if isinstance(value, dict):
        value = {k: with_prefix_space(v) for k, v in value.items()}
        if value.get("type") in ("ByteLevel", "RobertaProcessing"):
            value["add_prefix_space"] = True
        return value
    if isinstance(value, list):
        return [with_prefix_space(v) for v in value]
    return value


def write_vocab(source_dir, out_dir):
    with open(os.path.join(TOKENIZERS, source_dir, "tokenizer.json"), encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "vocab.txt")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for token, _ in sorted(vocab.items(), key=lambda item: item[1]):
            f.write(token + "\n")
    return path


def load_reference(name, source, options, inputs, out_dir):
    """The transformers tokenizer of one case, and a note on how it was made."""
    if source.startswith("vocab:"):
        vocab_dir = os.path.join(out_dir, name)
        path = write_vocab(source[len("vocab:"):], vocab_dir)
        tok = BertTokenizer.from_pretrained(os.path.dirname(path), do_lower_case=options["lowercase"])
        return tok, f"BertTokenizer.from_pretrained(dir with vocab.txt, do_lower_case={options['lowercase']})"
    directory = os.path.join(TOKENIZERS, source)
    file = os.path.join(directory, "tokenizer.json")
    with open(file, encoding="utf-8") as f:
        document = json.load(f)
    kwargs = {"add_prefix_space": True} if options.get("add_prefix_space") else {}
    auto = AutoTokenizer.from_pretrained(directory, **kwargs)
    want = pipeline(document)
    if options.get("add_prefix_space"):
        want = {k: with_prefix_space(v) for k, v in want.items()}
    got = pipeline(auto.backend_tokenizer.to_str())
    if all(json.dumps(got[k], sort_keys=True) == json.dumps(want[k], sort_keys=True)
           for k in ("normalizer", "pre_tokenizer", "post_processor")):
        args = ", add_prefix_space=True" if kwargs else ""
        return auto, f"AutoTokenizer.from_pretrained(dir{args}) ({type(auto).__name__})"
    if kwargs:
        sys.exit(f"{name}: {type(auto).__name__}(add_prefix_space=True) is not the file with add_prefix_space true")
    special = {k: str(v) for k, v in auto.special_tokens_map.items() if isinstance(v, str)}
    tok = PreTrainedTokenizerFast(tokenizer_file=file, **special)
    differ = sum(auto(w, is_split_into_words=True)["input_ids"] != tok(w, is_split_into_words=True)["input_ids"]
                 for w in inputs["words"])
    note = (f"PreTrainedTokenizerFast(tokenizer_file=tokenizer.json) with {type(auto).__name__}'s special tokens: "
            f"AutoTokenizer's {type(auto).__name__} rebuilds its pipeline ({differ} of {len(inputs['words'])} "
            f"pre-split sentences encode otherwise)")
    print(f"  {name}: {note}")
    return tok, note


def flat(offsets):
    return [x for pair in offsets for x in pair]


def compact(batch, i, pad_id, words=False):
    """Encoding i of `batch` up to its last attended token, its padding checked."""
    ids = batch["input_ids"][i]
    mask = batch["attention_mask"][i]
    n = sum(mask)
    assert mask == [1] * n + [0] * (len(ids) - n), "padding on the left"
    sequence = batch.sequence_ids(i)
    word = batch.word_ids(i)
    tail = slice(n, len(ids))
    assert all(x == pad_id for x in ids[tail]) and all(x == 0 for x in batch["token_type_ids"][i][tail])
    assert all(tuple(o) == (0, 0) for o in batch["offset_mapping"][i][tail]) if "offset_mapping" in batch else True
    assert all(x is None for x in word[tail]) and all(x is None for x in sequence[tail]), (word, sequence)
    record = {"input_ids": ids[:n], "token_type_ids": "".join(str(x) for x in batch["token_type_ids"][i][:n])}
    if "offset_mapping" in batch:
        record["offsets"] = flat(batch["offset_mapping"][i][:n])
    if words:
        record["word_ids"] = word[:n]
    record["sequence_ids"] = "".join("-" if x is None else str(x) for x in sequence[:n])
    record["length"] = len(ids)
    return record


def call(tok, *args, **kwargs):
    return tok(*args, return_token_type_ids=True, return_attention_mask=True, **kwargs)


def words_section(tok, inputs):
    batch = call(tok, inputs["words"], is_split_into_words=True, truncation=True, max_length=WORDS_MAX_LENGTH,
                 padding=True, return_offsets_mapping=True)
    encodings = [compact(batch, i, tok.pad_token_id, words=True) for i in range(len(inputs["words"]))]
    truncated = sum(1 for e in encodings if e["length"] == WORDS_MAX_LENGTH and len(e["input_ids"]) == WORDS_MAX_LENGTH)
    return {"max_length": WORDS_MAX_LENGTH, "padding": "longest", "encodings": encodings}, truncated


def qa_section(tok, inputs, only=None):
    out = []
    features = 0
    for max_length, stride, padding, which in QA_SETTINGS:
        if only and which != only:
            continue
        kwargs = {"truncation": "only_second", "max_length": max_length, "stride": stride,
                  "return_overflowing_tokens": True, "return_offsets_mapping": True, "padding": padding}
        # Each example alone: the library refuses some (the question leaves too little room). The others go in
        # one batch, which gives the same windows as each alone (padding aside), but for an empty context:
        # transformers takes tokenizer(question, "") for one text, not a pair.
        accepted, alone, errors = [], [], []
        for index, e in enumerate(inputs["qa"][which]):
            try:
                one = call(tok, e["question"], e["context"], **kwargs)
            except BaseException as error:  # tokenizers' errors are plain Exceptions, its panics PanicExceptions
                if type(error).__name__ not in ("Exception", "PanicException"):
                    raise
                errors.append({"example": index, "error": str(error)})
                continue
            accepted.append(index)
            unpadded = [ids[:sum(mask)] for ids, mask in zip(one["input_ids"], one["attention_mask"])]
            alone.extend(unpadded if e["context"] else [None] * len(unpadded))
        examples = [inputs["qa"][which][i] for i in accepted]
        batch = call(tok, [e["question"] for e in examples], [e["context"] for e in examples], **kwargs)
        assert all(a is None or a == b[:len(a)] for a, b in zip(alone, batch["input_ids"], strict=True))
        encodings = [compact(batch, i, tok.pad_token_id) for i in range(len(batch["input_ids"]))]
        features += len(encodings)
        out.append({"max_length": max_length, "stride": stride, "padding": padding, "contexts": which,
                    "examples": accepted, "errors": errors,
                    "overflow_to_sample_mapping": batch["overflow_to_sample_mapping"], "features": encodings})
    return out, features


def qa_probes(tok, inputs):
    """The library's errors for a stride too large: above max_length less one text's special tokens (checked
    when truncation is set), and not below the room the question leaves (Encoding::truncate's assertion)."""
    example = inputs["qa"]["long"][2]
    single = tok.backend_tokenizer.num_special_tokens_to_add(False)
    probes = []
    for max_length, stride in ((32, 32 - single + 1), (32, 32 - single), (384, 384)):
        try:
            call(tok, example["question"], example["context"], truncation="only_second", max_length=max_length,
                 stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True)
            sys.exit(f"stride {stride} at max_length {max_length} was accepted")
        except BaseException as error:
            if type(error).__name__ not in ("Exception", "PanicException", "ValueError"):
                raise
            probes.append({"contexts": "long", "example": 2, "max_length": max_length, "stride": stride,
                           "error": str(error).strip()})
    return probes


def pairs_section(tok, inputs):
    texts = [p["text"] for p in inputs["pairs"]]
    pairs = [p["text_pair"] for p in inputs["pairs"]]
    out = []
    has_pad = tok.pad_token_id is not None
    for truncate in (False, True):
        kwargs = {"truncation": True, "max_length": PAIRS_MAX_LENGTH} if truncate else {}
        # transformers takes a batch of pairs as [(text, pair)], or of texts as [text]: a mixed batch goes in two.
        if has_pad:
            kwargs["padding"] = True
        single = [i for i, p in enumerate(pairs) if p is None]
        double = [i for i, p in enumerate(pairs) if p is not None]
        by_index = {}
        for indexes, batch_inputs in ((single, [texts[i] for i in single]),
                                      (double, [(texts[i], pairs[i]) for i in double])):
            batch = call(tok, batch_inputs, **kwargs)
            if not has_pad:
                batch["attention_mask"] = [[1] * len(ids) for ids in batch["input_ids"]]
            for j, i in enumerate(indexes):
                by_index[i] = compact(batch, j, tok.pad_token_id if has_pad else -1)
        encodings = [by_index[i] for i in range(len(texts))]
        out.append({"max_length": PAIRS_MAX_LENGTH if truncate else 0,
                    "padding": "longest of each batch (texts alone, pairs)" if has_pad else "none",
                    "encodings": encodings})
    return out


def dump(value, indent=0):
    """JSON with one encoding (any object holding "input_ids") a line."""
    pad = " " * indent
    if isinstance(value, dict) and "input_ids" not in value:
        items = [f'{pad}  {json.dumps(k)}: {dump(v, indent + 2).lstrip()}' for k, v in value.items()]
        return pad + "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and value and isinstance(value[0], (dict, list)):
        items = [dump(v, indent + 2) for v in value]
        return pad + "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return pad + json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def write_json(path, value):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(dump(value) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    inputs = make_inputs()
    write_json(os.path.join(args.out, "inputs.json"), inputs)
    for name, (source, options, sections) in CASES.items():
        tok, note = load_reference(name, source, options, inputs, args.out)
        record = {"tokenizer": source, "reference": note, "pad_id": tok.pad_token_id}
        if options:
            record["options"] = options
        summary = []
        if "words" in sections:
            record["words"], truncated = words_section(tok, inputs)
            summary.append(f"{len(inputs['words'])} pre-split ({truncated} truncated)")
        if "qa" in sections or "qa-short" in sections:
            record["qa"], features = qa_section(tok, inputs, None if "qa" in sections else "short")
            record["qa_errors"] = qa_probes(tok, inputs)
            summary.append(f"{features} QA features")
        if "pairs" in sections:
            record["pairs"] = pairs_section(tok, inputs)
            summary.append(f"{len(inputs['pairs'])} texts and pairs")
        write_json(os.path.join(args.out, name + ".json"), record)
        print(f"{name}: {', '.join(summary)}")
    print(f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}")


if __name__ == "__main__":
    main()
