#!/usr/bin/env python3
"""make_qa_fixtures.py: extractive question answering's data, prepared and post-processed by Hugging Face's
examples/pytorch/question-answering (run_qa.py's prepare_train_features and prepare_validation_features,
utils_qa.py's postprocess_qa_predictions), for the exactness tests of data/qa_data.h (tests/test_qa_data.cpp).

Writes tests/fixtures/qa-data/:

  squad.json          a SQuAD v2.0-like file (nested: data / paragraphs / qas), 2-space indented;
  squad.jsonl         the same questions as the `datasets` library exports them (one object a line: id, title,
                      context, question, answers {"text": [...], "answer_start": [...]});
  features.json       for each tokenizer and setting, the features of run_qa's two functions on every question;
  postprocess.json    for several runs (features, logits, utils_qa's settings), postprocess_qa_predictions'
                      predictions, n-best lists and null odds;
  eval_predictions.json, eval_nbest_predictions.json, eval_null_odds.json
                      the files postprocess_qa_predictions writes for the run "wordpiece-64-v2" (prefix "eval").

The questions (make_examples): contexts of 200 to 3,000 characters made of the prose paragraphs of README.md and
docs/DESIGN.md, some with texts of tests/fixtures/tokenizers/corpus-subset.jsonl (accents, CJK, emoji, other
scripts) put between their sentences, one in NFD, one empty; 1 to 3 questions each, their answers taken from the
context at known character starts: single words, phrases, the context's first and last words, part of a word, an
answer with the space before it, the last token of a 64/16 window (run_qa's edge case: its start position goes
past the window's context), answers across a 64/16 window boundary, answers longer than a 64-token window (no
feature covers them), several answers, and unanswerable questions (is_impossible, no answers). Questions start
with white space Python's str.lstrip() removes (tab, U+3000, U+00A0, U+001C, U+0085) or keeps (U+200B).

run_qa.py's functions are nested in its main(): the script takes them from the file (--reference DIR, holding
run_qa.py and utils_qa.py of transformers' examples/pytorch/question-answering), compiles them alone and runs them
with the names main() gives them (tokenizer, pad_on_right, max_seq_length, data_args.doc_stride and
pad_to_max_length, the column names); utils_qa.py is imported. Neither file is part of the repository. The
examples and features go to them as `datasets` would (a batch: a dict of columns; features as rows, offsets as
lists or None), without the library.

features.json, per tokenizer (wordpiece-uncased: tokenizers/wordpiece-uncased through AutoTokenizer;
wordpiece-uncased-vocab: task-tokenizers/wordpiece-uncased-vocab/vocab.txt through BertTokenizer; roberta-bpe:
tokenizers/roberta-bpe through AutoTokenizer) its cls, bos and pad ids, and, to stay small, each window stored
as the pieces it is made of, which the script checks against the real features:
  "contexts": every distinct context's tokens (tokenizer(question, context) without truncation, the tokens of
      sequence 1): "ids", "offsets" (flat [start, end, ...]);
  "examples": per question, its "context" (index), "prefix" and "suffix" (the ids before and after the context's
      tokens in every window, the same in all), "prefix_types"/"suffix_types"/"context_type" (token type ids);
  "settings": {"<max_seq_length>-<doc_stride>-<padding>": {"features": [[example, first context token, context
      tokens, length, start_positions, end_positions], ...], "uncovered": [examples whose answer no feature
      labels]}}, length being the feature's tokens (max_seq_length when padded; padding is pad id, type 0,
      attention 0). A feature's input_ids are prefix + ids[first:first+count] + suffix (+ padding); its
      validation offsets are the context tokens' offsets, None elsewhere (run_qa's prepare_validation_features).
  A tokenizer whose features equal another's is stored as {"same_as": name}.

postprocess.json, per run: the tokenizer and setting of the features, utils_qa's settings, the logits' seed, and
the outputs: "predictions" [[id, text]], "null_odds" [[id, value]] (version 2), "nbest" [[id, [[text,
start_logit, end_logit, probability, fallback], ...]]] (fallback: utils_qa's "empty" entry). The logits
(logits()): for feature f, start (w = 0) and end (w = 1) logits are a permutation of 0..W-1 (Fisher-Yates over
splitmix64 seeded with seed * 1099511628211 + 2 f + w, modulo 2^64; j = r % (i + 1)), less W // 2, over 64: every
value a multiple of 1/64, exact in float32, each row's distinct; W the longest feature (max_seq_length when
padded), and -100 past a feature's own tokens as the Trainer pads predictions. Then, by the example's mode
((example index + salt) % 4: none, gold, cls, question), 8 is added to the start and end logits at the feature's
start and end positions (gold, where they are not both 0, the CLS index of every tokenizer here), at position 0
(cls), or at every token that is not of the context (question: so that few spans or none are left, utils_qa's
"empty" prediction). Scores tie often (sums of multiples of 1/64), which tests the stable sort.

    /tmp/tokvenv/bin/python tests/tools/make_qa_fixtures.py --reference /tmp/qa_ref [--out DIR]
"""
import argparse
import ast
import copy
import importlib.util
import json
import os
import random
import re
import sys
import tempfile
import types
import unicodedata
import warnings

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TQDM_DISABLE", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
DEFAULT_OUT = os.path.join(FIXTURES, "qa-data")

import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoTokenizer, BertTokenizer  # noqa: E402

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()

# name: how transformers loads it.
TOKENIZERS = {
    "wordpiece-uncased": lambda: AutoTokenizer.from_pretrained(
        os.path.join(FIXTURES, "tokenizers", "wordpiece-uncased")),
    "wordpiece-uncased-vocab": lambda: BertTokenizer.from_pretrained(
        os.path.join(FIXTURES, "task-tokenizers", "wordpiece-uncased-vocab"), do_lower_case=True),
    "roberta-bpe": lambda: AutoTokenizer.from_pretrained(os.path.join(FIXTURES, "tokenizers", "roberta-bpe")),
}
# (max_seq_length, doc_stride, pad_to_max_length): run_qa's defaults, then small windows with and without padding.
SETTINGS = [(384, 128, True), (64, 16, False), (64, 16, True)]
# The post-processing runs: (name, tokenizer, setting, version_2_with_negative, n_best_size, max_answer_length,
# null_score_diff_threshold, seed, salt).
RUNS = [
    ("wordpiece-384-v1", "wordpiece-uncased", "384-128-max_length", False, 20, 30, 0.0, 11, 0),
    ("wordpiece-64-v2", "wordpiece-uncased", "64-16-none", True, 20, 30, 0.0, 12, 1),
    ("wordpiece-64-padded-v1-short", "wordpiece-uncased", "64-16-max_length", False, 3, 2, 0.0, 13, 2),
    ("roberta-64-v2", "roberta-bpe", "64-16-none", True, 5, 8, 0.5, 14, 3),
    ("roberta-384-v2", "roberta-bpe", "384-128-max_length", True, 20, 30, -1.25, 15, 0),
]
FILES_RUN = "wordpiece-64-v2"
# Hand-made post-processing cases, each checked to show what it is for: (name, version_2_with_negative, n_best_size,
# max_answer_length, null_score_diff_threshold, [(id, context)], [(example, offsets, start logits, end logits)]).
N = None
ABC = [N, N, N, [0, 3], [4, 7], [8, 11], N]
HANDMADE = [
    # null score - best = the threshold exactly: not above it, the span wins.
    ("threshold-tie", True, 20, 30, -1.5, [("h1", "abc def ghi")],
     [(0, ABC, [1, -5, -6, 2, -1, -2, -7], [1, -5, -6, -3, 1.5, -2, -7])]),
    # null score - best = float32(0.85) - 0.75, the float32 nearest the threshold 0.1000000238 but above it as a
    # double: numpy compares in float32, where it is not above (the span wins).
    ("threshold-float32", True, 20, 30, 0.1000000238, [("h2", "abc def ghi")],
     [(0, ABC, [0.85, -5, -6, 0.5, -1, -2, -7], [0, -5, -6, -3, 0.25, -2, -7])]),
    # The only span is empty (a token of offsets (0, 0)): the "empty" entry is added before it.
    ("empty-span-v1", False, 1, 30, 0.0, [("h3", "abc def ghi")],
     [(0, [N, N, N, [0, 0], [4, 7], [8, 11], N], [-1, -9, -9, 3, 2, -8, -9], [-1, -9, -9, 3, 2, -8, -9])]),
    # A span of offsets (0, 0) among the best: the null entry is not added back; the best non-empty entry is second.
    ("zero-offsets-v2", True, 2, 30, 0.0, [("h4", "abc def ghi")],
     [(0, [N, N, N, [0, 0], [4, 7], [8, 11], N], [-1, -9, -9, 3, 2, -8, -9], [-1, -9, -9, 3, 2, -8, -9])]),
    # Two features of different lengths (logits -100 past the shorter): the null score is the second's; with
    # n_best_size 1 it is added back after the best span.
    ("two-features-v2", True, 1, 30, 0.0, [("h5", "abc def ghi jkl")],
     [(0, [N, N, [0, 3], [4, 7], N, N], [2, -9, 1, 0.5, -9, -100], [2, -9, 0.25, 1.5, -9, -100]),
      (0, [N, N, [4, 7], [8, 11], [12, 15], N], [1, -9, 0.75, 3, -1, -9], [0.5, -9, -1, 2, 0.125, -9])]),
    # A question without a feature (version 1): the "empty" entry alone.
    ("no-feature-v1", False, 20, 30, 0.0, [("h6", "abc def ghi"), ("h7", "xyz")],
     [(0, ABC, [1, -5, -6, 2, -1, -2, -7], [1, -5, -6, -3, 1.5, -2, -7])]),
]
MODES = ["none", "gold", "cls", "question"]
MASK64 = (1 << 64) - 1


def setting_name(max_len, stride, padded):
    return f"{max_len}-{stride}-{'max_length' if padded else 'none'}"


# ---- the reference functions -------------------------------------------------------------------------------------

def load_reference(directory):
    """run_qa.py's two feature functions (a binder) and utils_qa.postprocess_qa_predictions."""
    path = os.path.join(directory, "run_qa.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    wanted = ("prepare_train_features", "prepare_validation_features")
    found = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in wanted}
    if set(found) != set(wanted):
        sys.exit(f"{path}: no {', '.join(set(wanted) - set(found))}")
    code = compile(ast.Module(body=[found[n] for n in wanted], type_ignores=[]), path, "exec")

    def bind(tokenizer, max_seq_length, doc_stride, pad_to_max_length):
        names = {
            "tokenizer": tokenizer,
            "pad_on_right": tokenizer.padding_side == "right",
            "max_seq_length": min(max_seq_length, tokenizer.model_max_length),
            "data_args": types.SimpleNamespace(doc_stride=doc_stride, pad_to_max_length=pad_to_max_length),
            "question_column_name": "question",
            "context_column_name": "context",
            "answer_column_name": "answers",
        }
        exec(code, names)
        return names["prepare_train_features"], names["prepare_validation_features"]

    spec = importlib.util.spec_from_file_location("utils_qa", os.path.join(directory, "utils_qa.py"))
    utils_qa = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils_qa)
    return bind, utils_qa.postprocess_qa_predictions


class Rows:
    """A `datasets.Dataset` as utils_qa uses one: columns by name, rows by index and in iteration."""

    def __init__(self, rows):
        self.rows = rows

    def __getitem__(self, key):
        if isinstance(key, str):
            return [r[key] for r in self.rows]
        return self.rows[key]

    def __len__(self):
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)


# ---- the questions -----------------------------------------------------------------------------------------------

def paragraphs():
    out = []
    for name in ("README.md", os.path.join("docs", "DESIGN.md")):
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            text = f.read()
        for p in re.split(r"\n\s*\n", text):
            p = p.strip()
            if len(p) >= 200 and not p.startswith(("```", "|", "#", "<")):
                out.append(p)
    return out


def snippets():
    with open(os.path.join(FIXTURES, "tokenizers", "corpus-subset.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    kinds = ("pair", "translation", "cjk", "emoji", "accents", "combining", "fullwidth", "scripts", "case", "compat",
             "multilingual")
    out = []
    for r in rows:
        if r["kind"] in kinds:
            for t in (r["text"], r.get("text_pair")):
                if t and t.strip() and all(unicodedata.category(c)[0] != "C" or c in "\n" for c in t):
                    out.append(" ".join(t.split()))
    return out


LEADING = ["", "", "  ", "\t", "\u3000", "\u00a0 ", "\x1c", "\u0085 ", "\u200b", "\u00a0\u200b "]


def make_examples(window_tokenizer):
    """The questions: a list of {id, title, context, question, answers: {text, answer_start}}."""
    rng = random.Random(20261128)
    prose = paragraphs()
    extra = snippets()
    lengths = [200, 350, 600, 900, 1300, 1800, 2400, 3000]
    examples = []
    at = 0

    def make_context(i, length):
        nonlocal at
        parts, size = [], 0
        while size < length + 200:
            parts.append(prose[at % len(prose)])
            size += len(parts[-1]) + 2
            at += 1
        text = "\n\n".join(parts)
        if i % 3 == 1:  # other scripts between the sentences
            sentences = re.split(r"(?<=\.) ", text)
            mixed = []
            for k, s in enumerate(sentences):
                mixed.append(s)
                if k % 2 == 0:
                    mixed.append(extra[(i * 7 + k) % len(extra)])
            text = " ".join(mixed)
        if i % 8 == 5:
            text = unicodedata.normalize("NFD", text.replace("e ", "é ").replace("a ", "à "))
        cut = text[:length]
        # End at a word: the context's last word ends it (no punctuation after it for some).
        cut = cut[:len(cut) - len(cut.split()[-1])].rstrip() if not text[length:length + 1].isspace() else cut
        cut = cut.rstrip()
        if i % 4 == 2:
            cut = cut.rstrip(".,;:)`'\"*")
        return cut

    def words_of(text):
        return [(m.start(), m.group()) for m in re.finditer(r"[^\s.,;:()`'\"*]+", text)]

    def question_about(context, leading):
        # Words of 4 to 12 letters, ASCII but for every fifth question: questions stay short enough for a
        # 64-token window with a stride of 16 with every tokenizer.
        ws = [w for _, w in words_of(context)
              if 3 < len(w) <= 12 and (w.isascii() and w.isalpha() or len(examples) % 5 == 0 and len(w) <= 8)]
        picks = rng.sample(ws, min(2, len(ws))) if ws else ["nothing"]
        return leading + f"What does the text say about {' and '.join(picks)}?"

    def windows(question, context):
        enc = window_tokenizer(question.lstrip(), context, truncation="only_second", max_length=64, stride=16,
                               return_overflowing_tokens=True, return_offsets_mapping=True)
        out = []
        for i in range(len(enc["input_ids"])):
            seq = enc.sequence_ids(i)
            ctx = [o for o, s in zip(enc["offset_mapping"][i], seq) if s == 1]
            out.append(ctx)
        return out

    def full_tokens(question, context):
        enc = window_tokenizer(question.lstrip(), context, return_offsets_mapping=True)
        return [o for o, s in zip(enc["offset_mapping"], enc.sequence_ids()) if s == 1]

    kinds = ["word", "phrase", "window-last", "first", "straddle", "mid-word", "impossible", "non-ascii", "last",
             "long", "multi", "space-before", "phrase", "impossible", "window-last", "word"]
    kind_at = 0
    contexts = [make_context(i, lengths[i % len(lengths)]) for i in range(24)]
    contexts.append("")
    for ci, context in enumerate(contexts):
        title = ["README", "DESIGN", "Mixed"][ci % 3]
        count = 1 if not context else 1 + ci % 3
        for _ in range(count):
            kind = kinds[kind_at % len(kinds)] if context else "impossible"
            kind_at += 1
            leading = LEADING[len(examples) % len(LEADING)]
            question = question_about(context, leading)
            if len(examples) == 7:  # a long question: less room for the context in a 64-token window
                question = leading + "Considering everything it explains about memory and kernels, what does the " \
                                     "paragraph say about the engine?"
            answers = []
            ws = words_of(context)
            tokens = full_tokens(question, context) if context else []
            if kind == "word":
                s, w = rng.choice(ws)
                answers = [(s, w)]
            elif kind == "phrase":
                k = rng.randrange(len(ws) - 6)
                s = ws[k][0]
                e = ws[k + rng.randrange(2, 6)]
                answers = [(s, context[s:e[0] + len(e[1])])]
            elif kind == "first":
                answers = [(ws[0][0], ws[0][1])]
            elif kind == "last":
                answers = [(ws[-1][0], context[ws[-1][0]:])]
            elif kind == "mid-word":
                long_words = [(s, w) for s, w in ws if len(w) >= 8]
                s, w = rng.choice(long_words)
                answers = [(s + 2, w[2:6])]
            elif kind == "space-before":
                s, w = rng.choice([(s, w) for s, w in ws if s > 0 and context[s - 1] == " "])
                answers = [(s - 1, " " + w)]
            elif kind == "non-ascii":
                cands = [(s, w) for s, w in ws if any(ord(c) > 127 for c in w)]
                s, w = rng.choice(cands) if cands else rng.choice(ws)
                answers = [(s, w)]
            elif kind in ("window-last", "straddle"):
                wins = windows(question, context)
                if len(wins) < 2:
                    kind = "word"
                    s, w = rng.choice(ws)
                    answers = [(s, w)]
                else:
                    win = wins[rng.randrange(len(wins) - 1)]
                    if kind == "window-last":
                        a, b = win[-1]
                    else:
                        k = rng.randrange(1, 4)
                        a = win[-1 - k][0]
                        b = full_tokens(question, context)[tokens.index(tuple(win[-1])) + rng.randrange(1, 4)][1]
                    answers = [(a, context[a:b])]
            elif kind == "long":
                k = rng.randrange(max(1, len(tokens) - 60))
                a, b = tokens[k][0], tokens[min(len(tokens) - 1, k + 50)][1]
                answers = [(a, context[a:b])]
            elif kind == "multi":
                s, w = rng.choice(ws)
                others = [(s2, w2) for s2, w2 in ws if w2 == w and s2 != s]
                t, v = others[0] if others else rng.choice(ws)
                answers = [(s, w), (t, v), (s, w)]
            assert all(context[s:s + len(t)] == t and t for s, t in answers), (kind, answers)
            examples.append({
                "id": f"q{len(examples):03d}-{kind}",
                "title": title,
                "context": context,
                "question": question,
                "answers": {"text": [t for _, t in answers], "answer_start": [s for s, _ in answers]},
            })
    # One question of a long context whose answer is longer than a 384-token window: no feature covers it there.
    context = max(contexts, key=len)
    tokens = full_tokens("Which part is the longest answer?", context)
    a, b = tokens[40][0], tokens[min(len(tokens) - 1, 420)][1]
    examples.append({"id": f"q{len(examples):03d}-very-long", "title": "README", "context": context,
                     "question": "Which part is the longest answer?",
                     "answers": {"text": [context[a:b]], "answer_start": [a]}})
    return examples


def write_squad(examples, out):
    """squad.json (nested; the first article without is_impossible, as v1.1) and squad.jsonl (flat)."""
    articles = []
    for e in examples:
        if not articles or articles[-1]["title"] != e["title"] or len(articles[-1]["paragraphs"]) >= 3:
            articles.append({"title": e["title"], "paragraphs": []})
        paragraphs = articles[-1]["paragraphs"]
        if not paragraphs or paragraphs[-1]["context"] != e["context"]:
            paragraphs.append({"context": e["context"], "qas": []})
        qa = {"question": e["question"], "id": e["id"],
              "answers": [{"text": t, "answer_start": s}
                          for t, s in zip(e["answers"]["text"], e["answers"]["answer_start"])]}
        if len(articles) > 1:
            qa["is_impossible"] = not e["answers"]["text"]
        paragraphs[-1]["qas"].append(qa)
    with open(os.path.join(out, "squad.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps({"version": "v2.0", "data": articles}, ensure_ascii=False, indent=2) + "\n")
    with open(os.path.join(out, "squad.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for e in examples:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")


# ---- features ----------------------------------------------------------------------------------------------------

def batch_of(examples):
    return {k: [copy.deepcopy(e[k]) for e in examples] for k in ("id", "title", "context", "question", "answers")}


def run_features(bind, tok, examples, max_len, stride, padded):
    prepare_train, prepare_validation = bind(tok, max_len, stride, padded)
    train = prepare_train(batch_of(examples))
    validation = prepare_validation(batch_of(examples))
    assert train["input_ids"] == validation["input_ids"]
    ids = [e["id"] for e in examples]
    features = []
    for i in range(len(train["input_ids"])):
        features.append({
            "example": ids.index(validation["example_id"][i]),
            "example_id": validation["example_id"][i],
            "input_ids": train["input_ids"][i],
            "token_type_ids": train["token_type_ids"][i] if "token_type_ids" in train else None,
            "attention_mask": train["attention_mask"][i],
            "start": train["start_positions"][i],
            "end": train["end_positions"][i],
            "offsets": [None if o is None else list(o) for o in validation["offset_mapping"][i]],
        })
    return features


def cls_index(tok, ids):
    # What prepare_train_features takes for an unanswerable feature (checked against its labels below).
    if tok.cls_token_id in ids:
        return ids.index(tok.cls_token_id)
    if tok.bos_token_id in ids:
        return ids.index(tok.bos_token_id)
    return 0


def compact_tokenizer(tok, examples, all_features):
    """features.json's record of one tokenizer, checked to rebuild every feature."""
    contexts, context_index, records = [], {}, []
    for e in examples:
        enc = tok(e["question"].lstrip(), e["context"], return_offsets_mapping=True)
        seq = enc.sequence_ids()
        ids = [x for x, s in zip(enc["input_ids"], seq) if s == 1]
        offsets = [list(o) for o, s in zip(enc["offset_mapping"], seq) if s == 1]
        if e["context"] not in context_index:
            context_index[e["context"]] = len(contexts)
            contexts.append({"ids": ids, "offsets": [x for o in offsets for x in o]})
        c = context_index[e["context"]]
        assert contexts[c]["ids"] == ids
        records.append({"context": c})
    settings = {}
    for name, features in all_features.items():
        rows = []
        seen = {}
        for f in features:
            ex = f["example"]
            c = contexts[records[ex]["context"]]
            seq = [1 if o is not None else 0 for o in f["offsets"]]
            n = sum(f["attention_mask"])
            assert f["attention_mask"] == [1] * n + [0] * (len(f["input_ids"]) - n)
            assert all(x == tok.pad_token_id for x in f["input_ids"][n:])
            inside = [k for k, s in enumerate(seq) if s]
            first_ctx = inside[0] if inside else None
            count = len(inside)
            if inside:
                assert inside == list(range(first_ctx, first_ctx + count)), "context tokens not contiguous"
            prefix_end = first_ctx if inside else None
            # Where the window's context tokens sit in the context's.
            window_ids = f["input_ids"][first_ctx:first_ctx + count] if inside else []
            window_offsets = [x for o in f["offsets"][first_ctx:first_ctx + count] for x in o] if inside else []
            start_tok = 0
            if inside:
                candidates = [k for k in range(len(c["ids"]) - count + 1)
                              if c["ids"][k:k + count] == window_ids
                              and c["offsets"][2 * k:2 * (k + count)] == window_offsets]
                assert candidates, "a window that is not a slice of the context's tokens"
                start_tok = candidates[0]
            if prefix_end is None:  # no context tokens: the frame is the whole feature
                prefix_end = n
            prefix = f["input_ids"][:prefix_end]
            suffix = f["input_ids"][prefix_end + count:n]
            types_ = f["token_type_ids"] or [0] * len(f["input_ids"])
            frame = {"prefix": prefix, "suffix": suffix, "prefix_types": types_[:prefix_end],
                     "suffix_types": types_[prefix_end + count:n],
                     "context_type": types_[first_ctx] if inside else 0}
            assert all(t == frame["context_type"] for t in types_[prefix_end:prefix_end + count])
            assert all(t == 0 for t in types_[n:])
            for k, v in frame.items():
                if k in records[ex]:
                    assert records[ex][k] == v, (k, records[ex][k], v)
                else:
                    records[ex][k] = v
            # The validation offsets: the context tokens', None elsewhere (padding included).
            assert all((o is None) == (k < prefix_end or k >= prefix_end + count) for k, o in enumerate(f["offsets"]))
            rows.append([ex, start_tok, count, len(f["input_ids"]), f["start"], f["end"]])
            seen.setdefault(ex, []).append((f["start"], f["end"], cls_index(tok, f["input_ids"])))
        uncovered = [ex for ex, labels in sorted(seen.items())
                     if examples[ex]["answers"]["text"] and all((s, e) == (k, k) for s, e, k in labels)]
        for ex, labels in seen.items():
            if not examples[ex]["answers"]["text"]:
                assert all((s, e) == (k, k) for s, e, k in labels)
        settings[name] = {"features": rows, "uncovered": uncovered}
    return {"cls_token_id": tok.cls_token_id, "bos_token_id": tok.bos_token_id, "pad_token_id": tok.pad_token_id,
            "contexts": contexts, "examples": records, "settings": settings}


# ---- post-processing ---------------------------------------------------------------------------------------------

def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def base_row(seed, feature, which, width):
    state = (seed * 1099511628211 + 2 * feature + which) & MASK64
    perm = list(range(width))
    for i in range(width - 1, 0, -1):
        state, r = splitmix64(state)
        j = r % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return [(p - width // 2) / 64.0 for p in perm]


def logits(features, seed, salt, n_best):
    width = max(len(f["input_ids"]) for f in features)
    start = np.zeros((len(features), width), dtype=np.float32)
    end = np.zeros((len(features), width), dtype=np.float32)
    for fi, f in enumerate(features):
        s = np.array(base_row(seed, fi, 0, width), dtype=np.float32)
        e = np.array(base_row(seed, fi, 1, width), dtype=np.float32)
        n = len(f["input_ids"])
        mode = MODES[(f["example"] + salt) % 4]
        if mode == "gold" and (f["start"], f["end"]) != (0, 0):
            s[f["start"]] += 8
            e[f["end"]] += 8
        elif mode == "cls":
            s[0] += 8
            e[0] += 8
        elif mode == "question":
            for k in range(n):
                if f["offsets"][k] is None:
                    s[k] += 8
                    e[k] += 8
        s[n:] = -100
        e[n:] = -100
        for row in (s, e):  # ties among the n-best + 1 largest would make numpy's argsort order matter
            top = np.sort(row[row > -100])[::-1][:n_best + 1]
            assert len(set(top.tolist())) == len(top), "tied logits"
        start[fi] = s
        end[fi] = e
    return start, end


def postprocess(postprocess_qa_predictions, examples, features, run, directory=None):
    _, _, _, v2, n_best, max_answer, threshold, seed, salt = run
    start, end = logits(features, seed, salt, n_best)
    rows = [{"example_id": f["example_id"], "offset_mapping": f["offsets"]} for f in features]
    predictions = postprocess_qa_predictions(
        Rows([{"id": e["id"], "context": e["context"]} for e in examples]), Rows(rows), (start, end),
        version_2_with_negative=v2, n_best_size=n_best, max_answer_length=max_answer,
        null_score_diff_threshold=threshold, output_dir=directory, prefix="eval" if directory else None)
    with tempfile.TemporaryDirectory() as tmp:
        postprocess_qa_predictions(
            Rows([{"id": e["id"], "context": e["context"]} for e in examples]), Rows(rows), (start, end),
            version_2_with_negative=v2, n_best_size=n_best, max_answer_length=max_answer,
            null_score_diff_threshold=threshold, output_dir=tmp)
        with open(os.path.join(tmp, "nbest_predictions.json"), encoding="utf-8") as f:
            nbest = json.load(f)
        null_odds = {}
        if v2:
            with open(os.path.join(tmp, "null_odds.json"), encoding="utf-8") as f:
                null_odds = json.load(f)
    record = {"predictions": [[k, v] for k, v in predictions.items()]}
    if v2:
        record["null_odds"] = [[k, v] for k, v in null_odds.items()]
    record["nbest"] = [[k, [[p["text"], p["start_logit"], p["end_logit"], p["probability"],
                             list(p)[0] == "text"] for p in v]] for k, v in nbest.items()]
    stats = {
        "fallback": sum(1 for _, v in record["nbest"] if any(p[4] for p in v)),
        "null chosen": sum(1 for _, t in record["predictions"] if t == "") if v2 else 0,
        "threshold ties": sum(1 for _, d in record.get("null_odds", []) if np.float32(d) == np.float32(threshold)),
        "null added back": sum(1 for _, v in record["nbest"] if len(v) > n_best),
        "score ties": sum(1 for _, v in record["nbest"] for a, b in zip(v, v[1:])
                          if np.float32(a[1]) + np.float32(a[2]) == np.float32(b[1]) + np.float32(b[2])),
    }
    return record, stats


def handmade(postprocess_qa_predictions):
    out = []
    for name, v2, n_best, max_answer, threshold, examples, features in HANDMADE:
        rows = [{"example_id": examples[ex][0], "offset_mapping": offsets} for ex, offsets, _, _ in features]
        start = np.array([f[2] for f in features], dtype=np.float32)
        end = np.array([f[3] for f in features], dtype=np.float32)
        with tempfile.TemporaryDirectory() as tmp:
            predictions = postprocess_qa_predictions(
                Rows([{"id": i, "context": c} for i, c in examples]), Rows(rows), (start, end),
                version_2_with_negative=v2, n_best_size=n_best, max_answer_length=max_answer,
                null_score_diff_threshold=threshold, output_dir=tmp)
            with open(os.path.join(tmp, "nbest_predictions.json"), encoding="utf-8") as f:
                nbest = json.load(f)
            null_odds = {}
            if v2:
                with open(os.path.join(tmp, "null_odds.json"), encoding="utf-8") as f:
                    null_odds = json.load(f)
        record = {"name": name, "version_2_with_negative": v2, "n_best_size": n_best, "max_answer_length": max_answer,
                  "null_score_diff_threshold": threshold, "examples": [list(e) for e in examples],
                  "features": [{"example": ex, "offsets": o, "start": s, "end": e} for ex, o, s, e in features],
                  "predictions": [[k, v] for k, v in predictions.items()]}
        if v2:
            record["null_odds"] = [[k, v] for k, v in null_odds.items()]
        record["nbest"] = [[k, [[p["text"], p["start_logit"], p["end_logit"], p["probability"],
                                 list(p)[0] == "text"] for p in v]] for k, v in nbest.items()]
        out.append(record)
    by_name = {r["name"]: r for r in out}
    # Each case shows what it is for.
    assert by_name["threshold-tie"]["predictions"] == [["h1", "abc def"]]
    assert by_name["threshold-tie"]["null_odds"] == [["h1", -1.5]]
    diff = by_name["threshold-float32"]["null_odds"][0][1]
    assert diff > 0.1000000238 and np.float32(diff) == np.float32(0.1000000238)
    assert by_name["threshold-float32"]["predictions"] == [["h2", "abc def"]]
    assert by_name["empty-span-v1"]["predictions"] == [["h3", "empty"]]
    assert [p[0] for p in by_name["zero-offsets-v2"]["nbest"][0][1]] == ["", "abc def"]
    assert [p[0] for p in by_name["two-features-v2"]["nbest"][0][1]] == ["ghi", ""]
    assert by_name["no-feature-v1"]["predictions"][1] == ["h7", "empty"]
    return out


# ---- output ------------------------------------------------------------------------------------------------------

def dump(value, indent=0, depth=0):
    """JSON with the leaves' lists (a feature, a context's ids) on one line."""
    pad = " " * indent
    if isinstance(value, dict) and depth < 6:
        items = [f'{pad}  {json.dumps(k)}: {dump(v, indent + 2, depth + 1).lstrip()}' for k, v in value.items()]
        return pad + "{\n" + ",\n".join(items) + "\n" + pad + "}" if items else pad + "{}"
    if isinstance(value, list) and value and isinstance(value[0], (dict, list)) and depth < 6:
        items = [dump(v, indent + 2, depth + 1) for v in value]
        return pad + "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return pad + json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", required=True, help="directory with run_qa.py and utils_qa.py")
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    bind, postprocess_qa_predictions = load_reference(args.reference)
    toks = {name: load() for name, load in TOKENIZERS.items()}
    examples = make_examples(toks["wordpiece-uncased"])
    write_squad(examples, args.out)

    features_json = {"settings": [{"name": setting_name(*s), "max_seq_length": s[0], "doc_stride": s[1],
                                   "pad_to_max_length": s[2]} for s in SETTINGS], "tokenizers": {}}
    all_features = {}
    stored = {}
    for name, tok in toks.items():
        per = {setting_name(*s): run_features(bind, tok, examples, *s) for s in SETTINGS}
        all_features[name] = per
        same = next((other for other, f in stored.items() if f == per), None)
        if same:
            features_json["tokenizers"][name] = {"same_as": same}
        else:
            features_json["tokenizers"][name] = compact_tokenizer(tok, examples, per)
            stored[name] = per
        record = features_json["tokenizers"][same or name]
        summary = ", ".join(f"{k}: {len(v)} features, {len(record['settings'][k]['uncovered'])} uncovered"
                            for k, v in per.items())
        print(f"{name}{' (same as ' + same + ')' if same else ''}: {summary}")
    with open(os.path.join(args.out, "features.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(dump(features_json) + "\n")

    runs = []
    for run in RUNS:
        name, tok_name, setting, v2, n_best, max_answer, threshold, seed, salt = run
        directory = args.out if name == FILES_RUN else None
        record, stats = postprocess(postprocess_qa_predictions, examples, all_features[tok_name][setting], run,
                                    directory)
        if directory:  # its n-best lists are in eval_nbest_predictions.json
            del record["nbest"]
        runs.append({"name": name, "tokenizer": tok_name, "setting": setting, "version_2_with_negative": v2,
                     "n_best_size": n_best, "max_answer_length": max_answer, "null_score_diff_threshold": threshold,
                     "seed": seed, "salt": salt, **record})
        print(f"{name}: {stats}")
    with open(os.path.join(args.out, "postprocess.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(dump({"modes": MODES, "runs": runs, "handmade": handmade(postprocess_qa_predictions)}) + "\n")
    print(f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, numpy {np.__version__}, "
          f"{len(examples)} questions")


if __name__ == "__main__":
    main()
