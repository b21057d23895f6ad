#!/usr/bin/env python3
"""make_family_fixtures.py: reference fixtures for the model families other than BERT (RoBERTa,
XLM-RoBERTa, ELECTRA, DistilBERT, ModernBERT, DeBERTa-v3) and for the token classification and question answering
heads and the masked-LM heads, made with Hugging Face transformers in the format of
tests/fixtures/bert-tiny-cls (tests/fixtures/README.md): tiny random configurations, dropout 0,
float32 weights saved with save_pretrained, the reference computed in float64 on the CPU — logits,
loss, every gradient, 10 AdamW steps and the parameters after them.

    python3 tests/tools/make_family_fixtures.py OUT_DIR [NAME ...]

Needs torch and transformers (the GPU machine has them). The batches carry only the inputs the
model's forward takes (DistilBERT has no token_type_ids).
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import (DebertaV2Config, DebertaV2ForSequenceClassification, DebertaV2ForTokenClassification,
                          BertConfig, BertForMaskedLM, BertForMultipleChoice, DistilBertForMultipleChoice,
                          RobertaForMultipleChoice, BertForQuestionAnswering, DistilBertForMaskedLM,
                          ElectraForMaskedLM, RobertaForMaskedLM, BertForTokenClassification, DistilBertConfig,
                          DistilBertForQuestionAnswering, DistilBertForSequenceClassification,
                          DistilBertForTokenClassification, ElectraConfig, ElectraForQuestionAnswering,
                          ElectraForSequenceClassification, ElectraForTokenClassification, ModernBertConfig,
                          ModernBertForSequenceClassification, RobertaConfig, RobertaForQuestionAnswering,
                          RobertaForSequenceClassification, RobertaForTokenClassification, XLMRobertaConfig,
                          XLMRobertaForSequenceClassification)

NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)

CASES = {
    # name: (config class, model class, config overrides, batch, seq_len, label kind, token types)
    "roberta-tiny-padded": (RobertaConfig, RobertaForSequenceClassification,
                            dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=96,
                                 vocab_size=300, max_position_embeddings=24, type_vocab_size=1, layer_norm_eps=1e-5,
                                 num_labels=3, **NO_DROPOUT), 3, 12, "single", 1),
    "xlm-roberta-regression": (XLMRobertaConfig, XLMRobertaForSequenceClassification,
                               dict(hidden_size=48, num_attention_heads=3, num_hidden_layers=3, intermediate_size=80,
                                    vocab_size=250, max_position_embeddings=20, type_vocab_size=2, num_labels=1,
                                    hidden_act="gelu_new", **NO_DROPOUT), 2, 16, "regression", 2),
    "electra-tiny-padded": (ElectraConfig, ElectraForSequenceClassification,
                            dict(embedding_size=32, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                                 intermediate_size=80, vocab_size=300, max_position_embeddings=32, num_labels=2,
                                 **NO_DROPOUT), 3, 14, "single", 2),
    "distilbert-tiny-multilabel": (DistilBertConfig, DistilBertForSequenceClassification,
                                   dict(dim=64, n_heads=4, n_layers=2, hidden_dim=96, vocab_size=300,
                                        max_position_embeddings=32, num_labels=4, dropout=0.0, attention_dropout=0.0,
                                        seq_classif_dropout=0.0, problem_type="multi_label_classification"),
                                   2, 16, "multi", 0),
    # ModernBERT: layer 0 global, layers 1 and 2 local (a window of ±6 over 20 tokens), no biases. The padding
    # (up to 6 tokens) stays within the window: a padding query whose window holds only padding keys gives
    # Hugging Face NaN rows (every score masked), which reach the real rows as 0 · NaN.
    "modernbert-tiny-padded": (ModernBertConfig, ModernBertForSequenceClassification,
                               dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=3, intermediate_size=48,
                                    vocab_size=300, max_position_embeddings=64, local_attention=12,
                                    global_attn_every_n_layers=3, pad_token_id=0, bos_token_id=1, cls_token_id=1,
                                    eos_token_id=2, sep_token_id=2, num_labels=3), 3, 20, "single", 0),
    # ModernBERT at head size 64 (one head: the GPU's fused attention, windowed on the local layer 1): a window of ±8
    # over 80 tokens, two key tiles of 64 with the window's edge inside them; padding within the window.
    "modernbert-head64": (ModernBertConfig, ModernBertForSequenceClassification,
                          dict(hidden_size=64, num_attention_heads=1, num_hidden_layers=2, intermediate_size=64,
                               vocab_size=100, max_position_embeddings=128, local_attention=16,
                               global_attn_every_n_layers=2, pad_token_id=0, bos_token_id=1, cls_token_id=1,
                               eos_token_id=2, sep_token_id=2, num_labels=2),
                          3, 80, "single", 0),
    # every bias on, gelu_pytorch_tanh, other thetas. (As a regression task this configuration's tenth-step
    # losses were ill-conditioned: PyTorch's own float32 run missed its float64 reference by 2.3e-5 at step 9.)
    "modernbert-biases": (ModernBertConfig, ModernBertForSequenceClassification,
                                     dict(hidden_size=48, num_attention_heads=2, num_hidden_layers=2,
                                          intermediate_size=40, vocab_size=250, max_position_embeddings=64,
                                          local_attention=6, global_attn_every_n_layers=2, pad_token_id=0,
                                          bos_token_id=1, cls_token_id=1, eos_token_id=2, sep_token_id=2,
                                          norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True,
                                          hidden_activation="gelu_pytorch_tanh", global_rope_theta=50000.0,
                                          local_rope_theta=5000.0, num_labels=4), 2, 18, "single", 0),
    # DeBERTa-v3 (deberta-v2): disentangled attention with both terms over log buckets (8 buckets, distances
    # past ±4 grow logarithmically to 16, and the 20 tokens reach past it into the clamp), the relative
    # embeddings LayerNorm'd, no position table, no token types.
    "deberta-tiny-padded": (DebertaV2Config, DebertaV2ForSequenceClassification,
                            dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=96,
                                 vocab_size=300, max_position_embeddings=32, relative_attention=True,
                                 position_buckets=8, max_relative_positions=16, pos_att_type="p2c|c2p",
                                 norm_rel_ebd="layer_norm", share_att_key=True, position_biased_input=False,
                                 type_vocab_size=0, pooler_hidden_size=64, pooler_dropout=0.0, num_labels=3,
                                 **NO_DROPOUT), 3, 20, "single", 0),
    # content-to-position only, plain distances clamped at ±6, the table not normalised, token types, regression.
    "deberta-c2p-regression": (DebertaV2Config, DebertaV2ForSequenceClassification,
                               dict(hidden_size=48, num_attention_heads=2, num_hidden_layers=2, intermediate_size=80,
                                    vocab_size=250, max_position_embeddings=24, relative_attention=True,
                                    position_buckets=-1, max_relative_positions=6, pos_att_type=["c2p"],
                                    norm_rel_ebd="none", share_att_key=True, position_biased_input=False,
                                    type_vocab_size=2, pooler_hidden_size=48, num_labels=1, hidden_act="gelu_new",
                                    **NO_DROPOUT), 2, 14, "regression", 2),
    "deberta-tiny-token": (DebertaV2Config, DebertaV2ForTokenClassification,
                           dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=96,
                                vocab_size=300, max_position_embeddings=32, relative_attention=True,
                                position_buckets=8, max_relative_positions=16, pos_att_type="p2c|c2p",
                                norm_rel_ebd="layer_norm", share_att_key=True, position_biased_input=False,
                                type_vocab_size=0, pooler_hidden_size=64, num_labels=5, **NO_DROPOUT),
                           2, 18, "token", 0),
    # Token classification (*ForTokenClassification): a label per token, -100 on padding and on some real tokens
    # (the word pieces after a word's first, as run_ner labels them).
    "bert-tiny-token": (BertConfig, BertForTokenClassification,
                        dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=96,
                             vocab_size=300, max_position_embeddings=32, num_labels=5, **NO_DROPOUT),
                        3, 14, "token", 2),
    "roberta-tiny-token": (RobertaConfig, RobertaForTokenClassification,
                           dict(hidden_size=48, num_attention_heads=3, num_hidden_layers=2, intermediate_size=80,
                                vocab_size=280, max_position_embeddings=24, type_vocab_size=1, layer_norm_eps=1e-5,
                                num_labels=7, **NO_DROPOUT), 2, 16, "token", 1),
    "electra-tiny-token": (ElectraConfig, ElectraForTokenClassification,
                           dict(embedding_size=32, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                                intermediate_size=80, vocab_size=300, max_position_embeddings=32, num_labels=4,
                                **NO_DROPOUT), 3, 12, "token", 2),
    "distilbert-tiny-token": (DistilBertConfig, DistilBertForTokenClassification,
                              dict(dim=64, n_heads=4, n_layers=2, hidden_dim=96, vocab_size=300,
                                   max_position_embeddings=32, num_labels=9, dropout=0.0, attention_dropout=0.0),
                              2, 18, "token", 0),
    # Question answering (*ForQuestionAnswering): start and end positions within each sequence's real tokens.
    "bert-tiny-qa": (BertConfig, BertForQuestionAnswering,
                     dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=96,
                          vocab_size=300, max_position_embeddings=32, **NO_DROPOUT), 3, 16, "qa", 2),
    "roberta-tiny-qa": (RobertaConfig, RobertaForQuestionAnswering,
                        dict(hidden_size=48, num_attention_heads=3, num_hidden_layers=2, intermediate_size=80,
                             vocab_size=280, max_position_embeddings=24, type_vocab_size=1, layer_norm_eps=1e-5,
                             **NO_DROPOUT), 3, 14, "qa", 1),
    "electra-tiny-qa": (ElectraConfig, ElectraForQuestionAnswering,
                        dict(embedding_size=32, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                             intermediate_size=80, vocab_size=300, max_position_embeddings=32, **NO_DROPOUT),
                        2, 12, "qa", 2),
    "distilbert-tiny-qa": (DistilBertConfig, DistilBertForQuestionAnswering,
                           dict(dim=64, n_heads=4, n_layers=2, hidden_dim=96, vocab_size=300,
                                max_position_embeddings=32, dropout=0.0, attention_dropout=0.0, qa_dropout=0.0),
                           3, 16, "qa", 0),
    # Masked-LM (*ForMaskedLM, the decoder tied to the word embeddings): labels on about 15% of the real tokens
    # (any id of the vocabulary), -100 elsewhere. ELECTRA's is the generator's head (hidden -> embedding width).
    "bert-tiny-mlm": (BertConfig, BertForMaskedLM,
                      dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=96,
                           vocab_size=300, max_position_embeddings=32, **NO_DROPOUT), 3, 14, "mlm", 2),
    "roberta-tiny-mlm": (RobertaConfig, RobertaForMaskedLM,
                         dict(hidden_size=48, num_attention_heads=3, num_hidden_layers=2, intermediate_size=80,
                              vocab_size=280, max_position_embeddings=24, type_vocab_size=1, layer_norm_eps=1e-5,
                              **NO_DROPOUT), 2, 16, "mlm", 1),
    "electra-tiny-mlm": (ElectraConfig, ElectraForMaskedLM,
                         dict(embedding_size=32, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                              intermediate_size=80, vocab_size=300, max_position_embeddings=32, hidden_act="gelu_new",
                              **NO_DROPOUT), 3, 12, "mlm", 2),
    "distilbert-tiny-mlm": (DistilBertConfig, DistilBertForMaskedLM,
                            dict(dim=64, n_heads=4, n_layers=2, hidden_dim=96, vocab_size=300,
                                 max_position_embeddings=32, dropout=0.0, attention_dropout=0.0, activation="relu"),
                            2, 18, "mlm", 0),
    # Multiple choice (*ForMultipleChoice): input_ids [B, 3 choices, L], one label per example in [0, 3).
    "bert-tiny-mc": (BertConfig, BertForMultipleChoice,
                     dict(hidden_size=32, num_attention_heads=2, num_hidden_layers=2, intermediate_size=48,
                          vocab_size=120, max_position_embeddings=24, **NO_DROPOUT), 3, 12, "mc", 2),
    "roberta-tiny-mc": (RobertaConfig, RobertaForMultipleChoice,
                        dict(hidden_size=32, num_attention_heads=2, num_hidden_layers=2, intermediate_size=48,
                             vocab_size=120, max_position_embeddings=20, type_vocab_size=1, layer_norm_eps=1e-5,
                             **NO_DROPOUT), 2, 14, "mc", 1),
    "distilbert-tiny-mc": (DistilBertConfig, DistilBertForMultipleChoice,
                           dict(dim=32, n_heads=2, n_layers=2, hidden_dim=48, vocab_size=120,
                                max_position_embeddings=24, dropout=0.0, attention_dropout=0.0,
                                seq_classif_dropout=0.0), 3, 10, "mc", 0),
}

CHOICES = 3


def make_batch(gen, cfg, B, L, kind, type_vocab, first):
    if kind == "mc":  # each example's choices as rows, then [B, choices, L]
        rows = make_batch(gen, cfg, B * CHOICES, L, "none", type_vocab, first)
        batch = {k: v.reshape(B, CHOICES, L) for k, v in rows.items()}
        batch["labels"] = torch.randint(0, CHOICES, (B,), generator=gen)
        return batch
    pad = cfg.pad_token_id
    low = max(pad, 2) + 1
    ids = torch.randint(low, cfg.vocab_size, (B, L), generator=gen)
    mask = torch.ones(B, L, dtype=torch.long)
    for b in range(B):
        keep = L - (b * 3) % (L // 2)  # right padding of a different length per sequence
        mask[b, keep:] = 0
        ids[b, keep:] = pad
    if first:
        ids[0, 3] = pad  # a padding id among real tokens: RoBERTa's positions skip it, as Hugging Face's do
    batch = {"input_ids": ids, "attention_mask": mask}
    if type_vocab > 0:
        types = torch.randint(0, type_vocab, (B, L), generator=gen)
        types[mask == 0] = 0
        batch["token_type_ids"] = types
    if kind == "qa":
        lengths = mask.sum(1)
        starts = torch.stack([torch.randint(0, int(n), (1,), generator=gen)[0] for n in lengths])
        ends = torch.stack([torch.randint(int(st), int(n), (1,), generator=gen)[0] for st, n in zip(starts, lengths)])
        batch["start_positions"], batch["end_positions"] = starts, ends
    elif kind == "none":
        pass
    elif kind == "mlm":
        labels = torch.randint(0, cfg.vocab_size, (B, L), generator=gen)
        labels[torch.rand(B, L, generator=gen) >= 0.15] = -100
        labels[mask == 0] = -100
        labels[0, 1] = int(ids[0, 1])  # at least one masked token
        batch["labels"] = labels
    elif kind == "token":
        labels = torch.randint(0, cfg.num_labels, (B, L), generator=gen)
        labels[torch.rand(B, L, generator=gen) < 0.25] = -100
        labels[mask == 0] = -100
        batch["labels"] = labels
    elif kind == "single":
        batch["labels"] = torch.randint(0, cfg.num_labels, (B,), generator=gen)
    elif kind == "regression":
        batch["labels"] = torch.randn(B, generator=gen, dtype=torch.float64)
    else:
        batch["labels"] = (torch.rand(B, cfg.num_labels, generator=gen) > 0.5).to(torch.float64)
    return batch


def no_decay_names(model):
    names = set()
    for module_name, module in model.named_modules():
        for param_name, _ in module.named_parameters(recurse=False):
            full = f"{module_name}.{param_name}" if module_name else param_name
            if isinstance(module, torch.nn.LayerNorm) or param_name == "bias":
                names.add(full)
    return names


def make(name, config_class, model_class, overrides, B, L, kind, type_vocab, out):
    torch.manual_seed(sum(map(ord, name)))
    gen = torch.Generator().manual_seed(1234)
    cfg = config_class(**overrides)
    cfg._attn_implementation = "eager"
    model = model_class(cfg).float()
    with torch.no_grad():  # biases and LayerNorm parameters away from 0/1, so mistakes show
        for n, p in model.named_parameters():
            if n.endswith("bias") or ("norm" in n.lower() and n.endswith("weight")):
                p.add_(0.1 * torch.randn_like(p))
    d = os.path.join(out, name)
    model.save_pretrained(d)
    batches = [make_batch(gen, cfg, B, L, kind, type_vocab, i == 0) for i in range(2)]
    loss = write_reference(model.double(), batches, d, "tests/tools/make_family_fixtures.py")
    print(name, "loss", loss, "problem", model.config.problem_type)


def write_reference(model, batches, d, script):
    """The float64 reference of `model` (already float64) on `batches` (two dicts of its forward's keyword
    arguments, labels included) into d/reference.safetensors and d/reference.json: the batches, batch 0's
    logits, loss and gradients, 10 AdamW steps (step i on batch i % 2) and the parameters after them.
    Returns batch 0's loss."""
    tensors = {}
    for i, suffix in enumerate(["", "_1"]):
        for key, value in batches[i].items():
            tensors[key + suffix] = value
    out0 = model(**batches[0])
    out0.loss.backward()
    if hasattr(out0, "start_logits"):  # question answering: also as one [2, B, L] tensor, the engine's layout
        tensors["start_logits"] = out0.start_logits.detach()
        tensors["end_logits"] = out0.end_logits.detach()
        tensors["logits"] = torch.stack([out0.start_logits, out0.end_logits]).detach()
    else:
        tensors["logits"] = out0.logits.detach()
    tensors["loss"] = out0.loss.detach().reshape(1)
    for n, p in model.named_parameters():
        tensors["grad." + n] = p.grad.detach().clone()
    model.zero_grad()
    skip = no_decay_names(model)
    decay = [p for n, p in model.named_parameters() if n not in skip]
    no_decay = [p for n, p in model.named_parameters() if n in skip]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    losses = []
    for step in range(10):
        opt.zero_grad()
        loss = model(**batches[step % 2]).loss
        losses.append(loss.item())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    tensors["train_losses"] = torch.tensor(losses, dtype=torch.float64)
    for n, p in model.named_parameters():
        tensors["after." + n] = p.detach().clone()
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(d, "reference.safetensors"))
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump({"description": f"float64 CPU reference from transformers {type(model).__name__}, dropout 0, "
                                  f"made by {script}",
                   "optimizer": "AdamW, lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01 on all weights "
                                "except biases and LayerNorm params, no lr schedule",
                   "grad_clip_max_norm": 1.0, "steps": 10,
                   "batch_schedule": "step i uses batch i % 2 (suffix '' then '_1')",
                   "loss": model.config.problem_type, "train_losses": losses}, f, indent=1)
    return out0.loss.item()


if __name__ == "__main__":
    out = sys.argv[1]
    only = sys.argv[2:]  # names to make (default: every case)
    for name, case in CASES.items():
        if not only or name in only:
            make(name, *case, out)
