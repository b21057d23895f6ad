#!/usr/bin/env python3
"""hf_trainer.py: one Hugging Face Trainer run of BertForSequenceClassification (or another family's
AutoModelForSequenceClassification, or a token classifier) on the seed's dummy data,
for the benchmarks that put anatomy beside it (`anatomy bench --with-hf`, bench/compare.py).

    python3 bench/hf_trainer.py '{"samples": 512, "batch": 4, "args": {"fp16": true}}'
    python3 bench/hf_trainer.py --check

Settings (a JSON object, the first argument; every key optional):
    samples     dummy sequences (512): ids uniform in [100, 30000), labels 0, as the seed makes them
    seq_len     tokens per sequence (512)
    batch       per_device_train_batch_size (4)
    attn        attn_implementation: "eager", "sdpa", ... (transformers' default when absent)
    config      a BertConfig as a dict (config.json's keys); bert-large-uncased's architecture when absent
    model_type  the family of `config` ("bert" when absent; "roberta", "electra", "distilbert", ...): its
                AutoConfig and AutoModelForSequenceClassification
    task        "sequence-classification" (default), "token-classification" (AutoModelForTokenClassification,
                labels 0 for every token), "question-answering" (AutoModelForQuestionAnswering, start and end
                positions 0) or "masked-lm" (AutoModelForMaskedLM: each batch masked as
                DataCollatorForLanguageModeling masks it, mlm_probability 0.15, mask id 103, random ids from the
                vocabulary; the dummy ids hold no special token) or "multiple-choice" (AutoModelForMultipleChoice:
                each example 4 choices of seq_len tokens, label 0)
    args        TrainingArguments overrides: gradient_accumulation_steps, gradient_checkpointing, fp16, bf16,
                tf32, optim ("adamw_torch", "adafactor", "adamw_bnb_8bit"), max_steps, ...
    output_dir  TrainingArguments' output_dir (/tmp/hf_trainer); nothing is saved there
    device      "cuda" (default) or "cpu" (TrainingArguments' use_cpu)
    seed        42
    step_times  true: also report "step_ms", each optimizer step's time on the GPU's clock (CUDA events recorded at
                every step's end, read after training, so no step waits for them)

It prints one JSON line on stdout, the last line it prints:
    {"status": "ok", "train_runtime": s, "train_samples_per_second": x, "train_steps_per_second": y,
     "global_step": n, "train_loss": l, "gpu_memory_occupied_mb": the seed's reading after training (NVML's used on
     GPU 0, or null), "torch_max_memory_allocated_mb", "torch_max_memory_reserved_mb" (null on the CPU),
     "peak_rss_mb" (the process's peak resident memory), "attn_implementation", "model_class", "parameters",
     "torch", "transformers"}   exit 0
    {"status": "n/a", "reason": "..."}  the technique is not available here (adamw_bnb_8bit without bitsandbytes); exit 0
    {"status": "oom", "error": "..."}   torch.cuda.OutOfMemoryError;                                        exit 3
    {"status": "error", "error": "..."} anything else (the traceback goes to stderr);                       exit 1
--check prints {"status": "ok", "torch", "transformers", "bitsandbytes" (a version or null), "cuda"} when torch and
transformers import and TrainingArguments can be made (exit 0), else {"status": "error", "error": "..."} (exit 1).
"""
import json
import resource
import subprocess
import sys
import traceback

BERT_LARGE = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
EIGHT_BIT = ("adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit")


def emit(result, code=0):
    sys.stdout.flush()
    print(json.dumps(result), flush=True)
    sys.exit(code)


def bitsandbytes_version():
    try:
        import bitsandbytes
        return getattr(bitsandbytes, "__version__", "unknown")
    except Exception:  # ImportError, or a broken install that fails on import
        return None


def gpu_memory_occupied_mb():
    """The seed's print_gpu_utilization(): NVML's memory used on GPU 0, in MiB."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).used // 1024 ** 2
    except Exception:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        return int(out.splitlines()[0])
    except Exception:
        return None


def check():
    try:
        import tempfile
        import torch
        import transformers
        from transformers import TrainingArguments
        with tempfile.TemporaryDirectory() as d:  # what Trainer needs besides (accelerate, for one) is checked here
            TrainingArguments(output_dir=d, report_to="none", use_cpu=not torch.cuda.is_available())
    except Exception as e:
        emit(dict(status="error", error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]), 1)
    emit(dict(status="ok", torch=torch.__version__, transformers=transformers.__version__,
              bitsandbytes=bitsandbytes_version(), cuda=torch.cuda.is_available()))


def train(cfg):
    args_overrides = dict(cfg.get("args", {}))
    if args_overrides.get("optim") in EIGHT_BIT and bitsandbytes_version() is None:
        emit(dict(status="n/a", reason="bitsandbytes is not installed"))

    import numpy as np
    import torch
    import transformers
    from transformers import (AutoConfig, AutoModelForMaskedLM, AutoModelForMultipleChoice, AutoModelForQuestionAnswering,
                              AutoModelForSequenceClassification,
                              AutoModelForTokenClassification, BertConfig, Trainer, TrainingArguments, logging)
    logging.set_verbosity_error()

    seed = cfg.get("seed", 42)
    n, seq_len = cfg.get("samples", 512), cfg.get("seq_len", 512)
    rng = np.random.default_rng(seed)
    ids = torch.from_numpy(rng.integers(100, 30000, (n, seq_len)))
    task = cfg.get("task", "sequence-classification")
    token_task, qa_task, mlm_task = task == "token-classification", task == "question-answering", task == "masked-lm"
    mc_task = task == "multiple-choice"
    if mc_task:  # 4 choices an example, as anatomy's dummy multiple-choice data
        ids = torch.from_numpy(rng.integers(100, 30000, (n, 4, seq_len)))
    labels = torch.zeros((n, seq_len) if token_task else n, dtype=torch.int64)

    class Dummy(torch.utils.data.Dataset):  # the seed's datasets.Dataset, without the datasets package
        def __len__(self):
            return n

        def __getitem__(self, i):
            if qa_task:
                return {"input_ids": ids[i], "start_positions": labels[i], "end_positions": labels[i]}
            if mlm_task:
                return {"input_ids": ids[i]}
            return {"input_ids": ids[i], "labels": labels[i]}

    model_type = cfg.get("model_type", "bert")
    if cfg.get("config") is not None or model_type != "bert":  # another family's defaults, even with no keys
        config = AutoConfig.for_model(model_type, **cfg.get("config", {}))
    else:
        config = BertConfig()
        config.update(BERT_LARGE)
    extra = {"attn_implementation": cfg["attn"]} if cfg.get("attn") else {}
    device = cfg.get("device", "cuda")
    auto = (AutoModelForTokenClassification if token_task else AutoModelForQuestionAnswering if qa_task
            else AutoModelForMaskedLM if mlm_task else AutoModelForMultipleChoice if mc_task
            else AutoModelForSequenceClassification)
    model = auto.from_config(config, **extra).to(device)
    base = dict(use_cpu=device == "cpu", output_dir=cfg.get("output_dir", "/tmp/hf_trainer"), per_device_train_batch_size=cfg.get("batch", 4),
                num_train_epochs=1, report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True,
                dataloader_drop_last=False, seed=seed)
    base.update(args_overrides)
    args = TrainingArguments(**base)
    gpu = device != "cpu"
    events = []

    class StepEnds(transformers.TrainerCallback):
        def on_train_begin(self, *_, **__):
            events.append(torch.cuda.Event(enable_timing=True))
            events[-1].record()

        def on_step_end(self, *_, **__):
            events.append(torch.cuda.Event(enable_timing=True))
            events[-1].record()

    callbacks = [StepEnds()] if cfg.get("step_times") and gpu else []
    def mask_tokens(examples):  # DataCollatorForLanguageModeling.torch_mask_tokens, without a tokenizer
        inputs = torch.stack([e["input_ids"] for e in examples])
        labels = inputs.clone()
        masked = torch.bernoulli(torch.full(labels.shape, 0.15)).bool()
        labels[~masked] = -100
        replaced = torch.bernoulli(torch.full(labels.shape, 0.8)).bool() & masked
        inputs[replaced] = 103
        random = torch.bernoulli(torch.full(labels.shape, 0.5)).bool() & masked & ~replaced
        inputs[random] = torch.randint(config.vocab_size, labels.shape, dtype=torch.long)[random]
        return {"input_ids": inputs, "labels": labels}

    collator = {"data_collator": mask_tokens} if mlm_task else {}
    result = Trainer(model=model, args=args, train_dataset=Dummy(), callbacks=callbacks, **collator).train()
    if gpu:
        torch.cuda.synchronize()
    m = result.metrics
    extra = {"step_ms": [a.elapsed_time(b) for a, b in zip(events, events[1:])]} if callbacks else {}
    emit(dict(status="ok", train_runtime=m["train_runtime"], train_samples_per_second=m["train_samples_per_second"],
              train_steps_per_second=m["train_steps_per_second"], global_step=result.global_step,
              train_loss=result.training_loss, gpu_memory_occupied_mb=gpu_memory_occupied_mb() if gpu else None,
              torch_max_memory_allocated_mb=torch.cuda.max_memory_allocated() / 1024 ** 2 if gpu else None,
              torch_max_memory_reserved_mb=torch.cuda.max_memory_reserved() / 1024 ** 2 if gpu else None,
              peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
              attn_implementation=getattr(model.config, "_attn_implementation", None),
              model_class=type(model).__name__, parameters=sum(p.numel() for p in model.parameters()),
              torch=torch.__version__, transformers=transformers.__version__, **extra))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: hf_trainer.py SETTINGS_JSON | --check")
    if sys.argv[1] == "--check":
        check()
    try:
        cfg = json.loads(sys.argv[1])
        if not isinstance(cfg, dict):
            raise ValueError("the settings must be a JSON object")
    except ValueError as e:
        emit(dict(status="error", error=f"settings: {e}"), 1)
    try:
        train(cfg)
    except SystemExit:
        raise
    except Exception as e:
        traceback.print_exc()
        if type(e).__name__ == "OutOfMemoryError":  # torch.cuda.OutOfMemoryError, from the model's move on
            emit(dict(status="oom", error=str(e).splitlines()[0][:300] if str(e) else "out of memory"), 3)
        emit(dict(status="error", error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]), 1)


if __name__ == "__main__":
    main()
