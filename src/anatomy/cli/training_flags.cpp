// training_flags.cpp: registration and cross-checks of the training flags.
#include "anatomy/cli/training_flags.h"

#include <charconv>
#include <cmath>

#include <filesystem>

#include "anatomy/cli/commands.h"
#include "anatomy/core/error.h"
#include "anatomy/io/files.h"

namespace anatomy::cli {

void add_training_flags(CLI::App& app, TrainFlags& flags) {
  TrainingArguments& a = flags.args;
  app.add_option("--model,--model_name_or_path", a.model,
                 "Directory with config.json + model.safetensors (or pytorch_model.bin), a Hugging Face id in the local "
                 "hub cache (nothing is downloaded), or a preset with random initialisation (bert-large-uncased, "
                 "bert-base-uncased, bert-medium, bert-small, bert-mini, bert-tiny)")
      ->capture_default_str();
  app.add_option("--task", a.task,
                 "The head to train: sequence-classification, token-classification, question-answering, masked-lm or multiple-choice "
                 "(default: the --model directory's config.json architectures, else sequence-classification)")
      ->check(CLI::IsMember({"sequence-classification", "token-classification", "question-answering", "masked-lm",
                             "multiple-choice"}));
  app.add_option("--dataset", a.dataset, "Built-in dataset: dummy (the seed's random ids)")->capture_default_str();
  app.add_option("--train-file", a.train_file,
                 "Text (.jsonl, .json, .csv, .tsv: tokenized with --vocab; token classification: .jsonl/.json of "
                 "words and tags, or .conll) or pre-tokenized safetensors: input_ids [N, L] and optional "
                 "attention_mask, token_type_ids, labels ([N], [N, C], or [N, L] a label per token)");
  app.add_option("--text-column", a.text_column,
                 "Text data: the column (JSON field) of the text; token classification: of the list of words "
                 "(default there: tokens)")
      ->capture_default_str();
  app.add_option("--text-pair-column", a.text_pair_column, "Text data: the column of a second text (pairs)");
  app.add_option("--label-column", a.label_column,
                 "Text data: the column of the label (names, integer ids, or numbers for regression); token "
                 "classification: of the list of tags (default there: tags, or ner_tags)")
      ->capture_default_str();
  app.add_option("--doc-stride", a.doc_stride,
                 "Question answering: context tokens a window shares with the one before it (run_qa's)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--mlm-probability", a.mlm_probability,
                 "Masked-LM: the chance each token is chosen (80% become the mask, 10% a random token, 10% stay)")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_flag("--line-by-line", a.line_by_line,
               "Masked-LM text: one example per non-blank line (truncated), not lines concatenated into blocks");
  app.add_option("--mask-token-id", a.mask_token_id,
                 "Masked-LM on data without a tokenizer (dummy or tensor data): the mask token's id (default: the "
                 "model directory's tokenizer's, else 103, BERT's [MASK])");
  app.add_flag("--label-all-tokens", a.label_all_tokens,
               "Token classification: label every piece of a word (B- made I-), not only its first");
  app.add_option("--vocab", a.vocab, "Text data: the WordPiece vocab.txt (default: the --model directory's)");
  app.add_option("--do-lower-case", a.do_lower_case,
                 "Text data: lowercase (and strip accents) before WordPiece: true or false (default: the model "
                 "directory's tokenizer_config.json, else true)")
      ->check(CLI::IsMember({"true", "false", "True", "False"}));
  app.add_option("--max-seq-length", a.max_seq_length,
                 "Text data: truncate each example (longest_first) to this many tokens, [CLS] and [SEP] included")
      ->capture_default_str()->check(CLI::Range(int64_t{3}, int64_t{1} << 20));
  app.add_flag("--group-by-length", a.group_by_length,
               "Batch examples of similar lengths together (Hugging Face's LengthGroupedSampler), so that dynamic "
               "padding pads less");
  app.add_option("--dummy-size", a.dummy_size, "Number of dummy sequences")->capture_default_str()->check(positive_integer());
  app.add_option("--dummy-seq-len", a.dummy_seq_len, "Tokens per dummy sequence")->capture_default_str()->check(positive_integer());
  app.add_option("--per-device-train-batch-size", a.per_device_train_batch_size, "Batch size")
      ->capture_default_str()->check(positive_integer());
  app.add_option("--gradient-accumulation-steps", a.gradient_accumulation_steps,
                 "Batches whose gradients add up before each optimizer update (the loss of each counts 1/N)")
      ->capture_default_str()->check(positive_integer());
  app.add_flag("--gradient-checkpointing", a.gradient_checkpointing,
               "Keep only each encoder layer's output in forward; recompute the layer in backward");
  app.add_option("--gradient-checkpointing-policy", a.gradient_checkpointing_policy,
                 "full (recompute whole layers) or selective (keep all but attention's internals and the GELU "
                 "input, and recompute only those)")
      ->capture_default_str()->check(CLI::IsMember({"full", "selective"}));
  app.add_option("--num-train-epochs", a.num_train_epochs, "Epochs (ignored when --max-steps > 0)")
      ->capture_default_str()->check(positive_number());
  app.add_option("--max-steps", a.max_steps, "Optimizer steps; overrides --num-train-epochs when > 0")
      ->capture_default_str()
      ->check(max_steps_integer());
  app.add_option("--learning-rate", a.learning_rate, "AdamW learning rate")->capture_default_str()->check(non_negative_number());
  app.add_option("--weight-decay", a.weight_decay, "Decoupled weight decay (never on biases and LayerNorm)")
      ->capture_default_str()->check(non_negative_number());
  app.add_option("--adam-beta1", a.adam_beta1, "AdamW beta1")->capture_default_str()->check(probability_below_one());
  app.add_option("--adam-beta2", a.adam_beta2, "AdamW beta2")->capture_default_str()->check(probability_below_one());
  app.add_option("--adam-epsilon", a.adam_epsilon, "AdamW epsilon")->capture_default_str()->check(positive_number());
  app.add_option("--zero-stage", a.zero_stage,
                 "Under a launcher (several ranks): 0 replicates the optimizer states on every rank (data "
                 "parallel), 1 shards them over the ranks (ZeRO stage 1), 2 the gradients too (reduce-scattered "
                 "layer by layer), 3 the weights too (gathered before each layer's use); 1-3 take adamw or sgd")
      ->capture_default_str()->check(CLI::Range(0, 3));
  app.add_option("--optim", a.optim, "adamw, adamw_8bit (bitsandbytes' block-wise 8-bit states), sgd or adafactor")
      ->capture_default_str()
      ->check(CLI::IsMember({"adamw", "adamw_torch", "adamw_torch_fused", "adamw_8bit", "adamw_bnb_8bit", "sgd",
                             "adafactor"}));
  app.add_option("--optim-args", a.optim_args, "For --optim sgd: momentum=M,dampening=D,nesterov=True|False");
  app.add_option("--warmup-steps", flags.warmup_steps,
                 "Linear warmup steps; below 1, the share of all steps (rounded up), as transformers 5 reads it")
      ->capture_default_str();
  app.add_option("--warmup-ratio", flags.warmup_ratio, "The share of all steps that warm up (transformers 4's name)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--lr-scheduler-type", flags.scheduler, schedule_kind_names())
      ->capture_default_str()
      ->check(CLI::IsMember({"linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
                             "constant_with_warmup", "inverse_sqrt", "reduce_lr_on_plateau"}));
  app.add_option("--max-grad-norm", a.max_grad_norm, "Clip the global gradient norm to this (0: no clipping)")
      ->capture_default_str()->check(non_negative_number());
  app.add_flag("--skip-nonfinite-steps", a.skip_nonfinite_steps,
               "Skip the update of a step whose loss or gradient norm is not finite and go on (said on stderr and "
               "in log.jsonl), instead of stopping the run there; fp16's loss scaler skips such steps anyway");
  app.add_option("--seed", a.seed, "Seed of initialisation, data, shuffling and dropout")
      ->capture_default_str()->check(seed_integer());
  app.add_flag("--no-shuffle", flags.no_shuffle, "Keep the data in file order");
  app.add_option("--dataloader-num-workers", a.dataloader_num_workers,
                 "Threads that build batches ahead (0: each batch is built when needed; at most 1024)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1024}));
  app.add_option("--dataloader-prefetch-factor", a.dataloader_prefetch_factor, "Batches each worker keeps ready")
      ->capture_default_str()->check(positive_integer());
  app.add_flag("--dataloader-drop-last", a.dataloader_drop_last, "Drop each epoch's last partial batch");
  app.add_option("--logging-steps", a.logging_steps, "Write a log record every N steps")
      ->capture_default_str()->check(positive_integer());
  app.add_option("--output-dir", a.output_dir, "Write config.json, model.safetensors and log.jsonl here");
  app.add_option("--validation-file", a.validation_file,
                 "The validation set, text or pre-tokenized safetensors as --train-file, with labels");
  app.add_option("--eval-strategy", a.eval_strategy,
                 "no, steps (every --eval-steps) or epoch: evaluate on --validation-file (loss, accuracy, macro F1; "
                 "MSE and Pearson for regression), logged to log.jsonl")
      ->capture_default_str()->check(CLI::IsMember({"no", "steps", "epoch"}));
  app.add_option("--eval-steps", a.eval_steps, "Steps between evaluations (0: --logging-steps)")
      ->capture_default_str()->check(non_negative_integer());
  app.add_option("--per-device-eval-batch-size", a.per_device_eval_batch_size, "Evaluation batch size")
      ->capture_default_str()->check(positive_integer());
  app.add_flag("--load-best-model-at-end", a.load_best_model_at_end,
               "After training, reload the checkpoint with the best --metric-for-best-model (needs --save-strategy "
               "equal to --eval-strategy)");
  app.add_option("--metric-for-best-model", a.metric_for_best_model, "loss, accuracy, f1, mse or pearson")
      ->capture_default_str();
  app.add_option("--save-strategy", a.save_strategy,
                 "no, steps (every --save-steps) or epoch: write OUTPUT_DIR/checkpoint-N (model, optimizer, trainer "
                 "state)")
      ->capture_default_str()->check(CLI::IsMember({"no", "steps", "epoch"}));
  app.add_option("--save-steps", a.save_steps, "Steps between checkpoints with --save-strategy steps")
      ->capture_default_str()->check(positive_integer());
  app.add_option("--save-total-limit", a.save_total_limit, "Keep only the newest N checkpoints (0: all)")
      ->capture_default_str()->check(non_negative_integer());
  app.add_option("--resume-from-checkpoint", a.resume_from_checkpoint,
                 "Continue a run from a checkpoint directory, or from the newest in --output-dir with 'latest'");
  app.add_option("--device", flags.device, "cpu, cuda or auto")->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_flag("--no-progress,--disable-tqdm", flags.no_progress, "No progress bar (Trainer's --disable_tqdm)");
  app.add_flag_callback("--use-cpu", [&flags] { flags.device = "cpu"; }, "Trainer's name for --device cpu");
  app.add_option("--report-to", a.report_to,
                 "none, or tensorboard: TensorBoard event files in --logging-dir (log.jsonl is always written)")
      ->capture_default_str()->check(CLI::IsMember({"none", "tensorboard"}));
  app.add_option("--logging-dir", a.logging_dir,
                 "Where --report-to tensorboard writes (default: OUTPUT_DIR/runs/<Mon DD_HH-MM-SS>_<host>, "
                 "Trainer's)");
  app.add_option("--label-smoothing-factor", a.label_smoothing_factor,
                 "Trainer's label smoothing: the loss (1 - f)·nll + f·mean over the classes of -log_softmax "
                 "(single-label and token classification, multiple choice)")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_flag("--do-train", flags.do_train, "Accepted for run_glue command lines: train trains");
  app.add_flag("--tf32", flags.tf32, "TensorFloat-32 matrix products on the GPU (float32 storage)");
  app.add_flag("--split-tf32", flags.split_tf32,
               "float32 matrix products on the GPU's tensor cores as lo*hi + hi*lo + hi*hi of TF32 pieces: inputs "
               "kept to about 22 of float32's 24 bits (the seed's fp32 step: 1.3x faster on an H100)");
  app.add_flag("--bf16", a.bf16, "Mixed precision: bf16 compute, float32 master weights, gradients and AdamW states");
  app.add_flag("--fp16", a.fp16, "Mixed precision in fp16 with dynamic loss scaling (as PyTorch's GradScaler)");
  app.add_option("--anatomy-steps", flags.anatomy_steps,
                 "Print the memory anatomy every N steps as well as at the end (0: at the end only)")
      ->capture_default_str()->check(non_negative_number());
  app.add_flag("--auto-find-batch-size", flags.auto_find_batch_size,
               "Use the largest batch that fits (the memory plan's answer, confirmed by one real step)");
  add_engine_flags(app, flags.engine);
}

Fp32Products fp32_products_of(const TrainFlags& flags) {
  if (flags.tf32 && flags.split_tf32) fail("--tf32 and --split-tf32: choose one way to run float32 products");
  return flags.tf32 ? Fp32Products::Tf32 : flags.split_tf32 ? Fp32Products::SplitTf32 : Fp32Products::Float32;
}

TrainingArguments resolve_training_flags(const TrainFlags& flags, const CLI::App& app) {
  TrainingArguments args = flags.args;
  parse_schedule_kind(flags.scheduler, &args.lr_scheduler_type);
  check_schedule(args.lr_scheduler_type, args.learning_rate);
  {
    // TrainingArguments.get_warmup_steps: int(warmup_steps) from 1 up, else a ratio of the steps.
    double w = 0;
    const std::string& text = flags.warmup_steps;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), w);
    if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(w) || w < 0 ||
        w > static_cast<double>(int64_t{1} << 53))
      fail("--warmup-steps {}: expected a number of steps, or a ratio below 1", text);
    if (w >= 1) {
      args.warmup_steps = static_cast<int64_t>(w);
    } else {
      args.warmup_ratio = w;
    }
    if (flags.warmup_ratio > 0) {
      if (w > 0) fail("--warmup-steps {} and --warmup-ratio {}: give one", text, flags.warmup_ratio);
      args.warmup_ratio = flags.warmup_ratio;
    }
  }
  args.shuffle = !flags.no_shuffle;
  args.progress = !flags.no_progress;
  if (!args.train_file.empty() && app.count("--dataset"))
    fail("--dataset and --train-file are exclusive: give one");
  if (args.train_file.empty() && args.dataset != "dummy")
    fail("--dataset {}: only \"dummy\" is built in; give text or tensors with --train-file", args.dataset);
  if (!args.output_dir.empty() && io::path_kind(args.output_dir) == io::PathKind::Other)
    fail("--output-dir {}: exists and is not a directory", args.output_dir);

  if (args.bf16 && args.fp16) fail("--bf16 and --fp16 are exclusive: give one");
  if (args.save_strategy != "no" && args.output_dir.empty())
    fail("--save-strategy {}: needs --output-dir, where checkpoint-N directories go", args.save_strategy);
  return args;
}

}  // namespace anatomy::cli
