// training_data.cpp: dummy, tensor or text data for a run, and the model's labels.
#include "anatomy/train/training_data.h"

#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "anatomy/core/error.h"
#include "anatomy/data/choice_data.h"
#include "anatomy/data/mlm_data.h"
#include "anatomy/data/wordpiece.h"
#include "anatomy/model/registry.h"

namespace anatomy {

namespace {

// id2label holds names a person gave (not Hugging Face's LABEL_i defaults).
bool has_named_labels(const ModelConfig& c) {
  if (c.id2label.empty()) return false;
  for (const auto& [id, name] : c.id2label)
    if (name != fmt::format("LABEL_{}", id)) return true;
  return false;
}

// Text training data fixes the label set: the model's own ids when its
// config names labels that cover the data's, else the data's vocabulary
// (integers as written, other names sorted).
LabelVocabulary fit_labels(const TextTable& train, ModelConfig& config, bool from_directory) {
  LabelVocabulary labels = LabelVocabulary::from(train);
  if (labels.regression) {
    config.num_labels = 1;
    config.problem_type = ProblemType::Regression;
    config.id2label.clear();
    return labels;
  }
  if (from_directory && has_named_labels(config)) {
    const LabelVocabulary model = model_label_vocabulary(config);
    bool covered = true;
    for (const std::string& name : labels.names) covered = covered && model.ids.count(name) != 0;
    if (covered) {
      labels = model;
    } else if (labels.num_labels() != model.num_labels()) {
      // The data's labels would give the trained classifier another shape
      // than the checkpoint's (and model.safetensors would be blamed): the
      // first label outside the model's is the data's error, at its line.
      for (const TextExample& row : train.rows) model.id_of(row, train.source);
    }
  }
  config.num_labels = labels.num_labels();
  config.problem_type = ProblemType::SingleLabel;
  config.id2label.clear();
  for (size_t i = 0; i < labels.names.size(); ++i) config.id2label[static_cast<int64_t>(i)] = labels.names[i];
  return labels;
}

bool parse_bool_flag(const std::string& value, const char* flag) {
  if (value == "true" || value == "True" || value == "1") return true;
  if (value == "false" || value == "False" || value == "0") return false;
  fail("{} {}: expected true or false", flag, value);
}

}  // namespace

TokenizerSettings resolve_tokenizer(const std::string& vocab, const std::string& model_dir,
                                    const std::string& do_lower_case, const std::string& needed_by) {
  std::optional<TokenizerSettings> from_model;
  if (!model_dir.empty()) from_model = read_tokenizer_settings(model_dir);
  TokenizerSettings s;
  if (!vocab.empty()) {
    if (!std::filesystem::is_regular_file(vocab)) fail("--vocab {}: no such file", vocab);
    if (from_model) s = *from_model;  // the model's settings, another vocabulary
    s.vocab_file = vocab;
    s.tokenizer_file.clear();
  } else if (from_model) {
    s = *from_model;
  } else {
    fail("{}: text needs a tokenizer: give --vocab vocab.txt{}", needed_by,
         model_dir.empty() ? "" : fmt::format(" ({} has no tokenizer.json or vocab.txt)", model_dir));
  }
  if (!do_lower_case.empty()) {
    if (!s.tokenizer_file.empty())
      fail("--do-lower-case {}: {} decides the case itself (its normalizer); the flag is for a vocab.txt",
           do_lower_case, s.tokenizer_file);
    s.options.lowercase = parse_bool_flag(do_lower_case, "--do-lower-case");
    s.options.strip_accents.reset();  // follows do_lower_case, as BertTokenizer's default
    s.config.erase("strip_accents");
  }
  return s;
}

std::vector<std::string> model_label_names(const ModelConfig& config) {
  std::vector<std::string> names;
  for (int64_t i = 0; i < config.num_labels; ++i) {
    const auto it = config.id2label.find(i);
    names.push_back(it != config.id2label.end() ? it->second : fmt::format("LABEL_{}", i));
  }
  return names;
}

LabelVocabulary model_label_vocabulary(const ModelConfig& config) {
  LabelVocabulary v;
  if (config.problem_type == ProblemType::Regression ||
      (config.problem_type == ProblemType::Unset && config.num_labels == 1)) {
    v.regression = true;
    return v;
  }
  const bool named = has_named_labels(config);
  const std::vector<std::string> names = model_label_names(config);
  for (int64_t i = 0; i < config.num_labels; ++i) {
    const std::string& name = names[static_cast<size_t>(i)];
    v.names.push_back(name);
    v.ids[name] = i;
    if (!named) v.ids[std::to_string(i)] = i;
  }
  return v;
}

namespace {

// The model's labels for a tag set, as fit_labels does for text labels.
LabelVocabulary fit_tags(const TaggedCorpus& train, ModelConfig& config, bool from_directory) {
  LabelVocabulary tags = tag_vocabulary(train);
  if (from_directory && has_named_labels(config)) {
    const LabelVocabulary model = model_label_vocabulary(config);
    bool covered = true;
    for (const std::string& name : tags.names) covered = covered && model.ids.count(name) != 0;
    if (covered) tags = model;
  }
  config.num_labels = tags.num_labels();
  config.problem_type = ProblemType::Unset;
  config.id2label.clear();
  for (size_t i = 0; i < tags.names.size(); ++i) config.id2label[static_cast<int64_t>(i)] = tags.names[i];
  return tags;
}

}  // namespace

std::optional<bool> token_prefix_space(const ModelConfig& config) {
  static const std::set<std::string> spaced = {"roberta", "gpt2", "bloom", "deberta"};
  if (spaced.count(config.model_type) != 0) return true;
  return std::nullopt;
}

std::string token_words_column(const std::string& text_column) {
  return text_column == "text" ? "tokens" : text_column;
}

std::string token_tags_column(const std::string& label_column) {
  return label_column == "label" ? "tags" : label_column;
}

Dataset read_token_data(const std::string& path, const std::string& text_column, const std::string& label_column,
                        const data::TextTokenizer& tokenizer, const LabelVocabulary* tags,
                        const TokenDataOptions& options, std::vector<std::string>* notes,
                        TaggedCorpus* corpus_out) {
  TaggedCorpus corpus =
      read_tagged_corpus(path, token_words_column(text_column), tags ? token_tags_column(label_column) : "");
  if (notes != nullptr) {
    if (corpus.blank_lines_skipped > 0)
      notes->push_back(fmt::format("Skipped {} blank line{} of {}", corpus.blank_lines_skipped,
                                   corpus.blank_lines_skipped == 1 ? "" : "s", path));
    if (corpus.empty_sentences_skipped > 0)
      notes->push_back(fmt::format("Skipped {} sentence{} without words in {}", corpus.empty_sentences_skipped,
                                   corpus.empty_sentences_skipped == 1 ? "" : "s", path));
  }
  Dataset d = tokenize_tagged_corpus(corpus, tokenizer, tags, options);
  if (corpus_out != nullptr) *corpus_out = std::move(corpus);
  return d;
}

namespace {

// The collator's settings for masked-LM data: --mlm-probability; the mask id
// from --mask-token-id, else `tokenizer`'s (-1 when neither gives one); random
// replacements among min(vocab_size, the tokenizer's size) ids.
std::shared_ptr<MaskingOptions> masking_options(const TrainingArguments& args, const ModelConfig& config,
                                                const data::TextTokenizer* tokenizer,
                                                const nlohmann::json& tokenizer_config) {
  auto masking = std::make_shared<MaskingOptions>();
  masking->probability = args.mlm_probability;
  masking->mask_token_id = args.mask_token_id;
  masking->random_tokens = config.vocab_size;
  if (tokenizer != nullptr) {
    if (masking->mask_token_id < 0) masking->mask_token_id = mask_token_id(*tokenizer, tokenizer_config);
    masking->random_tokens = std::min<int64_t>(config.vocab_size, static_cast<int64_t>(tokenizer->vocab_size()));
  }
  return masking;
}

}  // namespace

TrainingData load_training_data(const TrainingArguments& args, ModelSource& source) {
  TrainingData out;
  ModelConfig& config = source.config;
  if (!args.task.empty()) set_model_task(config, args.task);
  const bool token_task = model_task(config) == kTokenClassification;
  const bool mlm_task = model_task(config) == kMaskedLm;
  auto text_file = [&](const std::string& path) {
    return is_text_data_file(path) || (token_task && is_conll_file(path)) ||
           (mlm_task && (lower_extension(path) == ".txt" || lower_extension(path) == ".text"));
  };
  const bool train_text = !args.train_file.empty() && text_file(args.train_file);
  const bool eval_text = !args.validation_file.empty() && text_file(args.validation_file);
  const bool qa_task = model_task(config) == kQuestionAnswering;
  if (args.label_all_tokens && !token_task)
    fail("--label-all-tokens: only for token classification (--task token-classification)");
  if (eval_text && !train_text)
    fail("--validation-file {}: text validation data needs a text --train-file (its labels name the classes)",
         args.validation_file);
  if (!train_text && !args.vocab.empty())
    fail("--vocab {}: only for text data (a .jsonl, .json, .csv or .tsv --train-file)", args.vocab);
  if (!train_text && !args.do_lower_case.empty())
    fail("--do-lower-case {}: only for text data (a .jsonl, .json, .csv or .tsv --train-file)", args.do_lower_case);

  if (train_text) {
    const std::string what = "--train-file " + args.train_file;
    TokenizerSettings settings = resolve_tokenizer(args.vocab, source.directory, args.do_lower_case, what);
    if (args.max_seq_length > config.max_sequence_length())
      fail("--max-seq-length {}: longer than the model's {}", args.max_seq_length,
           max_sequence_length_text(config));
    const data::TextTokenizer tokenizer = load_tokenizer(settings);
    const auto vocab_size = static_cast<int64_t>(tokenizer.vocab_size());
    if (source.directory.empty()) {
      if (config.vocab_size != vocab_size)
        out.notes.push_back(fmt::format("The {} preset's vocab_size set to {}, the size of {}", source.preset,
                                        vocab_size, tokenizer.file()));
      config.vocab_size = vocab_size;
      if (config.pad_token_id >= vocab_size) config.pad_token_id = tokenizer.pad_id();
    } else if (vocab_size > config.vocab_size) {
      fail("{}: {} tokens, more than the model's vocab_size {} ({})", tokenizer.file(), vocab_size,
           config.vocab_size, source.directory);
    }
    if (!settings.config.contains("model_max_length")) settings.model_max_length = config.max_sequence_length();
    if (model_task(config) == kMultipleChoice) {
      // run_swag's choices: (sent1, sent2 + " " + ending_i), each example's padded to the file's longest.
      ChoiceDataOptions options;  // run_swag's tokenizer call: the tokenizer file's own prefix-space setting
      options.max_seq_length = args.max_seq_length;
      out.train = read_choice_data(args.train_file, tokenizer, options);
      if (eval_text) out.eval = read_choice_data(args.validation_file, tokenizer, options);
      out.notes.push_back(fmt::format("{}: {} examples of {} choices, each choice padded to {} tokens",
                                      args.train_file, out.train.size, out.train.choices,
                                      out.train.seq_len / out.train.choices));
      out.tokenizer = settings;
    } else if (mlm_task) {
      // run_mlm's blocks (or lines), masked batch by batch.
      MlmTextOptions options;
      options.max_seq_length = args.max_seq_length;
      options.line_by_line = args.line_by_line;
      options.text_column = args.text_column;
      auto masked = [&](const std::string& path) {
        return prepare_mlm_dataset(read_mlm_texts(path, args.text_column), path, tokenizer, options, &out.notes);
      };
      const auto masking = masking_options(args, config, &tokenizer, settings.config);
      if (masking->mask_token_id < 0)
        fail("{}: no mask token ([MASK] or <mask>, or tokenizer_config.json's mask_token); give --mask-token-id",
             tokenizer.file());
      out.train = masked(args.train_file);
      out.train.masking = masking;
      if (eval_text) {
        out.eval = masked(args.validation_file);
        out.eval->masking = masking;
      }
      out.tokenizer = settings;
    } else if (qa_task) {
      // run_qa's windows, each batch padded to its longest (pad_to_max_length false: DataCollatorWithPadding).
      QaFeatureOptions options;
      options.max_seq_length = args.max_seq_length;
      options.doc_stride = args.doc_stride;
      options.pad_to_max_length = false;
      options.add_prefix_space = token_prefix_space(config);
      auto features = [&](const std::string& path) {
        const QaCorpus corpus = read_qa_corpus(path);
        QaTrainFeatures f = prepare_train_features(corpus, tokenizer, options);
        out.notes.push_back(fmt::format("{}: {} questions ({} with an answer) in {} windows of at most {} tokens",
                                        path, corpus.examples.size(), f.answerable, f.data.size,
                                        args.max_seq_length));
        if (!f.uncovered.empty())
          out.notes.push_back(fmt::format(
              "{}: {} of {} answers lie in no window whole (the first: question '{}', line {}): those windows "
              "train as unanswerable, as run_qa's do",
              path, f.uncovered.size(), f.answerable, corpus.examples[static_cast<size_t>(f.uncovered[0])].id,
              corpus.examples[static_cast<size_t>(f.uncovered[0])].line));
        return std::move(f.data);
      };
      out.train = features(args.train_file);
      if (eval_text) out.eval = features(args.validation_file);
      out.tokenizer = settings;
    } else if (token_task) {
      const TaggedCorpus train = read_tagged_corpus(args.train_file, token_words_column(args.text_column),
                                                    token_tags_column(args.label_column));
      const LabelVocabulary tags = fit_tags(train, config, !source.directory.empty());
      TokenDataOptions options;
      options.max_seq_length = args.max_seq_length;
      options.label_all_tokens = args.label_all_tokens;
      options.add_prefix_space = token_prefix_space(config);
      out.train = read_token_data(args.train_file, args.text_column, args.label_column, tokenizer, &tags, options,
                                  &out.notes, nullptr);
      if (eval_text)
        out.eval = read_token_data(args.validation_file, args.text_column, args.label_column, tokenizer, &tags,
                                   options, &out.notes, nullptr);
      out.tokenizer = settings;
    } else {
    TextColumns columns{args.text_column, args.text_pair_column, args.label_column};
    if (columns.label.empty()) fail("--label-column: training needs labels");
    const TextTable train = read_text_table(args.train_file, columns);
    const LabelVocabulary labels = fit_labels(train, config, !source.directory.empty());
    TextDataOptions options;
    options.max_seq_length = args.max_seq_length;
    out.train = tokenize_text_table(train, tokenizer, &labels, options);
    auto note_blank = [&](const TextTable& t) {
      if (t.blank_lines_skipped > 0)
        out.notes.push_back(fmt::format("Skipped {} blank line{} of {}", t.blank_lines_skipped,
                                        t.blank_lines_skipped == 1 ? "" : "s", t.source));
    };
    note_blank(train);
    if (eval_text) {
      const TextTable eval = read_text_table(args.validation_file, columns);
      note_blank(eval);
      out.eval = tokenize_text_table(eval, tokenizer, &labels, options);
    }
    out.tokenizer = settings;
    }
  } else {
    out.train = args.train_file.empty() ? make_dummy_dataset(args.dummy_size, args.dummy_seq_len, args.seed)
                                        : load_tensor_dataset(args.train_file);
    if (args.train_file.empty() && config.num_labels == 1) {
      // Dummy labels are all 0; a regression model gets them as floats.
      out.train.label_dtype = DType::F32;
      out.train.labels_f32.assign(out.train.size, 0.0f);
      out.train.labels_i64.clear();
    }
    if (args.train_file.empty() && model_task(config) == kQuestionAnswering) {
      // The dummy answers of question answering: the first token ([CLS], as an unanswerable question's).
      out.train.span_labels = true;
      out.train.label_width = 2;
      out.train.labels_i64.assign(static_cast<size_t>(2 * out.train.size), 0);
    }
    if (args.train_file.empty() && model_task(config) == kMultipleChoice) {
      // The dummy examples of multiple choice: kDummyChoices sequences of --dummy-seq-len each, label 0.
      out.train = make_dummy_dataset(args.dummy_size, kDummyChoices * args.dummy_seq_len, args.seed);
      out.train.choices = kDummyChoices;
    }
    if (args.train_file.empty() && token_task) {
      // The dummy labels of token classification: 0 for every token.
      out.train.token_labels = true;
      out.train.label_width = out.train.seq_len;
      out.train.labels_i64.assign(static_cast<size_t>(out.train.size * out.train.seq_len), 0);
    }
    if (!source.directory.empty()) out.tokenizer = read_tokenizer_settings(source.directory);
    if (mlm_task && (args.train_file.empty() || !out.train.has_labels())) {
      // Tokens without labels (the dummy data, tensors of input_ids alone): masked batch by batch, with the
      // model directory's tokenizer's mask and special tokens when it has one.
      std::optional<data::TextTokenizer> tokenizer;
      if (out.tokenizer) tokenizer = load_tokenizer(*out.tokenizer);
      const auto masking = masking_options(args, config, tokenizer ? &*tokenizer : nullptr,
                                           out.tokenizer ? out.tokenizer->config : nlohmann::json::object());
      if (tokenizer) {
        for (const char* name : {"[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]", "<s>", "</s>", "<pad>", "<unk>",
                                 "<mask>"})
          if (const int32_t id = tokenizer->token_to_id(name); id >= 0) masking->special_ids.push_back(id);
      }
      if (masking->mask_token_id < 0) {
        masking->mask_token_id = 103;
        out.notes.push_back("Masking with id 103 (BERT's [MASK]) for the mask token; --mask-token-id sets another");
      }
      if (masking->mask_token_id >= config.vocab_size)
        fail("--mask-token-id {}: outside the model's vocab_size {}", masking->mask_token_id, config.vocab_size);
      if (config.pad_token_id >= 0) masking->special_ids.push_back(config.pad_token_id);
      out.train.labels_i64.clear();
      out.train.labels_f32.clear();
      out.train.masking = masking;
    }
  }
  // Masked-LM data masked as it is batched: a label per token, made then.
  for (Dataset* d : {&out.train, out.eval ? &*out.eval : nullptr})
    if (d != nullptr && d->masking) {
      d->token_labels = true;
      d->label_dtype = DType::I64;
      d->label_width = d->seq_len;
    }
  validate_dataset(out.train, config, model_task(config));
  if (!args.validation_file.empty()) {
    if (!out.eval) {
      out.eval = load_tensor_dataset(args.validation_file);
      if (mlm_task && !out.eval->has_labels()) {
        if (!out.train.masking) fail("{}: masked-LM validation data without labels needs training data without "
                                     "labels too (it is masked as they are)", args.validation_file);
        out.eval->masking = out.train.masking;
        out.eval->token_labels = true;
        out.eval->label_dtype = DType::I64;
        out.eval->label_width = out.eval->seq_len;
      }
    }
    validate_dataset(*out.eval, config, model_task(config));
    if (out.eval->label_dtype != out.train.label_dtype || out.eval->token_labels != out.train.token_labels ||
        (!out.train.token_labels && out.eval->label_width != out.train.label_width))
      fail("{}: its labels ({} x {}) are not of the training data's kind ({} x {})", out.eval->source,
           dtype_name(out.eval->label_dtype), out.eval->label_width, dtype_name(out.train.label_dtype),
           out.train.label_width);
  }
  return out;
}

}  // namespace anatomy
