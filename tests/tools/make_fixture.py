#!/usr/bin/env python3
"""make_fixture.py: builds reference fixtures with Hugging Face transformers, in the format of
tests/fixtures/bert-tiny-cls (see tests/fixtures/README.md), for configurations the shared fixtures
do not cover: other sizes and head counts, padding, label counts, regression, multi-label, other
activations. Needs torch and transformers (the GPU machine has them); runs on the CPU in float64.

    python3 tests/tools/make_fixture.py OUT_DIR

writes OUT_DIR/<name>/{config.json, model.safetensors, reference.json, reference.safetensors}.
"""
import os
import sys

import torch
from transformers import BertConfig, BertForSequenceClassification

from make_family_fixtures import write_reference

CASES = {
    # name: (config overrides, batch, seq_len, padded, label kind)
    "bert-regression-gelu-new": (dict(hidden_size=48, num_attention_heads=3, num_hidden_layers=3,
                                      intermediate_size=80, hidden_act="gelu_new", num_labels=1,
                                      max_position_embeddings=32, vocab_size=300), 3, 10, True, "regression"),
    "bert-multilabel-relu": (dict(hidden_size=64, num_attention_heads=8, num_hidden_layers=1,
                                  intermediate_size=96, hidden_act="relu", num_labels=4, type_vocab_size=3,
                                  problem_type="multi_label_classification", max_position_embeddings=16,
                                  vocab_size=200), 2, 16, True, "multi"),
    "bert-cls5-wide": (dict(hidden_size=96, num_attention_heads=6, num_hidden_layers=2, intermediate_size=200,
                            num_labels=5, layer_norm_eps=1e-5, max_position_embeddings=40, vocab_size=500,
                            initializer_range=0.05), 4, 33, True, "single"),
}


def batch(gen, cfg, B, L, padded, kind):
    ids = torch.randint(1, cfg.vocab_size, (B, L), generator=gen)
    types = torch.randint(0, cfg.type_vocab_size, (B, L), generator=gen)
    mask = torch.ones(B, L, dtype=torch.long)
    if padded:
        for b in range(B):
            keep = L - (b * 3) % (L // 2)  # right padding of a different length per sequence
            mask[b, keep:] = 0
            ids[b, keep:] = cfg.pad_token_id
            types[b, keep:] = 0
    if kind == "single":
        labels = torch.randint(0, cfg.num_labels, (B,), generator=gen)
    elif kind == "regression":
        labels = torch.randn(B, generator=gen, dtype=torch.float64)
    else:
        labels = (torch.rand(B, cfg.num_labels, generator=gen) > 0.5).to(torch.float64)
    return ids, types, mask, labels


def make(name, overrides, B, L, padded, kind, out):
    torch.manual_seed(hash(name) % 2**31)
    gen = torch.Generator().manual_seed(1234)
    cfg = BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **overrides)
    cfg._attn_implementation = "eager"
    model = BertForSequenceClassification(cfg).float()
    with torch.no_grad():  # biases and LayerNorm parameters away from 0/1, so mistakes show
        for n, p in model.named_parameters():
            if n.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
            elif "LayerNorm.weight" in n:
                p.add_(0.1 * torch.randn_like(p))
    d = os.path.join(out, name)
    model.save_pretrained(d)
    batches = [dict(zip(("input_ids", "token_type_ids", "attention_mask", "labels"), batch(gen, cfg, B, L, padded, kind)))
               for _ in range(2)]
    loss = write_reference(model.double(), batches, d, "tests/tools/make_fixture.py")
    print(name, "loss", loss, "problem", model.config.problem_type)


if __name__ == "__main__":
    out = sys.argv[1]
    for name, (overrides, B, L, padded, kind) in CASES.items():
        make(name, overrides, B, L, padded, kind, out)
