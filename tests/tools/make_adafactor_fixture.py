#!/usr/bin/env python3
"""make_adafactor_fixture.py: transformers' own Adafactor updates, written to
tests/fixtures/optim/adafactor_steps.txt for tests/test_adafactor.cpp.

The optimizer is the one Hugging Face Trainer builds for optim="adafactor":
transformers.optimization.Adafactor(params, lr=learning_rate,
scale_parameter=False, relative_step=False) with its defaults (eps=(1e-30,
1e-3), clip_threshold=1.0, decay_rate=-0.8, beta1=None, warmup_init=False),
over Trainer's two parameter groups (weight_decay on the first, 0.0 on the
second). Three small float32 tensors stand for a model: a matrix that decays
(factored states), a matrix that does not, and a vector (full state). Seeded
gradients, each row scaled differently so that the factored statistics and
the RMS clipping matter, drive five steps; the learning rate changes every
step as a schedule changes it (each group's 'lr' set before the step).

File format (one record a line, floats as the hex of their float32 bits):
  weight_decay W              the decaying group's weight decay
  lr L1 ... L5                the learning rate of each step (Python repr)
  tensor NAME DECAYS D0 [D1]  the tensors, in order; DECAYS 1 or 0
  param0 H...                 every tensor's initial values, concatenated
  grad H...                   one line a step: every tensor's gradient
  step H...                   one line a step: every tensor after that step
  state H...                  one line a step: every tensor's states after that
                              step (a matrix's exp_avg_sq_row then
                              exp_avg_sq_col, a vector's exp_avg_sq)

Usage: python3 tests/tools/make_adafactor_fixture.py [output path]
"""
import os
import struct
import sys

import torch
import transformers
from transformers.optimization import Adafactor

WEIGHT_DECAY = 0.05
LRS = [0.1, 0.08, 0.06, 0.04, 0.02]
TENSORS = [("encoder.weight", True, (5, 9)), ("pooler.weight", False, (6, 4)), ("encoder.bias", False, (9,))]


def hex_bits(tensors):
    values = torch.cat([t.detach().reshape(-1) for t in tensors]).tolist()
    return " ".join("%08x" % struct.unpack("<I", struct.pack("<f", v))[0] for v in values)


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "fixtures", "optim", "adafactor_steps.txt")
    capability = torch.backends.cpu.get_cpu_capability()
    gen = torch.Generator().manual_seed(20261122)
    param0 = [torch.randn(shape, generator=gen, dtype=torch.float32) for _, _, shape in TENSORS]

    def seeded_grad(shape):
        g = torch.randn(shape, generator=gen, dtype=torch.float32)
        scale = torch.rand(shape[:1], generator=gen, dtype=torch.float32) * 4 + 0.25
        return g * scale.reshape((-1,) + (1,) * (len(shape) - 1))

    grads = [[seeded_grad(shape) for _, _, shape in TENSORS] for _ in LRS]

    lines = [
        "# transformers.optimization.Adafactor as Trainer builds it (scale_parameter=False, relative_step=False),",
        "# 3 tensors in Trainer's two weight-decay groups, %d steps; made by tests/tools/make_adafactor_fixture.py"
        % len(LRS),
        "# with transformers %s, torch %s, CPU capability %s" % (transformers.__version__, torch.__version__,
                                                                 capability),
        "weight_decay %r" % WEIGHT_DECAY,
        "lr " + " ".join(repr(lr) for lr in LRS),
    ]
    for (name, decays, shape) in TENSORS:
        lines.append("tensor %s %d %s" % (name, int(decays), " ".join(str(d) for d in shape)))
    lines.append("param0 " + hex_bits(param0))
    for step_grads in grads:
        lines.append("grad " + hex_bits(step_grads))

    params = [torch.nn.Parameter(p.clone()) for p in param0]
    decaying = [p for p, (_, decays, _) in zip(params, TENSORS) if decays]
    not_decaying = [p for p, (_, decays, _) in zip(params, TENSORS) if not decays]
    optimizer = Adafactor(
        [{"params": decaying, "weight_decay": WEIGHT_DECAY}, {"params": not_decaying, "weight_decay": 0.0}],
        lr=LRS[0], scale_parameter=False, relative_step=False)
    for lr, step_grads in zip(LRS, grads):
        for group in optimizer.param_groups:
            group["lr"] = lr
        for p, g in zip(params, step_grads):
            p.grad = g.clone()
        optimizer.step()
        lines.append("step " + hex_bits(params))
        states = []
        for p in params:
            s = optimizer.state[p]
            states += [s["exp_avg_sq_row"], s["exp_avg_sq_col"]] if p.dim() >= 2 else [s["exp_avg_sq"]]
        lines.append("state " + hex_bits(states))

    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", out_path)


if __name__ == "__main__":
    main()
