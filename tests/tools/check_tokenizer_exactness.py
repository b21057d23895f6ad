#!/usr/bin/env python3
"""check_tokenizer_exactness.py: encodes a corpus with Hugging Face's `tokenizers` and with
`anatomy tokenize --tokenizer DIR/tokenizer.json --input CORPUS --offsets`, for every fixture tokenizer under
tests/fixtures/tokenizers, and compares input ids, token type ids and offsets line by line.

The reference is tokenizers.Tokenizer.from_file(tokenizer.json) with truncation and padding off (the minilm
file asks for both; the check turns them off), encode_batch(texts or (text, text_pair) pairs,
add_special_tokens=True). Offsets are in characters (code points), as Encoding.offsets gives them; a second
text's tokens have offsets into the second text; tokens the post-processor adds have (0, 0).

anatomy must print one JSON object per input line:
    {"input_ids": [...], "token_type_ids": [...], "attention_mask": [...], "offsets": [[start, end], ...]}

Usage (in a virtual environment with tokenizers; see tests/fixtures/tokenizers/README.md):

  check_tokenizer_exactness.py --anatomy build/anatomy [--fixtures DIR] [--corpus FILE] [--only NAME ...]
      Without --corpus, tokenizer_corpus.py writes the corpus of this machine to a file first (its path is
      printed; --keep DIR keeps it and the outputs there). --extra-args "..." adds arguments after --offsets.
      Exit status 1 on any difference, 2 on an error (anatomy failed, or printed something else than JSON).
  check_tokenizer_exactness.py --against DIR ...
      Compares with DIR/<name>.jsonl (outputs made elsewhere, in anatomy's format) instead of running anatomy.
  check_tokenizer_exactness.py --self-test ...
      Runs this script's own `tokenize` (tokenizers behind anatomy's command line) as the anatomy binary:
      checks the harness; everything must agree.
  check_tokenizer_exactness.py --expected-out tests/fixtures/tokenizers [--corpus FILE] [--subset-size 300]
      Picks a small subset of the corpus that covers every kind of text and every kind of case the
      tokenizers show on it (unknown tokens, added tokens, byte fallback, offsets that overlap or are empty,
      pairs...), writes it as DIR/corpus-subset.jsonl and the library's encodings of it as
      DIR/<name>/expected.jsonl (input, input_ids, token_type_ids, offsets), for the C++ tests.
  check_tokenizer_exactness.py --verify-expected [--fixtures DIR]
      Encodes the inputs of every expected.jsonl with the installed tokenizers and compares (a newer
      tokenizers that encodes differently shows here).
  check_tokenizer_exactness.py tokenize --tokenizer FILE --input FILE [--offsets]
      What anatomy's command prints, made with tokenizers (used by --self-test).
"""
import argparse
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import tokenizer_corpus  # noqa: E402

DEFAULT_FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
SUBSET_NAME = "corpus-subset.jsonl"
EXPECTED_NAME = "expected.jsonl"
SUBSET_SEED = "anatomy-tokenizer-subset-1"


def load_tokenizer(path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)
    tok.no_truncation()
    tok.no_padding()
    return tok


def inputs_of(records):
    return [r["text"] if r.get("text_pair") is None else (r["text"], r["text_pair"]) for r in records]


def encode(tok, records):
    """The library's encodings, as dicts in anatomy's format (plus the tokens and sequence ids, to print)."""
    out = []
    for enc in tok.encode_batch(inputs_of(records), add_special_tokens=True):
        out.append({"input_ids": enc.ids, "token_type_ids": enc.type_ids, "attention_mask": enc.attention_mask,
                    "offsets": [list(o) for o in enc.offsets], "sequence_ids": enc.sequence_ids,
                    "tokens": enc.tokens})
    return out


def fixture_names(fixtures, only=None):
    names = sorted(d for d in os.listdir(fixtures) if os.path.isfile(os.path.join(fixtures, d, "tokenizer.json")))
    if only:
        missing = sorted(set(only) - set(names))
        if missing:
            raise SystemExit(f"no such fixture under {fixtures}: {', '.join(missing)} (have: {', '.join(names)})")
        names = [n for n in names if n in only]
    if not names:
        raise SystemExit(f"no fixture (a directory with tokenizer.json) under {fixtures}")
    return names


# ------------------------------------------------------------------------------------------ comparing
def show(s, limit=120):
    r = repr(s)
    return r if len(r) <= limit else r[: limit - 5] + "...'" + f" ({len(s)} characters)"


def piece(record, seq, offsets):
    """The text a token's offsets cover (in the first or the second text)."""
    if offsets is None or seq is None:
        return ""
    text = record.get("text_pair") if seq == 1 else record["text"]
    try:
        s, e = offsets
        return repr(text[s:e]) if text is not None else "?"
    except (TypeError, ValueError):
        return "?"


def describe_token(tok, res, i, record, seq):
    if i >= len(res["input_ids"]):
        return "(none)"
    tid = res["input_ids"][i]
    name = tok.id_to_token(tid) if isinstance(tid, int) else None
    types = res.get("token_type_ids") or []
    offs = res.get("offsets") or []
    off = offs[i] if i < len(offs) else None
    return (f"{name!r} id {tid} type {types[i] if i < len(types) else '?'} offsets "
            f"{tuple(off) if isinstance(off, list) else off} {piece(record, seq, off)}")


def compare_line(ref, got, other):
    """The first difference between two encodings: None or (what differs, token position)."""
    if not isinstance(got, dict):
        return ("not a JSON object", 0)
    for key in ("input_ids", "token_type_ids", "offsets"):
        if not isinstance(got.get(key), list):
            return (f"no {key} list", 0)
    offsets = [list(o) if isinstance(o, (list, tuple)) else o for o in got["offsets"]]
    for what, x, y in (("ids", ref["input_ids"], got["input_ids"]),
                       ("type ids", ref["token_type_ids"], got["token_type_ids"]),
                       ("offsets", ref["offsets"], offsets)):
        n = min(len(x), len(y))
        for i in range(n):
            if x[i] != y[i]:
                return (f"{what} differ at token {i}", i)
        if len(x) != len(y):
            return (f"{what}: {len(x)} in tokenizers, {len(y)} in {other} (the first {n} agree)", n)
    mask = got.get("attention_mask")
    if mask is not None and mask != [1] * len(ref["input_ids"]):
        return ("attention_mask is not all 1", 0)
    return None


def compare(name, tok, records, ref, got, max_shown, other="anatomy"):
    """Prints the comparison of one tokenizer; returns the number of differing lines (and 1 for a line count
    that differs)."""
    tokens = sum(len(r["input_ids"]) for r in ref)
    differing, by_kind, details = 0, {}, []
    for k, (record, r) in enumerate(zip(records, ref)):
        g = got[k] if k < len(got) else None
        diff = compare_line(r, g, other) if g is not None else (f"no line {k + 1} in {other}'s output", 0)
        if diff is None:
            continue
        differing += 1
        kind = record.get("kind", "?")
        by_kind[kind] = by_kind.get(kind, 0) + 1
        if len(details) >= max_shown:
            continue
        what, i = diff
        seq = r["sequence_ids"][i] if i < len(r["sequence_ids"]) else None
        lines = [f"  line {k + 1} ({kind}): {what}", f"    text:       {show(record['text'])}"]
        if record.get("text_pair") is not None:
            lines.append(f"    text_pair:  {show(record['text_pair'])}")
        lines.append(f"    tokenizers: {describe_token(tok, r, i, record, seq)}")
        if isinstance(g, dict) and isinstance(g.get("input_ids"), list):
            lines.append(f"    {other + ':':11s} {describe_token(tok, g, i, record, seq)}")
            lo = max(0, i - 3)
            ours = [tok.id_to_token(t) for t in r["input_ids"][lo: i + 4]]
            theirs = [tok.id_to_token(t) if isinstance(t, int) else t for t in g["input_ids"][lo: i + 4]]
            lines.append(f"    tokens {lo}..: tokenizers {ours}")
            lines.append(f"    {'':10s}{other:11s} {theirs}")
        details.append("\n".join(lines))
    extra = len(got) - len(ref)
    status = "OK" if differing == 0 and extra == 0 else "DIFFERENT"
    count = "" if extra == 0 else f" ({other} printed {len(got)} lines for {len(ref)} inputs)"
    print(f"{name}: {len(ref)} lines, {tokens} tokens, {differing} differing lines{count}: {status}")
    if by_kind:
        print("  differing lines by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(by_kind.items())))
    for d in details:
        print(d)
    return differing + (extra != 0)


def read_results(path):
    with open(path, "r", encoding="utf-8", newline="\n") as f:
        return [json.loads(line) for line in f.read().split("\n") if line.strip()]


def run_anatomy(command, tokenizer_json, corpus, out_path, extra):
    cmd = command + ["tokenize", "--tokenizer", tokenizer_json, "--input", corpus, "--offsets"] + extra
    start = time.monotonic()
    with open(out_path, "wb") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()
        return None, seconds, f"`{' '.join(shlex.quote(c) for c in cmd)}` exited {proc.returncode}: {err[-2000:]}"
    try:
        return read_results(out_path), seconds, None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return None, seconds, f"{out_path}: not JSON lines: {e}"


def check(args):
    names = fixture_names(args.fixtures, args.only)
    needs_work = args.keep or args.corpus is None or not args.against
    work = (args.keep or tempfile.mkdtemp(prefix="tokcheck-")) if needs_work else None
    if work:
        os.makedirs(work, exist_ok=True)
    corpus = args.corpus
    if corpus is None:
        corpus = os.path.join(work, "tokenizer_corpus.jsonl")
        tokenizer_corpus.write_jsonl(tokenizer_corpus.generate(), corpus)
    records = tokenizer_corpus.read_jsonl(corpus)
    pairs = sum(1 for r in records if r.get("text_pair") is not None)
    print(f"corpus {corpus}: {len(records)} lines ({pairs} pairs)")
    if args.self_test:
        command = [sys.executable, os.path.abspath(__file__)]
    elif args.anatomy:
        command = shlex.split(args.anatomy)
    else:
        command = None
    failures, errors = 0, 0
    for name in names:
        path = os.path.join(args.fixtures, name, "tokenizer.json")
        tok = load_tokenizer(path)
        start = time.monotonic()
        ref = encode(tok, records)
        ref_seconds = time.monotonic() - start
        if command is not None:
            got, seconds, error = run_anatomy(command, path, corpus, os.path.join(work, f"{name}.jsonl"),
                                              shlex.split(args.extra_args or ""))
            other = "anatomy"
        else:
            result = os.path.join(args.against, f"{name}.jsonl")
            got, seconds, error, other = None, 0.0, None, "other"
            try:
                got = read_results(result)
            except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
                error = f"{result}: {e}"
        if error:
            print(f"{name}: ERROR: {error}")
            errors += 1
            continue
        failures += 1 if compare(name, tok, records, ref, got, args.max_shown, other) else 0
        print(f"  (tokenizers {ref_seconds:.2f} s" + (f", anatomy {seconds:.2f} s)" if command else ")"))
    if work and args.keep is None and failures == 0 and errors == 0:
        shutil.rmtree(work)
    elif work and args.keep is None:
        print(f"corpus and outputs kept in {work}")
    print(f"{len(names)} tokenizers: {len(names) - failures - errors} agree, {failures} differ, {errors} errors")
    return 2 if errors else 1 if failures else 0


# ------------------------------------------------------------------------------------ expected files
def model_unk_id(tok, path):
    with open(path, encoding="utf-8") as f:
        model = json.load(f)["model"]
    if model.get("type") == "Unigram":
        return model.get("unk_id")
    unk = model.get("unk_token")
    return tok.token_to_id(unk) if unk else None


def features(tok, unk_id, record, enc):
    """The kinds of case an encoding shows (for the subset to cover each)."""
    f = set()
    ids, offs, seqs, tokens = enc["input_ids"], enc["offsets"], enc["sequence_ids"], enc["tokens"]
    added = {i for i in tok.get_added_tokens_decoder()}
    real = [i for i, s in enumerate(seqs) if s is not None]
    if record.get("text_pair") is not None:
        f.add("pair")
    if not real:
        f.add("no tokens")
    if unk_id is not None and unk_id in ids:
        f.add("unknown")
    for i in real:
        if ids[i] in added:
            f.add("added token in the text")
        if tokens[i].startswith("<0x") and len(tokens[i]) == 6:
            f.add("byte fallback")
        if offs[i][0] == offs[i][1]:
            f.add("empty offsets")
    for a, b in zip(real, real[1:]):
        if seqs[a] == seqs[b] and offs[b][0] < offs[a][1]:
            f.add("overlapping offsets")
        if seqs[a] == seqs[b] and offs[b][0] > offs[a][1]:
            f.add("gap between offsets")
    if len(ids) > 200:
        f.add("long encoding")
    if any(len(tokens[i]) > 16 for i in real):
        f.add("long token")
    return f


def select_subset(records, per_fixture, size):
    """Indices of the subset: the hand-picked and edge records, then the rarest (fixture, feature) pairs until
    each is shown twice, then every kind in turn (short records, in a seeded order)."""
    rng = random.Random(SUBSET_SEED)
    length = [len(r["text"]) + len(r.get("text_pair") or "") for r in records]
    limit = {"long-word": 700, "license-paragraph": 450, "license-whole": 0}
    ok = [length[i] <= limit.get(r["kind"], 240) for i, r in enumerate(records)]
    chosen, taken = [], set()

    def take(i):
        if i not in taken:
            taken.add(i)
            chosen.append(i)

    for i, r in enumerate(records):
        if r["kind"] in ("fixed", "empty", "pair-edge", "pair-null"):
            take(i)
    counts = {}
    for feats in per_fixture:
        for i, f in enumerate(feats):
            if not ok[i]:
                continue
            for x in f:
                counts.setdefault(x, []).append(i)
    covered = {x: 0 for x in counts}
    for i in chosen:
        for feats in per_fixture:
            for x in feats[i]:
                if x in covered:
                    covered[x] += 1
    for x in sorted(counts, key=lambda x: (len(counts[x]), x)):
        candidates = sorted(counts[x], key=lambda i: (length[i], i))
        for i in candidates:
            if covered[x] >= 2:
                break
            if i in taken:
                continue
            take(i)
            for feats in per_fixture:
                for y in feats[i]:
                    if y in covered:
                        covered[y] += 1
    by_kind = {}
    for i, r in enumerate(records):
        if ok[i] and i not in taken:
            by_kind.setdefault(r["kind"], []).append(i)
    for kind in by_kind:
        rng.shuffle(by_kind[kind])
    # Every kind in turn; these more often (pairs: type ids and offsets into the second text).
    weight = {"pair": 4, "special-tokens": 2, "combining": 2, "whitespace": 2, "translation": 2, "cjk": 2,
              "emoji": 2, "long-word": 2, "control": 2}
    kinds = [k for k in sorted(by_kind) for _ in range(weight.get(k, 1))]
    while len(chosen) < size and any(by_kind.values()):
        for kind in kinds:
            if by_kind[kind] and len(chosen) < size:
                take(by_kind[kind].pop())
    return sorted(chosen), covered


def expected_out(args):
    if args.only:
        raise SystemExit("--expected-out writes every fixture: the subset is chosen for all of them together")
    names = fixture_names(args.fixtures)
    out_root = args.expected_out
    corpus = args.corpus
    work = tempfile.mkdtemp(prefix="tokexpected-")
    try:
        if corpus is None:
            corpus = os.path.join(work, "tokenizer_corpus.jsonl")
            tokenizer_corpus.write_jsonl(tokenizer_corpus.generate(), corpus)
        records = tokenizer_corpus.read_jsonl(corpus)
        print(f"corpus {corpus}: {len(records)} lines")
        toks, per_fixture = {}, []
        for name in names:
            path = os.path.join(args.fixtures, name, "tokenizer.json")
            tok = toks[name] = load_tokenizer(path)
            unk = model_unk_id(tok, path)
            encs = encode(tok, records)
            per_fixture.append([{(name, x) for x in features(tok, unk, r, e)} for r, e in zip(records, encs)])
        subset_idx, covered = select_subset(records, per_fixture, args.subset_size)
        subset = [records[i] for i in subset_idx]
        os.makedirs(out_root, exist_ok=True)
        tokenizer_corpus.write_jsonl(subset, os.path.join(out_root, SUBSET_NAME))
        kinds = {}
        for r in subset:
            kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
        print(f"{os.path.join(out_root, SUBSET_NAME)}: {len(subset)} lines; by kind: "
              + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
        for name in names:
            encs = encode(toks[name], subset)
            path = os.path.join(out_root, name, EXPECTED_NAME)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                for r, e in zip(subset, encs):
                    line = {"kind": r["kind"], "text": r["text"]}
                    if "text_pair" in r:
                        line["text_pair"] = r["text_pair"]
                    line.update(input_ids=e["input_ids"], token_type_ids=e["token_type_ids"], offsets=e["offsets"])
                    f.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
            feats = sorted(x for (n, x), c in covered.items() if n == name)
            print(f"{path}: {os.path.getsize(path)} bytes, {sum(len(e['input_ids']) for e in encs)} tokens; "
                  f"covers: {', '.join(feats)}")
    finally:
        shutil.rmtree(work)
    return 0


def verify_expected(args):
    names = [n for n in fixture_names(args.fixtures, args.only)
             if os.path.exists(os.path.join(args.fixtures, n, EXPECTED_NAME))]
    if not names:
        raise SystemExit(f"no {EXPECTED_NAME} under {args.fixtures}")
    failures = 0
    for name in names:
        tok = load_tokenizer(os.path.join(args.fixtures, name, "tokenizer.json"))
        stored = read_results(os.path.join(args.fixtures, name, EXPECTED_NAME))
        ref = encode(tok, stored)
        failures += 1 if compare(name, tok, stored, ref, stored, args.max_shown, "expected") else 0
    print(f"{len(names)} expected files: {len(names) - failures} agree with tokenizers, {failures} differ")
    return 1 if failures else 0


# ------------------------------------------------------------------------------------------- emulation
def emulate_tokenize(argv):
    """`anatomy tokenize --tokenizer FILE --input FILE --offsets`, made with tokenizers."""
    p = argparse.ArgumentParser(prog="check_tokenizer_exactness.py tokenize")
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--offsets", action="store_true")
    p.add_argument("--threads", type=int, default=0, help="ignored")
    a = p.parse_args(argv)
    tok = load_tokenizer(a.tokenizer)
    records = tokenizer_corpus.read_jsonl(a.input)
    out = sys.stdout
    for e in encode(tok, records):
        line = {"input_ids": e["input_ids"], "token_type_ids": e["token_type_ids"],
                "attention_mask": e["attention_mask"]}
        if a.offsets:
            line["offsets"] = e["offsets"]
        out.write(json.dumps(line) + "\n")
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "tokenize":
        return emulate_tokenize(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--anatomy", help="the anatomy binary (or a command line: words split as the shell does)")
    mode.add_argument("--against", metavar="DIR", help="compare with DIR/<name>.jsonl instead of running anatomy")
    mode.add_argument("--self-test", action="store_true", help="this script's `tokenize` as the anatomy binary")
    mode.add_argument("--expected-out", metavar="DIR", help="write DIR/corpus-subset.jsonl and "
                      "DIR/<name>/expected.jsonl")
    mode.add_argument("--verify-expected", action="store_true", help="compare the expected.jsonl files with "
                      "the installed tokenizers")
    parser.add_argument("--fixtures", default=DEFAULT_FIXTURES, help="the fixture tokenizers (default: %(default)s)")
    parser.add_argument("--corpus", help="the JSON-lines corpus (default: tokenizer_corpus.py's, written first)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these fixtures only")
    parser.add_argument("--extra-args", metavar="ARGS", help="more arguments for `anatomy tokenize`, after "
                        "--offsets (split as the shell does)")
    parser.add_argument("--keep", metavar="DIR", help="write the corpus and anatomy's outputs there and keep them")
    parser.add_argument("--max-shown", type=int, default=5, help="differences printed per tokenizer (default 5)")
    parser.add_argument("--subset-size", type=int, default=300, help="lines of the subset (default 300)")
    args = parser.parse_args()
    import tokenizers

    print(f"tokenizers {tokenizers.__version__}")
    if args.expected_out:
        return expected_out(args)
    if args.verify_expected:
        return verify_expected(args)
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
