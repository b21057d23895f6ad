// fuzz_text_data: the text data formats, each read and then prepared as a
// run prepares it, with a small fixed WordPiece vocabulary (TextTokenizer, so
// the task calls run the tokenizer.json pipeline too). The input's first byte
// picks the format (its value modulo 10); the rest is the file:
//   0 CSV table (.csv: text, pair, label)   5 SQuAD (.json): train and eval features, post-processing
//   1 TSV table (.tsv: text, label)         6 SQuAD JSON lines (.jsonl), the same
//   2 JSON-lines table (.jsonl: text, label) 7 masked-LM text (.txt), grouped and line by line
//   3 CoNLL (.conll), tagged                8 SWAG multiple choice (.jsonl)
//   4 tagged JSON lines (.jsonl)            9 JSON table (.json), no labels; masked-LM column
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "anatomy/data/choice_data.h"
#include "anatomy/data/mlm_data.h"
#include "anatomy/data/qa_data.h"
#include "anatomy/data/text_dataset.h"
#include "anatomy/data/text_table.h"
#include "anatomy/data/token_data.h"
#include "anatomy/data/wordpiece.h"
#include "fuzz_util.h"

using namespace anatomy;

namespace {

const data::TextTokenizer& tokenizer() {
  static const data::TextTokenizer t = [] {
    std::vector<std::string> lines = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (const char* word : {"the", "a", "of", "text", "label", "is", "in", "and", "to", "eu", "rejects", "german",
                             "call", "what", "does", "say", "license", "apache", "mit", "ing", "un", "##s",
                             "##ing", "##ed", ".", ",", "!", "?", "\"", "'", "-", "é", "你", "好"})
      lines.emplace_back(word);
    for (char c = 'a'; c <= 'z'; ++c) {
      lines.emplace_back(1, c);
      lines.push_back(std::string("##") + c);
    }
    for (char c = '0'; c <= '9'; ++c) lines.emplace_back(1, c);
    return data::TextTokenizer(data::WordPieceTokenizer(lines, {}, "vocab.txt"), "vocab.txt");
  }();
  return t;
}

void table(const std::string& path, const TextColumns& columns) {
  const TextTable t = read_text_table(path, columns);
  std::optional<LabelVocabulary> labels;
  if (!columns.label.empty()) labels = LabelVocabulary::from(t);
  TextDataOptions options;
  options.max_seq_length = 16;
  options.threads = 1;
  (void)tokenize_text_table(t, tokenizer(), labels ? &*labels : nullptr, options);
}

void tagged(const std::string& path) {
  const TaggedCorpus corpus = read_tagged_corpus(path, "tokens", "tags");
  const LabelVocabulary tags = tag_vocabulary(corpus);
  TokenDataOptions options;
  options.max_seq_length = 16;
  options.threads = 1;
  options.label_all_tokens = corpus.sentences.size() % 2 == 0;
  const Dataset d = tokenize_tagged_corpus(corpus, tokenizer(), &tags, options);
  std::vector<int64_t> words;
  for (const TaggedSentence& s : corpus.sentences) words.push_back(static_cast<int64_t>(s.words.size()));
  (void)word_level(d, std::vector<int64_t>(d.input_ids.size(), 0), words);
}

void squad(const std::string& path) {
  const QaCorpus corpus = read_qa_corpus(path);
  QaFeatureOptions options;
  options.max_seq_length = 64;
  options.doc_stride = 16;
  options.threads = 1;
  options.cls_token_id = tokenizer().token_to_id("[CLS]");
  fuzz::expect_error([&] { (void)prepare_train_features(corpus, tokenizer(), options); });
  const QaEvalFeatures eval = prepare_validation_features(corpus, tokenizer(), options);
  const size_t n = eval.example_index.size();
  const int64_t width = options.max_seq_length;
  std::vector<float> start(n * width), end(n * width);
  for (size_t i = 0; i < start.size(); ++i) {
    start[i] = static_cast<float>((i * 7) % 11);
    end[i] = static_cast<float>((i * 5) % 13);
  }
  QaPostprocessOptions post;
  post.version_2_with_negative = corpus.has_unanswerable();
  post.n_best_size = 3;
  post.max_answer_length = 10;
  const QaPredictions predictions = postprocess_qa_predictions(corpus, eval, start, end, width, post);
  for (const auto& [id, answer] : predictions.predictions) (void)python_json_string(answer);
}

void mlm(const std::string& path, const std::string& column) {
  const std::vector<std::string> texts = read_mlm_texts(path, column);
  for (const bool line_by_line : {false, true}) {
    MlmTextOptions options;
    options.max_seq_length = 16;
    options.line_by_line = line_by_line;
    std::vector<std::string> notes;
    fuzz::expect_error([&] { (void)prepare_mlm_dataset(texts, path, tokenizer(), options, &notes); });
  }
}

void swag(const std::string& path) {
  ChoiceDataOptions options;
  options.max_seq_length = 24;
  (void)read_choice_data(path, tokenizer(), options, true);
  fuzz::expect_error([&] { (void)read_choice_data(path, tokenizer(), options, false); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view file = fuzz::as_text(data + 1, size - 1);
  (void)tokenizer();
  switch (data[0] % 10) {
    case 0:
      fuzz::expect_error([&] { table(fuzz::scratch_file("data.csv", file), {"text", "pair", "label"}); });
      break;
    case 1:
      fuzz::expect_error([&] { table(fuzz::scratch_file("data.tsv", file), {"text", "", "label"}); });
      break;
    case 2:
      fuzz::expect_error([&] { table(fuzz::scratch_file("data.jsonl", file), {"text", "", "label"}); });
      break;
    case 3:
      fuzz::expect_error([&] { tagged(fuzz::scratch_file("data.conll", file)); });
      break;
    case 4:
      fuzz::expect_error([&] { tagged(fuzz::scratch_file("data.jsonl", file)); });
      break;
    case 5:
      fuzz::expect_error([&] { squad(fuzz::scratch_file("data.json", file)); });
      break;
    case 6:
      fuzz::expect_error([&] { squad(fuzz::scratch_file("data.jsonl", file)); });
      break;
    case 7:
      fuzz::expect_error([&] { mlm(fuzz::scratch_file("data.txt", file), "text"); });
      break;
    case 8:
      fuzz::expect_error([&] { swag(fuzz::scratch_file("data.jsonl", file)); });
      break;
    case 9: {
      const std::string path = fuzz::scratch_file("data.json", file);
      fuzz::expect_error([&] { table(path, {"text", "", ""}); });
      fuzz::expect_error([&] { mlm(path, "text"); });
      break;
    }
  }
  return 0;
}
