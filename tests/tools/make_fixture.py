#!/usr/bin/env python3
"""make_fixture.py: builds reference fixtures with Hugging Face transformers, in the format of
tests/fixtures/bert-tiny-cls (see tests/fixtures/README.md), for configurations the shared fixtures
do not cover: other sizes and head counts, padding, label counts, regression, multi-label, other
activations. Needs torch and transformers (the GPU machine has them); runs on the CPU in float64.

    python3 tests/tools/make_fixture.py OUT_DIR

writes OUT_DIR/<name>/{config.json, model.safetensors, reference.json, reference.safetensors}.
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import BertConfig, BertForSequenceClassification

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
    model = model.double()
    batches = [batch(gen, cfg, B, L, padded, kind) for _ in range(2)]

    def run(b):
        ids, types, mask, labels = batches[b]
        return model(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=labels)

    tensors = {}
    for i, suffix in enumerate(["", "_1"]):
        ids, types, mask, labels = batches[i]
        tensors["input_ids" + suffix] = ids
        tensors["token_type_ids" + suffix] = types
        tensors["attention_mask" + suffix] = mask
        tensors["labels" + suffix] = labels
    out0 = run(0)
    out0.loss.backward()
    tensors["logits"] = out0.logits.detach()
    tensors["loss"] = out0.loss.detach().reshape(1)
    for n, p in model.named_parameters():
        tensors["grad." + n] = p.grad.detach().clone()
    model.zero_grad()
    decay = [p for n, p in model.named_parameters() if not ("bias" in n or "LayerNorm" in n)]
    no_decay = [p for n, p in model.named_parameters() if "bias" in n or "LayerNorm" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    losses = []
    for step in range(10):
        opt.zero_grad()
        loss = run(step % 2).loss
        losses.append(loss.item())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    tensors["train_losses"] = torch.tensor(losses, dtype=torch.float64)
    for n, p in model.named_parameters():
        tensors["after." + n] = p.detach().clone()
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(d, "reference.safetensors"))
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump({"description": "float64 CPU reference from transformers BertForSequenceClassification, "
                                  "dropout 0, made by tests/tools/make_fixture.py",
                   "optimizer": "AdamW, lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01 on all weights "
                                "except biases and LayerNorm params, no lr schedule",
                   "grad_clip_max_norm": 1.0, "steps": 10,
                   "batch_schedule": "step i uses batch i % 2 (suffix '' then '_1')",
                   "loss": model.config.problem_type, "train_losses": losses}, f, indent=1)
    print(name, "loss", out0.loss.item(), "problem", model.config.problem_type)


if __name__ == "__main__":
    out = sys.argv[1]
    for name, (overrides, B, L, padded, kind) in CASES.items():
        make(name, overrides, B, L, padded, kind, out)
