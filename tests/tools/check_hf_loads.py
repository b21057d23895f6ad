#!/usr/bin/env python3
"""check_hf_loads.py: a directory written by `anatomy train --output-dir` loads in Hugging Face
transformers, and HF's logits on a batch equal the logits `anatomy forward` wrote for it.

    python3 tests/tools/check_hf_loads.py MODEL_DIR INPUTS.safetensors ANATOMY_OUTPUT.safetensors
"""
import sys

import torch
from safetensors.torch import load_file
from transformers import BertForSequenceClassification

model_dir, inputs_path, ours_path = sys.argv[1:4]
model = BertForSequenceClassification.from_pretrained(model_dir, attn_implementation="eager").double().eval()
inputs = load_file(inputs_path)
with torch.no_grad():
    theirs = model(input_ids=inputs["input_ids"], token_type_ids=inputs.get("token_type_ids"),
                   attention_mask=inputs.get("attention_mask")).logits
ours = load_file(ours_path)["logits"].double()
err = ((ours - theirs).norm() / theirs.norm()).item()
print(f"HF loaded {model_dir}: {sum(p.numel() for p in model.parameters())} parameters; "
      f"logits relative error vs anatomy forward: {err:.2e}")
sys.exit(0 if err < 1e-5 else 1)
