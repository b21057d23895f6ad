#!/usr/bin/env python3
"""Writes the seed corpora of fuzz/corpus/<harness>/ from tests/fixtures (cut
small: a fuzzer mutates short inputs faster, and -max_len cuts longer ones)
and from inputs made here. Deterministic; rerun after a fixture changes.
Crash inputs the fuzzers found are kept beside these (named crash-*), and
this script leaves them alone."""
import base64, hashlib, json, os, pathlib, struct, sys, zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures"
OUT = ROOT / "fuzz" / "corpus"


def put(harness, name, data):
    d = OUT / harness
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / name).write_bytes(data)


def clear(harness):
    d = OUT / harness
    if d.exists():
        for f in d.iterdir():
            if not f.name.startswith("crash-"):
                f.unlink()


def safetensors(tensors, metadata=None, pad=True):
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def make_safetensors():
    clear("fuzz_safetensors")
    f32 = struct.pack("<6f", 1, -2, 0.5, 3e38, -0.0, 1e-30)
    put("fuzz_safetensors", "f32", safetensors([("w", "F32", [2, 3], f32)]))
    put("fuzz_safetensors", "dtypes", safetensors([
        ("a", "F64", [2], struct.pack("<2d", 1.5, -2)), ("b", "F16", [2], b"\x00\x3c\x00\xc0"),
        ("c", "BF16", [2], b"\x80\x3f\x00\xc0"), ("d", "I64", [1], struct.pack("<q", -5)),
        ("e", "I32", [2], struct.pack("<2i", 1, -1)), ("f", "I16", [1], struct.pack("<h", 7)),
        ("g", "I8", [2], b"\x01\xff"), ("h", "U8", [3], b"\x01\x02\x03"), ("i", "BOOL", [2], b"\x00\x01"),
        ("j", "F32", [0, 4], b""), ("k", "F32", [], struct.pack("<f", 2))], {"format": "pt", "step": "3"}))
    # A BERT-like checkpoint of three small tensors, the layout save_pretrained writes.
    put("fuzz_safetensors", "bert_like", safetensors([
        ("bert.embeddings.word_embeddings.weight", "F32", [4, 2], struct.pack("<8f", *range(8))),
        ("bert.embeddings.LayerNorm.weight", "F32", [2], struct.pack("<2f", 1, 1)),
        ("classifier.bias", "F32", [2], struct.pack("<2f", 0, 0))], {"format": "pt"}))
    put("fuzz_safetensors", "empty", safetensors([], pad=False))
    put("fuzz_safetensors", "index", json.dumps(
        {"metadata": {"total_size": 16}, "weight_map": {"x": "a.safetensors", "y": "a.safetensors"}}))
    put("fuzz_safetensors", "index_missing_shard", json.dumps(
        {"metadata": {}, "weight_map": {"x": "a.safetensors", "z": "b.safetensors"}}))


def make_config_json():
    clear("fuzz_config_json")
    seen = set()
    for p in sorted(FIX.glob("*/config.json")) + sorted(FIX.glob("*/*/config.json")):
        data = p.read_bytes()
        key = hashlib.sha1(data).hexdigest()
        if key not in seen and len(data) < 4096:
            seen.add(key)
            put("fuzz_config_json", p.parent.name, data)
    put("fuzz_config_json", "minimal", '{"model_type": "bert", "vocab_size": 10, "hidden_size": 4, '
        '"num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8}')


TEXTS = ["Hello, world! unaffable HÉLLO", "naïve café 你好 ﬁ ½ \u200b tabs\tand  spaces", "\ud7ff\u00e9\u0301 x"]


def make_vocab():
    clear("fuzz_vocab")
    ner = (FIX / "ner-task" / "vocab.txt").read_bytes()
    put("fuzz_vocab", "ner", ner + b"\0" + TEXTS[0].encode())
    cased = b"".join((FIX / "wordpiece-cased" / "vocab.txt").read_bytes().splitlines(keepends=True)[:400])
    put("fuzz_vocab", "cased", cased + b"\0" + TEXTS[1].encode())
    put("fuzz_vocab", "tiny", "[UNK]\n[CLS]\n[SEP]\nun\n##aff\n##able\n  \n[PAD]\r\n[MASK]\t\n\0" + TEXTS[2])


def shrink_tokenizer(doc, keep):
    model = doc["model"]
    if model["type"] in ("WordPiece", "BPE", "WordLevel"):
        vocab = {t: i for t, i in model["vocab"].items() if i < keep}
        for a in doc.get("added_tokens", []):
            if a["content"] in model["vocab"] and a["content"] not in vocab:
                vocab[a["content"]] = model["vocab"][a["content"]]
        model["vocab"] = vocab
        if "merges" in model:
            kept = []
            for m in model["merges"]:
                a, b = m.split(" ", 1) if isinstance(m, str) else m
                if a in vocab and b in vocab and a + b in vocab:
                    kept.append(m)
            model["merges"] = kept
    elif model["type"] == "Unigram":
        model["vocab"] = model["vocab"][:keep]
        if model.get("unk_id") is not None and model["unk_id"] >= keep:
            model["unk_id"] = 0
    return doc


def precompiled_charsmap():
    # A Darts double array with one key: "A" -> "a" (root offset 0; unit 0x41 has label 'A', a leaf, offset 1;
    # the leaf at 0x41 ^ 1 = 0x40 holds replacement offset 0). 256 units, so that a lookup of any byte stays inside.
    units = [0] * 0x100  # every byte's first step stays inside
    units[0x41] = 0x41 | (1 << 8) | (1 << 10)
    units[0x40] = 0
    trie = b"".join(struct.pack("<I", u) for u in units)
    return base64.b64encode(struct.pack("<I", len(trie)) + trie + b"a\0").decode()


def make_tokenizer_json():
    clear("fuzz_tokenizer_json")
    text = ("\0" + TEXTS[1]).encode()
    for p in sorted((FIX / "tokenizers").glob("*/tokenizer.json")):
        doc = shrink_tokenizer(json.loads(p.read_text()), 150)
        def swap_precompiled(n):
            if isinstance(n, dict):
                if n.get("type") == "Precompiled":
                    n["precompiled_charsmap"] = precompiled_charsmap()
                for v in n.values():
                    swap_precompiled(v)
            elif isinstance(n, list):
                for v in n:
                    swap_precompiled(v)
        swap_precompiled(doc)
        data = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
        put("fuzz_tokenizer_json", p.parent.name, data + text)
    put("fuzz_tokenizer_json", "wordlevel", json.dumps({
        "version": "1.0", "added_tokens": [{"id": 0, "content": "[PAD]", "single_word": False, "lstrip": False,
                                            "rstrip": False, "normalized": False, "special": True}],
        "normalizer": {"type": "Lowercase"}, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {"[PAD]": 0, "[UNK]": 1, "hello": 2, "world": 3}, "unk_token": "[UNK]"}})
        + "\0Hello World!")


def make_tokenizer_config():
    clear("fuzz_tokenizer_config")
    seen = set()
    for p in sorted((FIX / "tokenizers").glob("*/tokenizer_config.json")):
        data = p.read_bytes()
        key = hashlib.sha1(data).hexdigest()
        if key not in seen:
            seen.add(key)
            put("fuzz_tokenizer_config", p.parent.name, data)
    put("fuzz_tokenizer_config", "bert", json.dumps({
        "tokenizer_class": "BertTokenizer", "do_lower_case": False, "strip_accents": None,
        "tokenize_chinese_chars": True, "model_max_length": 128, "mask_token": {"content": "[MASK]"}}))


def make_torch_checkpoint():
    clear("fuzz_torch_checkpoint")
    bins = FIX / "pytorch-bin"
    for name in ["protocol4.bin", "complex.bin", "noncontiguous.bin", "dtypes.bin", "legacy.bin"]:
        data = (bins / name).read_bytes()
        put("fuzz_torch_checkpoint", "file_" + name, b"\0" + data)
        if zipfile.is_zipfile(bins / name):
            with zipfile.ZipFile(bins / name) as z:
                pkl = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
                put("fuzz_torch_checkpoint", "pickle_" + name, b"\1" + z.read(pkl))


def line_prefix(path, lines):
    return b"".join(path.read_bytes().splitlines(keepends=True)[:lines])


def make_text_data():
    clear("fuzz_text_data")
    put("fuzz_text_data", "csv", b"\0text,pair,label\n\"Hello, \"\"world\"\"\",a pair,pos\nline two,\"multi\nline\",neg\n"
        b"caf\xc3\xa9,x,pos\r\n")
    put("fuzz_text_data", "tsv", b"\1text\tlabel\nthe text\t1\nanother one\t0\n\"quoted\ttab\"\t1\n")
    put("fuzz_text_data", "jsonl_table", b"\2" + line_prefix(FIX / "license-text" / "train.jsonl", 4))
    put("fuzz_text_data", "jsonl_regression", b'\2{"text": "a", "pair": "b", "label": 0.5}\n\n{"text": "c", "label": -1.25}\n')
    put("fuzz_text_data", "conll", b"\3-DOCSTART- -X- O O\n\n" + line_prefix(FIX / "ner-task" / "train.conll", 30))
    put("fuzz_text_data", "tagged_jsonl", b'\4{"tokens": ["EU", "rejects", "German", "call"], "tags": ["B-ORG", "O", "B-MISC", "O"]}\n'
        b'{"tokens": [], "tags": []}\n{"tokens": ["a"], "ner_tags": [1]}\n')
    squad = json.loads((FIX / "qa-data" / "squad.json").read_text())
    squad["data"] = squad["data"][:2]
    put("fuzz_text_data", "squad_json", b"\5" + json.dumps(squad, ensure_ascii=False).encode())
    put("fuzz_text_data", "squad_jsonl", b"\6" + line_prefix(FIX / "qa-data" / "squad.jsonl", 3))
    put("fuzz_text_data", "mlm_text", ("\7" + "The first line.\n\n  \nsecond line, caf\u00e9 \u4f60\u597d\r\nlast").encode())
    put("fuzz_text_data", "swag", b"\x08" + line_prefix(FIX / "choice-data" / "swag.jsonl", 3))
    put("fuzz_text_data", "json_table", b'\x09{"text": "one"}\n{"text": "two", "other": [1, 2]}\n')


def fnv_digest(data):
    h = 0xcbf29ce484222325
    mask = (1 << 64) - 1
    i = 0
    while i + 8 <= len(data):
        h = ((h ^ struct.unpack_from("<Q", data, i)[0]) * 0x100000001b3) & mask
        i += 8
    for b in data[i:]:
        h = ((h ^ b) * 0x100000001b3) & mask
    return {"bytes": len(data), "hash": "%016x" % h}


def make_trainer_state():
    clear("fuzz_trainer_state")
    state = {"global_step": 10, "updates": 9, "micro_batches": 20, "loss_scale": 65536.0, "clean_steps": 3,
             "skipped_steps": 1, "seed": 42, "optimizer": "adamw", "per_device_train_batch_size": 8,
             "gradient_accumulation_steps": 2, "examples": 80, "shuffle": True, "drop_last": False,
             "group_by_length": False, "precision": "fp16", "world_size": 2, "zero_stage": 1}
    put("fuzz_trainer_state", "state", b"\0" + json.dumps(state, indent=2).encode() + b"\n")
    # As `anatomy train --model bert-tiny --device cpu --dummy-size 8 --max-steps 2 --save-steps 2` wrote it.
    put("fuzz_trainer_state", "state_checkpoint", b"\0" + json.dumps({
        "clean_steps": 0, "drop_last": False, "examples": 8, "global_step": 2, "gradient_accumulation_steps": 1,
        "group_by_length": False, "loss_scale": 1.0, "micro_batches": 2, "optimizer": "adamw",
        "per_device_train_batch_size": 4, "precision": "fp32", "seed": 42, "shuffle": True, "skipped_steps": 0,
        "updates": 2, "world_size": 1, "zero_stage": 0}, indent=2).encode() + b"\n")
    old = {k: v for k, v in state.items() if k not in ("group_by_length", "world_size", "zero_stage")}
    put("fuzz_trainer_state", "state_old", b"\0" + json.dumps(old).encode())
    # The harness's checkpoint directory: config.json "{}\n" and a model.safetensors of bytes 0..15.
    files = {"config.json": fnv_digest(b"{}\n"), "model.safetensors": fnv_digest(bytes(range(16)))}
    put("fuzz_trainer_state", "manifest", b"\1" + json.dumps({"files": files}, indent=2).encode() + b"\n")
    files["optimizer.safetensors"] = {"bytes": 3, "hash": "0000000000000000"}
    put("fuzz_trainer_state", "manifest_missing", b"\1" + json.dumps({"files": files}).encode())


def make_optimizer_state():
    clear("fuzz_optimizer_state")
    states = [("exp_avg", "F32", [6], struct.pack("<6f", 0.1, -0.2, 0, 1, 2, 3)),
              ("exp_avg_sq", "F32", [6], struct.pack("<6f", 0.01, 0.04, 0, 1, 4, 9)),
              ("q", "U8", [8], bytes(range(8))), ("absmax", "F32", [2], struct.pack("<2f", 1, 0.5))]
    meta = {"optimizer": "adamw", "steps": "3", "parameter_layout": "layout-1"}
    put("fuzz_optimizer_state", "single", b"\0" + safetensors(states, meta))
    shard = dict(meta, rank="1", world_size="2", shard_begin="6", shard_end="12", shard_total="12")
    put("fuzz_optimizer_state", "shard", b"\1" + safetensors(states, shard))
    put("fuzz_optimizer_state", "nan", b"\0" + safetensors(
        [states[0], ("exp_avg_sq", "F32", [6], struct.pack("<6f", 0, -1, 0, 0, 0, float("nan")))] + states[2:], meta))


def make_hf_cache():
    clear("fuzz_hf_cache")
    put("fuzz_hf_cache", "commit", "0123456789abcdef0123456789abcdef01234567")
    put("fuzz_hf_cache", "commit_newline", "0123456789abcdef0123456789abcdef01234567\n")
    put("fuzz_hf_cache", "other_commit", "fedcba9876543210fedcba9876543210fedcba98")
    put("fuzz_hf_cache", "ref_name", "main")


if __name__ == "__main__":
    for make in [make_safetensors, make_config_json, make_vocab, make_tokenizer_json, make_tokenizer_config,
                 make_torch_checkpoint, make_text_data, make_trainer_state, make_optimizer_state, make_hf_cache]:
        make()
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"fuzz/corpus: {sum(1 for f in OUT.rglob('*') if f.is_file())} files, {total} bytes")
