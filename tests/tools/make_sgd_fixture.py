#!/usr/bin/env python3
"""make_sgd_fixture.py: torch.optim.SGD's own updates, written to
tests/fixtures/optim/sgd_steps.txt for tests/test_sgd.cpp.

Three small float32 tensors stand for a model: two weight matrices that decay
and a bias that does not, in two parameter groups as Hugging Face Trainer
builds them (weight_decay on the first group, 0.0 on the second). Seeded
gradients drive five steps, the learning rate changing every step as a
schedule changes it (each group's 'lr' set before the step), for four
configurations: no momentum; momentum 0.9; momentum 0.9 with dampening 0.1;
Nesterov momentum 0.9. foreach=False: torch's single-tensor loop, the one
anatomy follows. The sizes are odd so torch's vectorized loop and its scalar
tail both run.

Run it where torch dispatches to AVX2 or AVX-512 (any current x86-64): there
each `x.add(y, alpha=a)` is one fused multiply-add, as on CUDA and in anatomy's
kernels, so tests/test_sgd.cpp compares bit for bit. (ATEN_CPU_CAPABILITY=default
rounds the product and the sum apart and gives other bits; the script refuses it.)

File format (one record a line, floats as the hex of their float32 bits):
  weight_decay W              the decaying group's weight decay
  lr L1 ... L5                the learning rate of each step (Python repr)
  tensor NAME DECAYS D0 [D1]  the tensors, in order; DECAYS 1 or 0
  param0 H...                 every tensor's initial values, concatenated
  grad H...                   one line a step: every tensor's gradient
  config MOMENTUM DAMPENING NESTEROV
  step H...                   one line a step: every tensor after that step

Usage: python3 tests/tools/make_sgd_fixture.py [output path]
"""
import os
import struct
import sys

import torch

WEIGHT_DECAY = 0.01
LRS = [0.1, 0.08, 0.06, 0.04, 0.02]
TENSORS = [("encoder.weight", True, (4, 9)), ("encoder.bias", False, (9,)), ("classifier.weight", True, (3, 7))]
CONFIGS = [(0.0, 0.0, False), (0.9, 0.0, False), (0.9, 0.1, False), (0.9, 0.0, True)]


def hex_bits(tensors):
    values = torch.cat([t.detach().reshape(-1) for t in tensors]).tolist()
    return " ".join("%08x" % struct.unpack("<I", struct.pack("<f", v))[0] for v in values)


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "fixtures", "optim", "sgd_steps.txt")
    capability = torch.backends.cpu.get_cpu_capability()
    if capability not in ("AVX2", "AVX512"):
        sys.exit("make_sgd_fixture.py: torch dispatches to %s here; the fixture needs AVX2 or AVX512" % capability)
    gen = torch.Generator().manual_seed(20261122)
    param0 = [torch.randn(shape, generator=gen, dtype=torch.float32) for _, _, shape in TENSORS]
    grads = [[torch.randn(shape, generator=gen, dtype=torch.float32) for _, _, shape in TENSORS] for _ in LRS]

    lines = [
        "# torch.optim.SGD(foreach=False) over 3 tensors in Trainer's two weight-decay groups, %d steps;" % len(LRS),
        "# made by tests/tools/make_sgd_fixture.py with torch %s, CPU capability %s" % (torch.__version__, capability),
        "weight_decay %r" % WEIGHT_DECAY,
        "lr " + " ".join(repr(lr) for lr in LRS),
    ]
    for (name, decays, shape) in TENSORS:
        lines.append("tensor %s %d %s" % (name, int(decays), " ".join(str(d) for d in shape)))
    lines.append("param0 " + hex_bits(param0))
    for step_grads in grads:
        lines.append("grad " + hex_bits(step_grads))

    for momentum, dampening, nesterov in CONFIGS:
        params = [torch.nn.Parameter(p.clone()) for p in param0]
        decaying = [p for p, (_, decays, _) in zip(params, TENSORS) if decays]
        not_decaying = [p for p, (_, decays, _) in zip(params, TENSORS) if not decays]
        optimizer = torch.optim.SGD(
            [{"params": decaying, "weight_decay": WEIGHT_DECAY}, {"params": not_decaying, "weight_decay": 0.0}],
            lr=LRS[0], momentum=momentum, dampening=dampening, nesterov=nesterov, foreach=False)
        lines.append("config %r %r %d" % (momentum, dampening, int(nesterov)))
        for lr, step_grads in zip(LRS, grads):
            for group in optimizer.param_groups:
                group["lr"] = lr
            for p, g in zip(params, step_grads):
                p.grad = g.clone()
            optimizer.step()
            lines.append("step " + hex_bits(params))

    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", out_path)


if __name__ == "__main__":
    main()
