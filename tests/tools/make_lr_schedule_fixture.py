#!/usr/bin/env python3
"""make_lr_schedule_fixture.py: writes tests/fixtures/lr-schedules/schedules.json, the learning rate of every
step of transformers' get_scheduler schedules (the names --lr-scheduler-type takes, with get_scheduler's default
keyword arguments), for 1000-step runs with and without warmup, as Trainer reads them: the rate of optimizer
step k is scheduler.get_last_lr()[0] after k scheduler steps.

    /tmp/tokvenv/bin/python tests/tools/make_lr_schedule_fixture.py
"""
import json
import math
import os

import torch
import transformers
from transformers import get_scheduler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ["linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
         "inverse_sqrt"]
RUNS = [(5e-5, 1000, 100), (3e-4, 1000, 0), (2e-5, 997, 61)]  # (learning rate, steps, warmup steps)


def main():
    cases = []
    for name in NAMES:
        for lr, total, warmup in RUNS:
            param = torch.nn.Parameter(torch.zeros(1))
            opt = torch.optim.SGD([param], lr=lr)
            sched = get_scheduler(name, opt, num_warmup_steps=warmup, num_training_steps=total)
            rates = []
            for _ in range(total):
                rates.append(sched.get_last_lr()[0])
                opt.step()
                sched.step()
            cases.append({"name": name, "learning_rate": lr, "total_steps": total, "warmup_steps": warmup,
                          "rates": rates})
    # TrainingArguments.get_warmup_steps: a warmup_steps below 1 is a ratio, rounded up.
    ratios = [{"warmup": w, "total_steps": t,
               "warmup_steps": int(w) if w >= 1 else math.ceil(t * w)} for w, t in
              [(0.1, 1000), (0.06, 997), (0.5, 3), (0.0, 10), (0.999, 7)]]
    out = os.path.join(ROOT, "fixtures", "lr-schedules", "schedules.json")
    with open(out, "w") as f:
        json.dump({"made_with": f"transformers {transformers.__version__}, torch {torch.__version__}",
                   "schedules": cases, "warmup_ratios": ratios}, f)
        f.write("\n")
    print(f"{len(cases)} schedules written to {out}")


if __name__ == "__main__":
    main()
