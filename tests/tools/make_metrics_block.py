"""Prints what transformers' Trainer.log_metrics prints for a fixed set of train
and eval metrics, and _secs2timedelta of a few runtimes: the reference strings
of tests/test_trainer_output.cpp (TrainerOutput.MetricsBlockIsTrainers).

    /tmp/tokvenv/bin/python tests/tools/make_metrics_block.py   # transformers 5.24
"""
from transformers.trainer_pt_utils import _secs2timedelta, log_metrics


class Rank0:
    def is_world_process_zero(self):
        return True


train = {"epoch": 3.0, "train_loss": 0.41234567, "train_runtime": 83.4567, "train_samples": 3668,
         "train_samples_per_second": 131.853, "train_steps_per_second": 4.122}
evaluation = {"epoch": 3.0, "eval_accuracy": 0.8602941176470589, "eval_loss": 0.36, "eval_runtime": 3725.019,
              "eval_samples": 408, "eval_samples_per_second": 1e-05, "eval_steps_per_second": 12.0}
log_metrics(Rank0(), "train", train)
log_metrics(Rank0(), "eval", evaluation)
for s in (0.0, 7.999, 83.4567, 3725.019, 90061.5):
    print(repr(s), _secs2timedelta(s))
