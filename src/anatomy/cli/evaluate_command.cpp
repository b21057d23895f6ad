// evaluate_command.cpp: `anatomy evaluate` and `anatomy predict`: the model
// for inference only (model/inference.h: no gradients, no optimizer, the
// weights once in bf16, fp16 or float32), over batches of variable-length
// sequences packed without padding (or padded, to compare). evaluate prints
// the metrics (train/metrics.h) with time, samples/s, tokens/s and memory; predict
// also writes one JSON line per example with its label and probabilities (token
// classification: the words and a tag per word).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "anatomy/cli/commands.h"
#include "anatomy/cli/engine_flags.h"
#include "anatomy/data/dataset.h"
#include "anatomy/gpu/host_memory.h"
#include "anatomy/gpu/nvml.h"
#include "anatomy/io/files.h"
#include "anatomy/model/registry.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/data/text_dataset.h"
#include "anatomy/data/qa_data.h"
#include "anatomy/data/token_data.h"
#include "anatomy/data/wordpiece.h"
#include "anatomy/train/metrics.h"
#include "anatomy/train/squad_metrics.h"
#include "anatomy/train/training_data.h"

namespace anatomy::cli {

namespace {

struct EvaluateFlags {
  std::string model = "bert-large-uncased";
  std::string input;          // safetensors or text (.jsonl, .json, .csv, .tsv); empty: dummy data
  // Text input: as `anatomy train` reads it, with the model directory's tokenizer unless --vocab.
  TextColumns columns;
  std::string vocab, do_lower_case;
  int64_t max_seq_length = 128;
  int64_t doc_stride = 128;   // question answering: context tokens shared by consecutive windows
  int64_t dummy_size = 512;
  int64_t dummy_min_len = 64, dummy_max_len = 512;
  int64_t batch_size = 8;     // Hugging Face's per_device_eval_batch_size
  bool bf16 = false, fp16 = false;
  std::string padding = "free";
  std::string device = "auto";
  std::string output;         // predict: predictions.jsonl
  std::string metrics;        // a JSON file of the figures
  uint64_t seed = 42;
  bool no_progress = false;
  EngineFlags engine;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

nlohmann::json prediction(const float* logits, int64_t C, ProblemType type, const ModelConfig& config, int64_t index) {
  nlohmann::json line;
  line["index"] = index;
  if (type == ProblemType::Regression) {
    line["value"] = C == 1 ? nlohmann::json(logits[0]) : nlohmann::json(std::vector<float>(logits, logits + C));
    return line;
  }
  std::vector<double> p(C);
  if (type == ProblemType::MultiLabel) {
    for (int64_t c = 0; c < C; ++c) p[c] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[c])));
  } else {
    const float max = *std::max_element(logits, logits + C);
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) sum += p[c] = std::exp(static_cast<double>(logits[c]) - max);
    for (double& v : p) v /= sum;
  }
  auto name = [&](int64_t c) {
    auto it = config.id2label.find(c);
    return it != config.id2label.end() ? it->second : fmt::format("LABEL_{}", c);
  };
  if (type == ProblemType::MultiLabel) {
    std::vector<std::string> labels;
    for (int64_t c = 0; c < C; ++c)
      if (p[c] > 0.5) labels.push_back(name(c));
    line["labels"] = labels;
  } else {
    const int64_t best = std::max_element(p.begin(), p.end()) - p.begin();
    line["label"] = name(best);
    line["label_id"] = best;
  }
  line["probabilities"] = p;
  return line;
}

int run_inference(const EvaluateFlags& f, bool predict) {
  const DType dtype = f.bf16 ? DType::BF16 : f.fp16 ? DType::F16 : DType::F32;
  DeviceChoice device = choose_device(f.device, Fp32Products::Float32, 0, resolve_engine_options(f.engine));
  const ModelSource source = resolve_model(f.model);
  fmt::print("Model: {}\n", describe_model(source));  // first: a preset's weights are random
  if (!device.note.empty()) fmt::print("{}\n", device.note);
  Backend& backend = *device.backend;
  const bool on_gpu = !backend.device().is_cpu();
  if (dtype != DType::F32 && !on_gpu)
    fail("--{}: 16-bit inference runs on the GPU; the CPU backend computes in float32 (leave the flag out)",
         f.bf16 ? "bf16" : "fp16");
  if (predict && f.output.empty()) fail("--output: predict needs a file to write the predictions to");

  if (model_task(source.config) == kMultipleChoice)
    fail("--model: {} of a multiple-choice model is not served yet; `anatomy train --validation-file F "
         "--eval-strategy epoch` reports its eval_loss and eval_accuracy, `anatomy forward` its logits",
         predict ? "predict" : "evaluate");
  if (model_task(source.config) == kMaskedLm)
    fail("--model: {} of a masked-LM model is not served yet; `anatomy train --validation-file F --eval-strategy "
         "epoch` reports its eval_loss and perplexity, `anatomy forward` its logits",
         predict ? "predict" : "evaluate");
  const bool spans = model_task(source.config) == kQuestionAnswering;
  if (spans && (f.input.empty() || !is_text_data_file(f.input)))
    fail("--input: {} of a question answering model reads SQuAD questions (.json, or .jsonl rows)",
         predict ? "predict" : "evaluate");
  const bool per_token = model_task(source.config) == kTokenClassification;
  const bool text = !f.input.empty() && (is_text_data_file(f.input) || (per_token && is_conll_file(f.input)));
  if (!text && (!f.vocab.empty() || !f.do_lower_case.empty()))
    fail("--{}: only for text input (a .jsonl, .json, .csv or .tsv file)", f.vocab.empty() ? "do-lower-case" : "vocab");
  std::vector<int64_t> lines;  // text: each example's line in the file
  TaggedCorpus corpus;         // token classification's text: the words
  QaCorpus questions;          // question answering: the questions and contexts
  QaEvalFeatures windows;      // and their windows
  const Dataset data = [&] {
    if (f.input.empty()) return make_dummy_varlen_dataset(f.dummy_size, f.dummy_min_len, f.dummy_max_len, f.seed);
    if (!text) return load_tensor_dataset(f.input);
    const TokenizerSettings settings =
        resolve_tokenizer(f.vocab, source.directory, f.do_lower_case, "--input " + f.input);
    const data::TextTokenizer tokenizer = load_tokenizer(settings);
    if (static_cast<int64_t>(tokenizer.vocab_size()) > source.config.vocab_size)
      fail("{}: {} tokens, more than the model's vocab_size {}", tokenizer.file(), tokenizer.vocab_size(),
           source.config.vocab_size);
    if (f.max_seq_length > source.config.max_sequence_length())
      fail("--max-seq-length {}: longer than the model's {}", f.max_seq_length,
           max_sequence_length_text(source.config));
    if (spans) {
      // run_qa's validation windows (each batch packed; no padding).
      QaFeatureOptions options;
      options.max_seq_length = f.max_seq_length;
      options.doc_stride = f.doc_stride;
      options.pad_to_max_length = false;
      options.add_prefix_space = token_prefix_space(source.config);
      questions = read_qa_corpus(f.input);
      windows = prepare_validation_features(questions, tokenizer, options);
      for (const QaExample& q : questions.examples) lines.push_back(q.line);
      return windows.data;
    }
    if (per_token) {
      const LabelVocabulary tags = model_label_vocabulary(source.config);
      TokenDataOptions options;
      options.max_seq_length = f.max_seq_length;
      options.add_prefix_space = token_prefix_space(source.config);
      std::vector<std::string> notes;
      Dataset d = read_token_data(f.input, f.columns.text, f.columns.label, tokenizer, predict ? nullptr : &tags,
                                  options, &notes, &corpus);
      for (const std::string& note : notes) fmt::print("{}\n", note);
      for (const TaggedSentence& s : corpus.sentences) lines.push_back(s.line);
      return d;
    }
    TextColumns columns = f.columns;
    if (predict) columns.label.clear();  // predictions need no labels
    else if (columns.label.empty()) fail("--label-column: evaluate needs labels");
    const TextTable table = read_text_table(f.input, columns);
    if (table.blank_lines_skipped > 0)
      fmt::print("Skipped {} blank line{} of {}\n", table.blank_lines_skipped, table.blank_lines_skipped == 1 ? "" : "s",
                 f.input);
    for (const TextExample& row : table.rows) lines.push_back(row.line);
    const LabelVocabulary labels = model_label_vocabulary(source.config);
    TextDataOptions options;
    options.max_seq_length = f.max_seq_length;
    return tokenize_text_table(table, tokenizer, predict ? nullptr : &labels, options);
  }();
  validate_dataset(data, source.config, model_task(source.config));
  if (!predict && !data.has_labels() && !spans)
    fail("{}: evaluate needs a 'labels' tensor (use `anatomy predict` for unlabelled data)", data.source);
  const std::vector<int64_t> lengths = sequence_lengths(data);
  const int64_t tokens = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  const ProblemType type =
      resolve_problem_type(source.config, data.has_labels() ? data.label_dtype : DType::I64);

  // The float32 checkpoint (or a preset's initialisation) on the host, then
  // the weights once on the device in the inference dtype.
  const std::unique_ptr<InferenceModel> inference = make_inference_model(backend, source.config, dtype);
  InferenceModel& model = *inference;
  {
    auto host = make_cpu_backend(1);
    const std::unique_ptr<Model> loaded = make_model(*host, source.config);
    if (source.directory.empty()) {
      init_weights(*loaded, f.seed);
    } else {
      const LoadReport report = load_weights(*loaded, source.directory, f.seed);
      if (!report.initialised.empty())
        fmt::print("Newly initialised (not in the checkpoint): {}\n", fmt::join(report.initialised, ", "));
    }
    model.load_from(*loaded);
  }
  backend.synchronize();
  const std::string model_name = source.preset.empty() ? source.directory : source.preset;
  const std::string padding = f.padding == "free" ? "packed, no padding"
                              : f.padding == "longest" ? "padded to the longest in each batch"
                                                       : fmt::format("padded to {}", data.seq_len);
  fmt::print("{} {} ({} parameters, {} weights) on {}: {} sequences, {} tokens ({}..{} a sequence), batch {}, {}\n",
             predict ? "Predicting with" : "Evaluating", model_name, model.parameter_count(),
             dtype == DType::F32 ? "float32" : dtype_name(dtype), backend.device().str(), data.size, tokens,
             *std::min_element(lengths.begin(), lengths.end()), *std::max_element(lengths.begin(), lengths.end()),
             f.batch_size, padding);
  std::fflush(stdout);

  auto batch_at = [&](int64_t begin) {
    const int64_t end = std::min(data.size, begin + f.batch_size);
    std::vector<const int64_t*> ids, types;
    std::vector<int64_t> lens;
    int64_t longest = 0;
    for (int64_t i = begin; i < end; ++i) {
      ids.push_back(data.input_ids.data() + i * data.seq_len);
      if (!data.token_type_ids.empty()) types.push_back(data.token_type_ids.data() + i * data.seq_len);
      lens.push_back(lengths[i]);
      longest = std::max(longest, lengths[i]);
    }
    const int64_t pad_to = f.padding == "free" ? 0 : f.padding == "longest" ? longest : data.seq_len;
    return make_inference_batch(ids, types, lens, pad_to);
  };

  // One batch first, untimed: kernels load and libraries pick their algorithms.
  model.forward(batch_at(0));
  backend.synchronize();
  backend.ledger().release_unused();

  const int64_t C = source.config.num_labels;
  const int64_t rows = per_token ? data.seq_len : 1;  // logits rows per example
  std::vector<float> logits(static_cast<size_t>(spans ? 0 : data.size * rows * C), 0.0f);
  // Question answering: each window's start and end logits, [N, L] each (past a window's tokens: no span).
  std::vector<float> starts(static_cast<size_t>(spans ? data.size * data.seq_len : 0), 0.0f), ends(starts);
  std::vector<float> batch_logits;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t batches = (data.size + f.batch_size - 1) / f.batch_size;
  auto last_progress = t0;
  for (int64_t b = 0; b < batches; ++b) {
    const int64_t begin = b * f.batch_size;
    const InferenceBatch batch = batch_at(begin);
    const Tensor out = model.forward(batch);
    if (spans) {
      // [2, rows]: the start logits of the batch's rows, then the end logits.
      batch_logits.resize(static_cast<size_t>(out.numel()));
      backend.copy_to_host(out, batch_logits.data());
      const int64_t half = batch.rows();
      for (int64_t i = 0; i < batch.sequences(); ++i) {
        const int64_t first = batch.padded_length > 0 ? i * batch.padded_length : batch.offsets[i];
        std::copy_n(batch_logits.data() + first, batch.lengths[i], starts.data() + (begin + i) * data.seq_len);
        std::copy_n(batch_logits.data() + half + first, batch.lengths[i], ends.data() + (begin + i) * data.seq_len);
      }
    } else if (!per_token) {
      backend.copy_to_host(out, logits.data() + begin * C);  // waits for the batch
    } else {
      // The batch's token rows (packed or padded) into each example's [L, C].
      batch_logits.resize(static_cast<size_t>(out.numel()));
      backend.copy_to_host(out, batch_logits.data());
      for (int64_t i = 0; i < batch.sequences(); ++i) {
        const int64_t first = batch.padded_length > 0 ? i * batch.padded_length : batch.offsets[i];
        std::copy_n(batch_logits.data() + first * C, batch.lengths[i] * C, logits.data() + (begin + i) * rows * C);
      }
    }
    if (!f.no_progress && seconds_since(last_progress) > 1.0) {
      last_progress = std::chrono::steady_clock::now();
      fmt::print(stderr, "\r{} / {} batches, {:.1f} s", b + 1, batches, seconds_since(t0));
    }
  }
  const double seconds = seconds_since(t0);
  if (!f.no_progress && seconds > 1.0) fmt::print(stderr, "\n");

  nlohmann::json metrics;
  metrics["model"] = model_name;
  metrics["dtype"] = dtype == DType::F32 ? "float32" : std::string(dtype_name(dtype));
  metrics["padding"] = f.padding;
  metrics["batch_size"] = f.batch_size;
  metrics["sequences"] = data.size;
  metrics["tokens"] = tokens;
  metrics["seconds"] = seconds;
  metrics["samples_per_second"] = static_cast<double>(data.size) / seconds;
  metrics["tokens_per_second"] = static_cast<double>(tokens) / seconds;
  fmt::print("Time: {:.2f}\nSamples/second: {:.2f}\nTokens/second: {:.0f}\n", seconds,
             static_cast<double>(data.size) / seconds, static_cast<double>(tokens) / seconds);
  const std::vector<std::string> names = model_label_names(source.config);
  QaPredictions answers;
  if (spans) {
    // utils_qa's answer extraction, then the official SQuAD script (v2 when some question has no answer).
    QaPostprocessOptions post;
    post.version_2_with_negative = questions.has_unanswerable();
    answers = postprocess_qa_predictions(questions, windows, starts, ends, data.seq_len, post);
    std::vector<SquadQuestion> gold;
    for (const QaExample& q : questions.examples) gold.push_back({q.id, q.answer_texts});
    const SquadResult result = post.version_2_with_negative ? squad_v2(gold, answers.prediction_map())
                                                            : squad_v1(gold, answers.prediction_map());
    std::vector<std::string> shown;
    for (const auto& [name, value] : result.scores) {
      metrics["eval_" + name] = value;
      shown.push_back(fmt::format("eval_{}: {:.6g}", name, value));
    }
    if (!predict) fmt::print("{}\n", fmt::join(shown, "  "));
  }
  if (data.has_labels()) {
    const std::map<std::string, double> scores =
        per_token ? token_classification_metrics(logits, C, data, names, f.batch_size)
                  : classification_metrics(logits, C, type, data);
    std::vector<std::string> shown;
    for (const auto& [name, value] : scores) {
      metrics[name] = value;
      shown.push_back(fmt::format("{}: {:.6g}", name, value));
    }
    fmt::print("{}\n", fmt::join(shown, "  "));
  }

  const LedgerSnapshot ledger = backend.ledger().snapshot();
  auto bytes = [&](Category c) { return ledger.peak[static_cast<size_t>(c)]; };
  const int64_t weights = bytes(Category::Weights);
  fmt::print("Memory: weights {} ({:.2f} bytes a parameter), activations and temporaries at most {}, inputs {}; "
             "no gradients, no optimizer states. Peak {} in \"{}\".\n",
             format_bytes(weights), static_cast<double>(weights) / static_cast<double>(model.parameter_count()),
             format_bytes(bytes(Category::Temporary) + bytes(Category::Activations)), format_bytes(bytes(Category::Data)),
             format_bytes(ledger.peak_total), ledger.peak_phase);
  metrics["peak_bytes"] = ledger.peak_total;
  metrics["weights_bytes"] = weights;
  if (on_gpu) {
    const auto line = gpu::gpu_memory_occupied_line(backend.device().index);
    fmt::print("{}\n", line ? *line : "GPU memory occupied: unknown (NVML unavailable).");
  } else {
    fmt::print("CPU memory occupied (peak RSS): {} MB.\n", gpu::process_peak_rss_bytes() / (1024 * 1024));
  }

  if (predict && spans) {
    // One JSON object, question id -> answer text, as run_qa's predictions.json.
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (const auto& [id, text] : answers.predictions) j[id] = text;
    io::write_text_file_atomic(f.output, j.dump(4) + "\n");
    fmt::print("Predictions written to {}\n", f.output);
  } else if (predict) {
    std::ostringstream out;
    std::vector<int64_t> predicted;  // token classification: each token's label id
    if (per_token) {
      predicted.resize(static_cast<size_t>(data.size * rows));
      for (size_t t = 0; t < predicted.size(); ++t) {
        const float* x = logits.data() + t * C;
        predicted[t] = std::max_element(x, x + C) - x;
      }
    }
    std::vector<std::vector<int64_t>> words;  // token classification of words: each word's label id
    if (per_token && !corpus.sentences.empty()) {
      std::vector<int64_t> counts;
      for (const TaggedSentence& s : corpus.sentences) counts.push_back(static_cast<int64_t>(s.words.size()));
      words = word_level(data, predicted, counts);
    }
    for (int64_t i = 0; i < data.size; ++i) {
      nlohmann::json line;
      if (!per_token) {
        line = prediction(logits.data() + i * C, C, type, source.config, i);
      } else if (!words.empty()) {
        // A tag per word (its first piece's); null for a word the truncation dropped.
        const TaggedSentence& sentence = corpus.sentences[static_cast<size_t>(i)];
        line["index"] = i;
        line["tokens"] = sentence.words;
        nlohmann::json tags = nlohmann::json::array();
        for (const int64_t id : words[static_cast<size_t>(i)])
          tags.push_back(id < 0 ? nlohmann::json() : nlohmann::json(names[static_cast<size_t>(id)]));
        line["tags"] = tags;
      } else {
        // Tensor input has no words: a label per real token.
        line["index"] = i;
        std::vector<std::string> tags;
        for (int64_t t = 0; t < lengths[static_cast<size_t>(i)]; ++t)
          tags.push_back(names[static_cast<size_t>(predicted[static_cast<size_t>(i * rows + t)])]);
        line["token_labels"] = tags;
      }
      if (!lines.empty()) line["line"] = lines[static_cast<size_t>(i)];
      out << line.dump() << "\n";
    }
    io::write_text_file_atomic(f.output, out.str());
    fmt::print("Predictions written to {}\n", f.output);
  }
  if (!f.metrics.empty()) io::write_text_file_atomic(f.metrics, metrics.dump(2) + "\n");
  return 0;
}

}  // namespace

Command add_evaluate_command(CLI::App& app, bool predict) {
  auto f = std::make_shared<EvaluateFlags>();
  app.add_option("--model,--model_name_or_path", f->model,
                 "Directory with config.json + weights, a Hugging Face id in the local hub cache, or a preset (seeded)")
      ->capture_default_str();
  app.add_option("--input,--validation-file", f->input,
                 "Text (.jsonl, .json, .csv, .tsv; token classification: words and tags in .jsonl/.json, or .conll) "
                 "or safetensors with input_ids [N, L] and optional attention_mask "
                 "(right padding), token_type_ids" + std::string(predict ? ", labels" : " and labels (needed)") +
                 "; without it, dummy data");
  app.add_option("--text-column", f->columns.text,
                 "Text input: the column (JSON field) of the text; token classification: of the list of words "
                 "(default there: tokens)")
      ->capture_default_str();
  app.add_option("--text-pair-column", f->columns.text_pair, "Text input: the column of a second text (pairs)");
  if (!predict)
    app.add_option("--label-column", f->columns.label, "Text input: the column of the label (a name of the "
                                                        "model's id2label, or its id); token classification: of "
                                                        "the list of tags (default there: tags, or ner_tags)")
        ->capture_default_str();
  app.add_option("--vocab", f->vocab, "Text input: the WordPiece vocab.txt (default: the --model directory's)");
  app.add_option("--do-lower-case", f->do_lower_case,
                 "Text input: true or false (default: the model directory's tokenizer_config.json, else true)")
      ->check(CLI::IsMember({"true", "false", "True", "False"}));
  app.add_option("--max-seq-length", f->max_seq_length,
                 "Text input: truncate each example (longest_first) to this many tokens, as train's flag")
      ->capture_default_str()->check(CLI::Range(int64_t{3}, int64_t{1} << 20));
  app.add_option("--doc-stride", f->doc_stride,
                 "Question answering: context tokens a window shares with the one before it (run_qa's)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--dummy-size", f->dummy_size, "Dummy sequences")->capture_default_str()->check(positive_number());
  app.add_option("--dummy-min-len", f->dummy_min_len, "Shortest dummy sequence")
      ->capture_default_str()->check(positive_number());
  app.add_option("--dummy-max-len", f->dummy_max_len, "Longest dummy sequence")
      ->capture_default_str()->check(positive_number());
  app.add_option("--per-device-eval-batch-size", f->batch_size, "Sequences a batch")
      ->capture_default_str()->check(positive_number());
  auto* bf16 = app.add_flag("--bf16", f->bf16, "Weights and compute in bf16 (GPU)");
  app.add_flag("--fp16", f->fp16, "Weights and compute in fp16 (GPU)")->excludes(bf16);
  app.add_option("--padding", f->padding,
                 "free: pack the real tokens, no padding; longest: pad to the longest in the batch; max_length: "
                 "pad to the data's length")
      ->capture_default_str()->check(CLI::IsMember({"free", "longest", "max_length"}));
  app.add_option("--device", f->device, "cpu, cuda or auto")->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  if (predict) app.add_option("--output", f->output, "JSON lines to write: index, label, probabilities")->required();
  app.add_option("--metrics", f->metrics, "Also write the figures to this JSON file");
  app.add_option("--seed", f->seed, "Seed of a preset's weights and of the dummy data")
      ->capture_default_str()->check(non_negative_number());
  app.add_flag("--no-progress", f->no_progress, "No progress line");
  add_engine_flags(app, f->engine, /*training=*/false);
  return [f, predict]() -> int {
    if (f->dummy_min_len > f->dummy_max_len)
      fail("--dummy-min-len {} is longer than --dummy-max-len {}", f->dummy_min_len, f->dummy_max_len);
    return run_inference(*f, predict);
  };
}

}  // namespace anatomy::cli
