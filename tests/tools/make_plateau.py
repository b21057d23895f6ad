"""Makes tests/fixtures/lr-plateau/reference.json: the learning rate of torch's
ReduceLROnPlateau, as transformers' get_scheduler("reduce_lr_on_plateau")
builds it (torch's defaults: mode min, factor 0.1, patience 10, threshold 1e-4
relative, cooldown 0, min_lr 0, eps 1e-8), after each step(metric) of a metric
sequence that improves, stalls, wobbles within the threshold and improves again.

    /tmp/tokvenv/bin/python tests/tools/make_plateau.py   # transformers 5.24, torch
"""
import json
import math
import os

import torch
from transformers import get_scheduler

base_lr = 5e-5
metrics = []
value = 1.0
for i in range(120):
    if i < 15:
        value *= 0.97  # improving
    elif i < 40:
        value *= 1.0 + 0.00005 * math.sin(i)  # within the relative threshold: no improvement
    elif i < 50:
        value *= 0.9  # improving again
    elif i < 90:
        value *= 1.001  # getting worse
    else:
        value *= 1.0 - (0.00002 if i % 2 else 0.002)  # below and above the threshold in turn
    metrics.append(value)

param = torch.nn.Parameter(torch.zeros(1))
optimizer = torch.optim.AdamW([param], lr=base_lr)
scheduler = get_scheduler("reduce_lr_on_plateau", optimizer)
assert isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
rates = []
for m in metrics:
    scheduler.step(m)
    rates.append(optimizer.param_groups[0]["lr"])

out = os.path.join(os.path.dirname(__file__), "..", "fixtures", "lr-plateau", "reference.json")
with open(out, "w") as f:
    json.dump({"transformers": __import__("transformers").__version__, "torch": torch.__version__,
               "base_lr": base_lr, "metrics": metrics, "learning_rates": rates}, f, indent=1)
print("wrote", out, "distinct rates:", sorted(set(rates), reverse=True))
