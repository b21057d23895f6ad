"""Makes tests/fixtures/label-smoothing/reference.json: logits, labels (some
-100), and the loss and d loss / d logits of transformers' LabelSmoother
(Trainer's --label_smoothing_factor) computed by torch autograd in float64 (its formula
written out: LabelSmoother sums in float32; the script checks it agrees to that rounding), for
the shapes the engine smooths: sequence classification [B, C], token
classification [B, L, C] and multiple choice [B, choices].

    /tmp/tokvenv/bin/python tests/tools/make_label_smoothing.py   # transformers 5.24, torch
"""
import json
import os

import torch
from transformers.trainer_pt_utils import LabelSmoother

torch.manual_seed(36)
cases = []
for name, shape, classes, epsilon in [
    ("sequence", (6,), 3, 0.1),
    ("sequence-wide", (4,), 40, 0.25),
    ("token", (2, 5), 7, 0.1),
    ("choice", (3,), 4, 0.2),
]:
    logits = torch.randn(*shape, classes, dtype=torch.float64) * 2
    labels = torch.randint(0, classes, shape)
    flat = labels.view(-1)
    flat[1] = -100  # an ignored row
    if flat.numel() > 6:
        flat[6] = -100
    cases.append({
        "name": name,
        "epsilon": epsilon,
        "classes": classes,
        "logits": [float(v) for v in logits.view(-1).float()],  # rounded to float32 ...
        "labels": [int(v) for v in labels.view(-1)],
    })
    # ... and the reference computed from those values in float64 (LabelSmoother reads model_output["logits"]).
    # LabelSmoother sums each row's -log_softmax in float32 (sum(..., dtype=torch.float32)) even from
    # float64 logits, so the float64 reference is its formula written out; LabelSmoother itself must agree
    # to float32's rounding.
    x = torch.tensor(cases[-1]["logits"], dtype=torch.float64).view(*shape, classes).requires_grad_()
    neg = -torch.log_softmax(x, dim=-1)
    active = labels != -100
    n = int(active.sum())
    nll = neg.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)[active].sum() / n
    smooth = neg.sum(dim=-1)[active].sum() / (n * classes)
    loss = (1 - epsilon) * nll + epsilon * smooth
    theirs = LabelSmoother(epsilon=epsilon)({"logits": x.detach()}, labels).item()
    assert abs(theirs - loss.item()) <= 1e-6 * abs(loss.item()), (name, theirs, loss.item())
    loss.backward()
    cases[-1]["loss"] = loss.item()
    cases[-1]["grad"] = [float(v) for v in x.grad.view(-1)]

out = os.path.join(os.path.dirname(__file__), "..", "fixtures", "label-smoothing", "reference.json")
with open(out, "w") as f:
    json.dump({"transformers": __import__("transformers").__version__, "torch": torch.__version__, "cases": cases},
              f, indent=1)
print("wrote", out)
