// arguments.h: training arguments, named after Hugging Face TrainingArguments
// (the CLI spells them in kebab case: --per-device-train-batch-size, ...).
#pragma once

#include <cstdint>
#include <string>

#include "anatomy/optim/optimizer.h"

namespace anatomy {

struct TrainingArguments {
  std::string model = "bert-large-uncased";  // directory with config.json, or a preset
  std::string task;                          // model/tasks.h; empty: the model's config.json architectures
  std::string dataset = "dummy";             // "dummy" or empty when train_file is given
  std::string train_file;                    // pre-tokenized safetensors, or text: .jsonl, .json, .csv, .tsv
  // Text data: the columns, the tokenizer and the length (train/training_data.h).
  std::string text_column = "text";
  std::string text_pair_column;              // empty: single texts
  std::string label_column = "label";
  std::string vocab;                         // vocab.txt; empty: the model directory's
  std::string do_lower_case;                 // "true" or "false"; empty: the model's tokenizer_config.json, else true
  int64_t max_seq_length = 128;              // run_glue's default; truncation longest_first
  bool label_all_tokens = false;             // token classification: every piece of a word labelled
  int64_t doc_stride = 128;                  // question answering: context tokens shared by consecutive windows
  double mlm_probability = 0.15;             // masked-LM: the chance a token is chosen (run_mlm's)
  bool line_by_line = false;                 // masked-LM text: one example per line, not blocks
  int64_t mask_token_id = -1;                // masked-LM without a tokenizer: the mask id (-1: the tokenizer's, or 103)
  bool group_by_length = false;              // batches of similar lengths (LengthGroupedSampler)
  int64_t dummy_size = 512;                  // the seed's 512 sequences
  int64_t dummy_seq_len = 512;               // of 512 tokens
  int64_t per_device_train_batch_size = 4;   // the seed's batch size
  int64_t gradient_accumulation_steps = 1;   // batches per optimizer update
  bool gradient_checkpointing = false;       // keep only each layer's output; recompute the layer in backward
  std::string gradient_checkpointing_policy = "full";  // or "selective": recompute attention internals and the GELU input
  double num_train_epochs = 1.0;             // the seed trains one epoch (Hugging Face's default is 3)
  int64_t max_steps = -1;                    // > 0 overrides the epochs
  double learning_rate = 5e-5;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  std::string optim = "adamw";               // adamw, adamw_8bit, sgd, adafactor
  std::string optim_args;                    // Hugging Face's optim_args: "momentum=0.9,nesterov=True"
  int64_t zero_stage = 0;                    // data parallelism: 0 (plain DDP), ZeRO 1 (optimizer states sharded), 2 (+ gradients), 3 (+ weights)
  int64_t warmup_steps = 0;
  double warmup_ratio = 0;                   // > 0: warmup_steps = ceil(total steps * ratio) (TrainingArguments' rule)
  ScheduleKind lr_scheduler_type = ScheduleKind::Linear;
  double max_grad_norm = 1.0;
  bool skip_nonfinite_steps = false;         // outside fp16's scaler: skip a step whose loss or gradient norm is not finite, instead of stopping
  uint64_t seed = 42;
  bool shuffle = true;
  int64_t dataloader_num_workers = 0;        // threads building batches ahead (0: when needed, as Hugging Face's default)
  int64_t dataloader_prefetch_factor = 2;    // batches each worker keeps ready
  bool dataloader_drop_last = false;         // drop each epoch's last partial batch
  int64_t logging_steps = 500;
  std::string output_dir;                    // empty: write nothing
  std::string save_strategy = "no";          // "no", "steps" (every save_steps) or "epoch": output_dir/checkpoint-N
  int64_t save_steps = 500;
  int64_t save_total_limit = 0;              // keep only the newest N checkpoints (0: all)
  std::string resume_from_checkpoint;        // a checkpoint directory, or "latest" in output_dir
  std::string validation_file;               // pre-tokenized safetensors, as train_file
  std::string eval_strategy = "no";          // "no", "steps" (every eval_steps) or "epoch"
  int64_t eval_steps = 0;                    // 0: logging_steps, as Hugging Face's default
  int64_t per_device_eval_batch_size = 8;
  bool load_best_model_at_end = false;       // needs save_strategy == eval_strategy
  std::string metric_for_best_model = "loss";
  bool print_evaluations = true;             // a line on stdout per evaluation (the memory plan's simulation: off)
  bool progress = true;                      // progress bar when stderr is a terminal
  bool bf16 = false;                         // mixed precision: bf16 compute, float32 masters and gradients
  bool fp16 = false;                         // mixed precision with dynamic loss scaling (GradScaler)
  std::string report_to = "none";            // "none" or "tensorboard" (event files in logging_dir)
  std::string logging_dir;                   // empty: output_dir/runs/<Mon DD_HH-MM-SS>_<host>, Trainer's default
  // Trainer's LabelSmoother: (1 - eps)·nll + eps·mean over the classes of -log_softmax, positions labelled
  // -100 left out; single-label classification, token classification and multiple choice.
  double label_smoothing_factor = 0.0;
};

}  // namespace anatomy
