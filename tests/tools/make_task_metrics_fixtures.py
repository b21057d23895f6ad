#!/usr/bin/env python3
"""make_task_metrics_fixtures.py: writes tests/fixtures/task-metrics/{seqeval,squad}.json, the reference numbers of
src/anatomy/train/seqeval.h and src/anatomy/train/squad_metrics.h (tests/test_task_metrics.cpp).

seqeval.json: what Hugging Face's run_ner.py reports through evaluate.load("seqeval") (evaluate's
metrics/seqeval/seqeval.py: seqeval's classification_report(output_dict=True) with its defaults, mode=None,
scheme=None, suffix=False, zero_division="warn", the "micro avg" row as overall_precision/recall/f1, and
accuracy_score as overall_accuracy), for hand-written corpora (I- after O, a type change inside a chunk, E-/S-
tags, bare "B"/"I", tags without a prefix, all-O, predictions without entities, several types) and random
corpora (gold IOB2/IOB1 tagging over PER, LOC, MISC, ORG with corrupted predictions; corpora of odd tags). The
overall numbers are also checked here against seqeval's precision_score, recall_score and f1_score.
Single-sentence cases record get_entities.

squad.json: the official SQuAD evaluation scripts, evaluate-v1.1.py and evaluate-v2.0.py, which this script
runs (never copies) from the paths given: normalize_answer, exact and F1 of (gold, prediction) pairs (v1.1's
exact_match_score and f1_score, v2.0's compute_exact and compute_f1, imported from the scripts), and whole
evaluations run as the scripts' command lines (data.json, pred.json, v2.0's --na-prob-file and
--na-prob-thresh), including the inputs on which a script fails (recorded as "error"). Python's str.lower()
(the code points it changes) and its unassigned code points (category Cn) are recorded too, so the test can
check the tables the C++ lowercases with.

--tables prints the code point table that squad_metrics.cpp embeds: the characters that Python's re module
counts as \\w, and the Case_Ignorable and Cased properties that str.lower() uses for the final sigma (probed
through str.lower() itself, as CPython applies them).

Run it with a Python that has seqeval (which brings numpy) installed, e.g.

    python3.13 -m venv /tmp/metricsvenv && /tmp/metricsvenv/bin/pip install seqeval
    /tmp/metricsvenv/bin/python tests/tools/make_task_metrics_fixtures.py \\
        --squad-v1 /path/to/evaluate-v1.1.py --squad-v2 /path/to/evaluate-v2.0.py [--out tests/fixtures/task-metrics]
    /tmp/metricsvenv/bin/python tests/tools/make_task_metrics_fixtures.py --tables
"""
import argparse
import hashlib
import importlib.util
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import unicodedata
import warnings

SIGMA, SMALL_SIGMA, FINAL_SIGMA = "\u03a3", "\u03c3", "\u03c2"


# ---------------------------------------------------------------- the code point table

def code_point_flags(cp):
    """Bit 0: re's \\w; bit 1: Case_Ignorable; bit 2: Cased and not Case_Ignorable (as str.lower() sees them)."""
    if 0xD800 <= cp < 0xE000:
        return 0
    c = chr(cp)
    word = re.match(r"\w", c) is not None
    # Final sigma: a cased letter, case-ignorable ones, the sigma, and no case-ignorable ones then a cased letter.
    # '1' + c + Σ is final exactly when c is cased and not case-ignorable; 'AΣ' + c + 'B' exactly when c is
    # neither (else B, cased, follows).
    cased_not_ignorable = ("1" + c + SIGMA).lower()[-1] == FINAL_SIGMA
    neither = ("A" + SIGMA + c + "B").lower()[1] == FINAL_SIGMA
    ignorable = not (cased_not_ignorable or neither)
    return (1 if word else 0) | (2 if ignorable else 0) | (4 if cased_not_ignorable else 0)


def print_tables():
    runs = []
    previous = 0
    for cp in range(0x110000):
        flags = code_point_flags(cp)
        if flags and runs and previous == flags and runs[-1][1] == cp - 1:
            runs[-1][1] = cp
        elif flags:
            runs.append([cp, cp, flags])
        previous = flags
    print(f"// {len(runs)} ranges: Python {sys.version.split()[0]}, Unicode {unicodedata.unidata_version}")
    line = "   "
    for first, last, flags in runs:
        item = f" {{0x{first:X}, 0x{last:X}, {flags}}},"
        if len(line) + len(item) > 120:
            print(line)
            line = "   "
        line += item
    print(line)


# ---------------------------------------------------------------- seqeval

def seqeval_reference(truth, predicted):
    from seqeval.metrics import accuracy_score, classification_report, f1_score, precision_score, recall_score
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # As evaluate's metrics/seqeval/seqeval.py _compute with its defaults.
        report = classification_report(y_true=truth, y_pred=predicted, suffix=False, output_dict=True, scheme=None,
                                       mode=None, sample_weight=None, zero_division="warn")
        report.pop("macro avg")
        report.pop("weighted avg")
        overall = report.pop("micro avg")
        out = {
            "overall_precision": float(overall["precision"]),
            "overall_recall": float(overall["recall"]),
            "overall_f1": float(overall["f1-score"]),
            "overall_accuracy": float(accuracy_score(y_true=truth, y_pred=predicted)),
            "types": {name: {"precision": float(s["precision"]), "recall": float(s["recall"]),
                             "f1": float(s["f1-score"]), "number": int(s["support"])} for name, s in report.items()},
        }
        assert out["overall_precision"] == float(precision_score(truth, predicted))
        assert out["overall_recall"] == float(recall_score(truth, predicted))
        assert out["overall_f1"] == float(f1_score(truth, predicted))
    return out


SEQEVAL_SENTENCES = {
    "iob2": ["B-PER", "I-PER", "O", "B-LOC"],
    "i_after_o": ["O", "I-PER", "I-PER", "O", "I-LOC"],
    "i_type_change": ["B-PER", "I-LOC", "I-LOC", "O"],
    "b_then_b": ["B-PER", "B-PER", "I-PER"],
    "iobes": ["S-PER", "B-LOC", "I-LOC", "E-LOC", "O", "E-MISC", "S-ORG", "I-ORG"],
    "e_after_e": ["B-PER", "E-PER", "E-PER", "I-PER", "O"],
    "s_then_e": ["S-LOC", "E-LOC", "S-LOC", "I-LOC"],
    "bare_prefixes": ["B", "I", "O", "I", "B", "B", "E", "S", "I"],
    "no_prefix": ["PER", "PER", "O", "LOC", "X", "X", "O"],
    "dot_tag": [".", "B-PER", ".", "I-PER", ".-PER", "O"],
    "odd_types": ["B-", "I-", "B-PER-X", "I-PER-X", "BX-LOC", "IX-LOC", "O-PER", "I-PER"],
    "unicode_types": ["B-LIEU", "I-LIEU", "B-\u00c9T\u00c9", "I-\u00c9T\u00c9", "\u00c9-LOC", "\u00c9-LOC", "O"],
    "all_o": ["O", "O", "O"],
    "empty": [],
    "trailing": ["O", "B-MISC", "I-MISC"],
}


def seqeval_cases(rng):
    from seqeval.metrics.sequence_labeling import get_entities
    entities = [{"name": name, "tags": tags, "entities": [list(e) for e in get_entities(tags)]}
                for name, tags in SEQEVAL_SENTENCES.items()]

    corpora = []

    def add(name, truth, predicted):
        corpora.append({"name": name, "truth": truth, "predicted": predicted,
                        "expect": seqeval_reference(truth, predicted)})

    add("exact", [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-MISC"]],
        [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-MISC"]])
    add("readme", [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]],
        [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]])
    add("i_after_o", [["O", "B-PER", "I-PER", "O"], ["B-LOC", "I-LOC"]],
        [["O", "I-PER", "I-PER", "O"], ["I-LOC", "I-LOC"]])
    add("type_change", [["B-PER", "I-PER", "I-PER"]], [["B-PER", "I-LOC", "I-PER"]])
    add("iobes", [["S-PER", "O", "B-LOC", "I-LOC", "E-LOC"], ["B-ORG", "E-ORG", "S-MISC"]],
        [["S-PER", "O", "B-LOC", "E-LOC", "E-LOC"], ["B-ORG", "I-ORG", "S-MISC"]])
    add("bare_prefixes", [["B", "I", "O", "B"], ["I", "I", "O"]], [["B", "I", "O", "I"], ["B", "I", "O"]])
    add("no_prefix", [["PER", "PER", "O", "LOC"], ["X", "O", "X"]], [["PER", "O", "O", "LOC"], ["X", "X", "X"]])
    add("carried_across_sentences", [["X"], ["B-PER"], ["X", "X"], ["O"]], [["X"], ["B-PER"], ["O", "X"], ["X"]])
    add("all_o", [["O", "O"], ["O"]], [["O", "O"], ["O"]])
    add("no_predicted_entities", [["B-PER", "I-PER", "O"], ["B-LOC"]], [["O", "O", "O"], ["O"]])
    add("only_predicted_entities", [["O", "O", "O"], ["O"]], [["B-PER", "I-PER", "O"], ["B-LOC"]])
    add("empty_sentences", [[], ["B-PER"], [], ["O", "B-LOC"]], [[], ["B-PER"], [], ["B-LOC", "B-LOC"]])
    add("several_types", [["B-PER", "O", "B-LOC", "I-LOC", "O", "B-ORG"], ["B-MISC", "I-MISC", "O", "B-PER"]],
        [["B-PER", "O", "B-LOC", "O", "O", "B-ORG"], ["B-MISC", "I-MISC", "O", "B-LOC"]])
    add("odd_types", [["B-", "I-", "B-PER-X", "I-PER-X"], ["BX-LOC", "IX-LOC", "O-PER"]],
        [["B-", "B-", "B-PER-X", "I-PER"], ["BX-LOC", "IX-LOC", "I-PER"]])
    add("unicode_types", [["B-\u00c9T\u00c9", "I-\u00c9T\u00c9", "O", "\u00c9-LOC"]],
        [["B-\u00c9T\u00c9", "I-\u00c9T\u00c9", "O", "B-LOC"]])
    add("dot_tags", [[".", "B-PER", ".", "I-PER"], ["O", ".-PER", "."]],
        [[".", "B-PER", "I-PER", "I-PER"], ["O", "B-PER", "."]])

    types = ["PER", "LOC", "MISC", "ORG"]
    tagset = ["O"] + [f"{p}-{t}" for t in types for p in "BI"]

    def gold_sentence(iob1):
        tags, inside = [], None
        for _ in range(rng.randint(1, 18)):
            r = rng.random()
            if r < 0.55:
                tags.append("O")
                inside = None
            elif inside and r < 0.8:
                tags.append("I-" + inside)
            else:
                inside = rng.choice(types)
                tags.append(("I-" if iob1 and (not tags or tags[-1] == "O") else "B-") + inside)
        return tags

    def corrupt(tags, p, pool):
        return [rng.choice(pool) if rng.random() < p else t for t in tags]

    for i in range(24):  # 24 corpora × 12 sentences
        truth = [gold_sentence(i % 3 == 2) for _ in range(12)]
        p = [0.05, 0.15, 0.3][i % 3]
        add(f"random_{i}", truth, [corrupt(s, p, tagset) for s in truth])
    odd = ["O", "O", "O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC", "B", "I", "E", "S",
           "X", "PER", ".", "B-", "\u00c9-LOC", "O-PER", ".-LOC"]
    for i in range(8):  # 8 corpora × 10 sentences of odd tags
        truth = [[rng.choice(odd) for _ in range(rng.randint(0, 12))] for _ in range(10)]
        truth[0].append("O")  # no corpus without tags
        add(f"random_odd_{i}", truth, [corrupt(s, 0.3, odd) for s in truth])
    return {"entities": entities, "corpora": corpora}


# ---------------------------------------------------------------- SQuAD

def load_script(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NORMALIZE_CASES = [
    "", " ", "The", "the the", "A", "an apple", "An Apple a Day", "Theater", "athe", "the-end", "a.b", "(a)",
    "THE BEATLES!", "  Hello,   World!  ", "Don't stop", "U.S.A.", "1,000,000", "$3.50", "tab\there", "line\nbreak",
    "\u00c9lys\u00e9e", "na\u00efve caf\u00e9", "STRA\u00dfE", "\u0130stanbul", "I\u0307", "\u00c9LYS\u00c9E",
    "\u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3", "\u03a3", "A\u03a3", "\u03a3A", "A\u03a3 B", "A\u03a3.",
    "A\u03a3'", "A.\u03a3", "A'\u03a3", "A\u00ad\u03a3", "\u1f08\u03a3\u0345", "A\u03a3\u0301", "\u03a3\u03a3",
    "\uff34\uff28\uff25 \uff21", "\uff54\uff48\uff45", "non\u00a0breaking\u00a0space", "ideographic\u3000space",
    "a\u3000the\u00a0an", "narrow\u202fno-break", "\u2003em space", "x\x1cy\x1dz\x1ew\x1fv", "x\x85y", "x\u200by",
    "x\u2028y\u2029z", "\u201cquoted\u201d", "\u2014dash\u2014", "\u00bfqu\u00e9?",
    "\u6771\u4eac the \u30bf\u30ef\u30fc",
    "a\u0301", "the\u0300", "\u00e0 la carte", "an\u0303", "\u24d0 b", "the\u2460", "the\u00b2", "a\u0660", "\u00aaa",
    "the_end", "\u01c4A", "\u01c5", "\u212a", "\u0131", "caf\u00e9 the", "ﬁne", "\U0001d400 the \U0001d41a",
    "\U0001f600 a \U0001f600", "\u05d0 the \u05d1", "a\u200dthe", "\u0e01 a", "Ａ\u00a0Ｂ", "\t\n\r\x0b\x0c",
]

WORDS = (
    "the The THE a A an An of in on at to for from by with and or but not Denver Broncos Super Bowl Carolina "
    "Panthers Beyonc\u00e9 Knowles Houston Texas Destiny's Child 2003 1,000 3.5 $20 50% Normandy Normans Rollo "
    "France Norway Paris \u00c9lys\u00e9e na\u00efve caf\u00e9 r\u00e9sum\u00e9 Stra\u00dfe M\u00fcnchen "
    "\u0130stanbul \u0391\u0398\u0397\u039d\u0391\u03a3 \u039f\u0394\u03a5\u03a3\u03a3\u0395\u0391\u03a3 "
    "\u6771\u4eac \u30bf\u30ef\u30fc \uff34\uff28\uff25 \uff21 Ｈｅｌｌｏ U.S. U.K. don't it's 19th century "
    "mid-1990s e-mail co-op Dr. Mr. St. \u2014 \u201cquoted\u201d (born) [note] {x} #1 @home x+y a/b \u00bd"
).split()
SPACES = [" ", " ", " ", " ", "  ", "\t", "\n", "\u00a0", "\u3000", "\u2009", "\x1c", "\u202f"]
PUNCT = [".", ",", "!", "?", ";", ":", "'", '"', "(", ")", "-", "\u2019", "\u201d", "\u2026", "\u00bb"]


def random_phrase(rng, lo=1, hi=7):
    out = ""
    for i in range(rng.randint(lo, hi)):
        if i:
            out += rng.choice(SPACES)
        word = rng.choice(WORDS)
        if rng.random() < 0.15:
            word += rng.choice(PUNCT)
        if rng.random() < 0.05:
            word = rng.choice(PUNCT) + word
        out += word
    return out


def corrupt_phrase(rng, gold):
    r = rng.random()
    if r < 0.15:
        return gold
    if r < 0.2:
        return ""
    if r < 0.3:
        return random_phrase(rng)
    words = gold.split()
    ops = rng.randint(1, 3)
    for _ in range(ops):
        op = rng.random()
        if op < 0.25 and words:
            del words[rng.randrange(len(words))]
        elif op < 0.5:
            words.insert(rng.randint(0, len(words)), rng.choice(WORDS))
        elif op < 0.65 and words:
            i = rng.randrange(len(words))
            words[i] = words[i].upper() if rng.random() < 0.5 else words[i].lower()
        elif op < 0.8:
            words.insert(rng.randint(0, len(words)), rng.choice(["the", "a", "an", "The", "A"]))
        elif words:
            i = rng.randrange(len(words))
            words[i] += rng.choice(PUNCT)
    return rng.choice(SPACES).join(words)


def run_v1(script, questions, predictions):
    with tempfile.TemporaryDirectory() as tmp:
        data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "", "qas": [
            {"id": q["id"], "question": "", "answers": [{"text": a, "answer_start": 0} for a in q["answers"]]}
            for q in questions]}]}]}
        with open(os.path.join(tmp, "data.json"), "w") as f:
            json.dump(data, f)
        with open(os.path.join(tmp, "pred.json"), "w") as f:
            json.dump(predictions, f)
        run = subprocess.run([sys.executable, script, os.path.join(tmp, "data.json"), os.path.join(tmp, "pred.json")],
                             capture_output=True, text=True)
        if run.returncode != 0:
            return {"error": run.stderr.strip().splitlines()[-1]}
        return {"expect": json.loads(run.stdout), "unanswered": run.stderr.count("Unanswered question")}


def run_v2(script, questions, predictions, na_probs, thresh):
    with tempfile.TemporaryDirectory() as tmp:
        data = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": "", "qas": [
            {"id": q["id"], "question": "", "answers": [{"text": a, "answer_start": 0} for a in q["answers"]]}
            for q in questions]}]}]}
        paths = {name: os.path.join(tmp, name + ".json") for name in ("data", "pred", "na", "out")}
        with open(paths["data"], "w") as f:
            json.dump(data, f)
        with open(paths["pred"], "w") as f:
            json.dump(predictions, f)
        command = [sys.executable, script, paths["data"], paths["pred"], "-o", paths["out"]]
        if na_probs is not None:
            with open(paths["na"], "w") as f:
                f.write("{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in na_probs) + "}")
            command += ["-n", paths["na"]]
        if thresh is not None:
            command += ["-t", repr(thresh)]
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode != 0:
            return {"error": run.stderr.strip().splitlines()[-1]}
        with open(paths["out"]) as f:
            return {"expect": json.load(f)}


def squad_cases(rng, v1_path, v2_path):
    v1 = load_script(v1_path, "squad_v1")
    v2 = load_script(v2_path, "squad_v2")
    assert v1.normalize_answer("The Cat") == v2.normalize_answer("The Cat")

    normalize = [[s, v2.normalize_answer(s)] for s in NORMALIZE_CASES]
    for _ in range(150):
        s = random_phrase(rng, 0, 8)
        normalize.append([s, v2.normalize_answer(s)])

    pairs = []
    hand = [("", ""), ("", "a"), ("the", ""), ("the", "a"), ("Denver Broncos", "Denver Broncos"),
            ("Denver Broncos", "the Denver Broncos!"), ("Denver Broncos", "Broncos"), ("a b c", "c b a"),
            ("b b b", "b"), ("b", "b b b"), ("\u00c9lys\u00e9e", "\u00e9lys\u00e9e"), ("na\u00efve", "NA\u00cfVE"),
            ("\u0391\u0398\u0397\u039d\u0391\u03a3", "\u03b1\u03b8\u03b7\u03bd\u03b1\u03c2"),
            ("\uff34\uff28\uff25 \uff21", "\uff54\uff48\uff45 \uff41"), ("one\u00a0two", "one two"),
            ("one\u3000two", "two one"), ("1,000", "1000"), ("U.S.", "US"), ("x\x1cy", "x y"), ("\u24d0", "a")]
    for gold, pred in hand:
        pairs.append([gold, pred])
    for _ in range(300):
        gold = random_phrase(rng)
        pairs.append([gold, corrupt_phrase(rng, gold)])
    pair_cases = []
    for gold, pred in pairs:
        pair_cases.append({"gold": gold, "prediction": pred,
                           "exact_v1": int(v1.exact_match_score(pred, gold)), "f1_v1": v1.f1_score(pred, gold),
                           "exact_v2": v2.compute_exact(gold, pred), "f1_v2": v2.compute_f1(gold, pred)})

    def random_questions(prefix, n, unanswerable):
        questions, predictions = [], {}
        for i in range(n):
            if rng.random() < unanswerable:
                answers = []
            else:
                answers = [random_phrase(rng) for _ in range(rng.randint(1, 3))]
                if rng.random() < 0.3:
                    answers.append(answers[0])
            questions.append({"id": f"{prefix}{i:03d}", "answers": answers})
            if answers:
                predictions[f"{prefix}{i:03d}"] = corrupt_phrase(rng, rng.choice(answers))
            else:
                predictions[f"{prefix}{i:03d}"] = rng.choice(["", "", "", " ", random_phrase(rng)])
        return questions, predictions

    v1_cases = []
    for i in range(4):
        questions, predictions = random_questions(f"q{i}_", 40, 0.0)
        if i == 1:  # unanswered questions score 0
            for q in rng.sample(questions, 5):
                del predictions[q["id"]]
        if i == 2:  # a repeated id counts twice; a prediction for no question is ignored
            questions.append(dict(questions[3]))
            predictions["not_a_question"] = "x"
        v1_cases.append({"name": f"random_{i}", "questions": questions, "predictions": predictions,
                         **run_v1(v1_path, questions, predictions)})
    hand_v1 = [{"id": "h1", "answers": ["Denver Broncos", "the Broncos"]},
               {"id": "h2", "answers": ["\u00c9lys\u00e9e"]},
               {"id": "h3", "answers": ["a"]}, {"id": "h4", "answers": ["1,000 km", "1000 km"]}]
    v1_cases.append({"name": "hand", "questions": hand_v1,
                     "predictions": {"h1": "Broncos", "h2": "\u00e9lys\u00e9e.", "h3": "the", "h4": "km"},
                     **run_v1(v1_path, hand_v1, {"h1": "Broncos", "h2": "\u00e9lys\u00e9e.", "h3": "the", "h4": "km"})})
    no_answers = [{"id": "z1", "answers": ["x"]}, {"id": "z2", "answers": []}]
    v1_cases.append({"name": "question_without_answers", "questions": no_answers, "predictions": {"z1": "x", "z2": "y"},
                     **run_v1(v1_path, no_answers, {"z1": "x", "z2": "y"})})

    v2_cases = []

    def add_v2(name, questions, predictions, na_probs=None, thresh=None):
        case = {"name": name, "questions": questions, "predictions": predictions}
        if na_probs is not None:
            case["na_probs"] = [[k, v] for k, v in na_probs]
        if thresh is not None:
            case["na_prob_thresh"] = thresh
        case.update(run_v2(v2_path, questions, predictions, na_probs, thresh))
        v2_cases.append(case)

    for i in range(6):
        questions, predictions = random_questions(f"v{i}_", 40, 0.4)
        na = None
        if i >= 1:
            ids = list(predictions)
            rng.shuffle(ids)
            levels = [0.0, 0.1, 0.25, 0.5, 0.5, 0.75, 0.9, 1.0] if i % 2 else None
            na = [(k, rng.choice(levels) if levels else round(rng.random(), 3)) for k in ids]
            if i == 5:
                na.append(("not_a_question", 0.3))
                predictions["not_a_question"] = "x"
        thresh = [None, None, 0.5, 1.0, 0.0, 0.3][i]
        add_v2(f"random_{i}", questions, predictions, na, thresh)
    hand_v2 = [{"id": "a", "answers": ["Denver Broncos"]}, {"id": "b", "answers": []},
               {"id": "c", "answers": ["the", "!!"]}, {"id": "d", "answers": []},
               {"id": "e", "answers": ["\u00c9lys\u00e9e"]}]
    hand_preds = {"a": "the Broncos", "b": "", "c": "", "d": " ", "e": "ELYSEE"}
    add_v2("hand", hand_v2, hand_preds)
    add_v2("hand_na", hand_v2, hand_preds, [("e", 0.9), ("d", 0.2), ("a", 0.2), ("c", 0.2), ("b", 0.0)])
    add_v2("hand_ties", hand_v2, hand_preds, [("d", 0.5), ("a", 0.5), ("b", 0.5), ("c", 0.5), ("e", 0.5)], -1.0)
    add_v2("only_answerable", hand_v2[:1], {"a": "Denver"}, [("a", 0.7)])
    add_v2("only_unanswerable", [hand_v2[1]], {"b": "something"}, [("b", 0.7)], 0.6)
    dup = [{"id": "a", "answers": ["x"]}, {"id": "b", "answers": ["y z"]}, {"id": "a", "answers": []}]
    add_v2("repeated_id", dup, {"a": "", "b": "z"}, [("b", 0.4), ("a", 0.6)])
    add_v2("missing_prediction", hand_v2, {k: v for k, v in hand_preds.items() if k != "c"})
    add_v2("missing_na_prob", hand_v2, hand_preds, [("a", 0.1), ("b", 0.2)])
    return {"normalize": normalize, "pairs": pair_cases, "v1": v1_cases, "v2": v2_cases}


def lowercase_table():
    lower = [[cp, chr(cp).lower()] for cp in range(0x110000)
             if not 0xD800 <= cp < 0xE000 and chr(cp).lower() != chr(cp)]
    unassigned, start = [], None
    for cp in range(0x110001):
        cn = cp < 0x110000 and unicodedata.category(chr(cp)) == "Cn"
        if cn and start is None:
            start = cp
        if not cn and start is not None:
            unassigned.append([start, cp - 1])
            start = None
    space = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000 and chr(cp).isspace()]
    return {"lower": lower, "unassigned": unassigned, "space": space}


def md5(path):
    with open(path, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--squad-v1", help="path of the official evaluate-v1.1.py")
    parser.add_argument("--squad-v2", help="path of the official evaluate-v2.0.py")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "fixtures", "task-metrics"))
    parser.add_argument("--tables", action="store_true", help="print squad_metrics.cpp's code point table")
    args = parser.parse_args()
    if args.tables:
        print_tables()
        return
    if not args.squad_v1 or not args.squad_v2:
        parser.error("--squad-v1 and --squad-v2 are required")
    import numpy
    from importlib.metadata import version
    os.makedirs(args.out, exist_ok=True)
    made_by = {"python": sys.version.split()[0], "unicode": unicodedata.unidata_version,
               "seqeval": version("seqeval"), "numpy": numpy.__version__}
    squad_made_by = {**made_by, "evaluate-v1.1.py md5": md5(args.squad_v1), "evaluate-v2.0.py md5": md5(args.squad_v2)}
    rng = random.Random(20240611)
    with open(os.path.join(args.out, "seqeval.json"), "w") as f:
        json.dump({"made_by": made_by, **seqeval_cases(rng)}, f, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(args.out, "squad.json"), "w") as f:
        squad = squad_cases(rng, args.squad_v1, args.squad_v2)
        json.dump({"made_by": squad_made_by, "unicode": lowercase_table(), **squad}, f, ensure_ascii=False,
                  separators=(",", ":"))


if __name__ == "__main__":
    main()
