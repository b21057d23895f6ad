// Tests of the task heads' tokenizer calls (data/text_tokenizer.h): pre-split words with word_ids
// (encode_words), question-answering windows (encode_overflowing) and sequence_ids, against what
// transformers' fast tokenizers give (tests/fixtures/task-tokenizers, made by
// tests/tools/make_task_tokenizer_fixtures.py), for tokenizer.json files and vocab.txt vocabularies.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/data/text_tokenizer.h"
#include "anatomy/data/tokenizer/tokenizer.h"

namespace anatomy::data {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(ANATOMY_FIXTURES_DIR);
const fs::path kTask = kFixtures / "task-tokenizers";

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) ADD_FAILURE() << "cannot read " << path;
  return nlohmann::json::parse(in);
}

const nlohmann::json& inputs() {
  static const nlohmann::json value = read_json(kTask / "inputs.json");
  return value;
}

// The tokenizer files of the fixtures, each with its expected outputs.
std::vector<fs::path> cases() {
  std::vector<fs::path> out;
  if (!fs::exists(kTask)) return out;
  for (const auto& entry : fs::directory_iterator(kTask))
    if (entry.path().extension() == ".json" && entry.path().filename() != "inputs.json") out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

// A case's tokenizer: tokenizers/<dir>/tokenizer.json, or "vocab:<dir>", the vocab.txt next to the case file.
TextTokenizer load(const fs::path& file, const nlohmann::json& record) {
  const std::string source = record.at("tokenizer").get<std::string>();
  if (source.rfind("vocab:", 0) == 0) {
    WordPieceOptions options;
    options.lowercase = record.at("options").at("lowercase").get<bool>();
    const fs::path vocab = kTask / file.stem() / "vocab.txt";
    return TextTokenizer(WordPieceTokenizer::from_file(vocab.string(), options), vocab.string());
  }
  return TextTokenizer::load((kFixtures / "tokenizers" / source / "tokenizer.json").string(), "", {});
}

std::optional<bool> add_prefix_space(const nlohmann::json& record) {
  if (record.contains("options") && record["options"].contains("add_prefix_space"))
    return record["options"]["add_prefix_space"].get<bool>();
  return std::nullopt;
}

// An expected encoding: the fixture's tokens up to the last attended one, then padding to "length".
struct Expected {
  std::vector<int32_t> ids, types, mask, sequence_ids, word_ids;
  std::vector<std::pair<uint32_t, uint32_t>> offsets;
  bool has_offsets = false, has_words = false;
};

Expected expected(const nlohmann::json& r, int32_t pad_id) {
  Expected e;
  e.ids = r.at("input_ids").get<std::vector<int32_t>>();
  const size_t n = e.ids.size(), length = r.at("length").get<size_t>();
  for (const char c : r.at("token_type_ids").get<std::string>()) e.types.push_back(c - '0');
  for (const char c : r.at("sequence_ids").get<std::string>()) e.sequence_ids.push_back(c == '-' ? -1 : c - '0');
  e.mask.assign(n, 1);
  if (r.contains("offsets")) {
    e.has_offsets = true;
    const auto flat = r["offsets"].get<std::vector<uint32_t>>();
    for (size_t i = 0; i + 1 < flat.size(); i += 2) e.offsets.emplace_back(flat[i], flat[i + 1]);
    e.offsets.resize(length, {0, 0});
  }
  if (r.contains("word_ids")) {
    e.has_words = true;
    for (const nlohmann::json& w : r["word_ids"]) e.word_ids.push_back(w.is_null() ? -1 : w.get<int32_t>());
    e.word_ids.resize(length, -1);
  }
  e.ids.resize(length, pad_id);
  e.types.resize(length, 0);
  e.mask.resize(length, 0);
  e.sequence_ids.resize(length, -1);
  return e;
}

// Compares `got` with the fixture's record; the first few differences are reported.
class Comparison {
 public:
  explicit Comparison(std::string what) : what_(std::move(what)) {}
  ~Comparison() { EXPECT_EQ(differing_, 0u) << what_ << ": " << differing_ << " of " << count_ << " encodings differ"; }

  void check(const Encoding& got, const nlohmann::json& record, int32_t pad_id, const std::string& input) {
    ++count_;
    const Expected want = expected(record, pad_id);
    std::string field;
    if (got.input_ids != want.ids) field = "input_ids";
    else if (got.token_type_ids != want.types) field = "token_type_ids";
    else if (got.attention_mask != want.mask) field = "attention_mask";
    else if (got.sequence_ids != want.sequence_ids) field = "sequence_ids";
    else if (want.has_offsets && got.offsets != want.offsets) field = "offsets";
    else if (want.has_words && got.word_ids != want.word_ids) field = "word_ids";
    if (field.empty()) return;
    if (++differing_ > 3) return;
    ADD_FAILURE() << what_ << ", " << input << ": " << field << " differ\n  ids      " << nlohmann::json(got.input_ids)
                  << "\n  expected " << nlohmann::json(want.ids) << "\n  sequence " << nlohmann::json(got.sequence_ids)
                  << "\n  expected " << nlohmann::json(want.sequence_ids) << "\n  offsets  "
                  << nlohmann::json(got.offsets) << "\n  expected " << nlohmann::json(want.offsets) << "\n  words    "
                  << nlohmann::json(got.word_ids) << "\n  expected " << nlohmann::json(want.word_ids);
  }

 private:
  std::string what_;
  size_t count_ = 0, differing_ = 0;
};

// The library's error message, as far as anatomy's repeats it: up to its note in parentheses, without the
// trailing comma and space of the stride one.
std::string key_phrase(std::string message) {
  if (const size_t note = message.find(" (note that"); note != std::string::npos) message.resize(note);
  while (!message.empty() && (message.back() == ',' || message.back() == ' ')) message.pop_back();
  return message;
}

void expect_error(const std::function<void()>& call, const std::string& phrase, const std::string& what) {
  try {
    call();
    ADD_FAILURE() << what << ": accepted; the library says \"" << phrase << "\"";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(phrase), std::string::npos) << what << ": \"" << message << "\" lacks \"" << phrase << "\"";
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(TaskTokenizers, FixturesCoverTheTokenizers) {
  std::vector<std::string> names;
  for (const fs::path& file : cases()) names.push_back(file.stem().string());
  for (const char* name : {"wordpiece-uncased-vocab", "wordpiece-uncased", "roberta-bpe-prefix", "xlmr-unigram",
                           "debertav3-unigram", "modernbert-bpe"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
}

// encode_words against tokenizer(words, is_split_into_words=True, truncation=True, max_length, padding=True).
TEST(TaskTokenizers, PreSplitWordsMatchTransformers) {
  std::vector<std::vector<std::string>> sentences;
  for (const nlohmann::json& words : inputs().at("words")) sentences.push_back(words.get<std::vector<std::string>>());
  for (const fs::path& file : cases()) {
    const nlohmann::json record = read_json(file);
    if (!record.contains("words")) continue;
    SCOPED_TRACE(file.stem().string());
    const TextTokenizer tokenizer = load(file, record);
    const nlohmann::json& section = record["words"];
    EncodeOptions options;
    options.truncate_to = section.at("max_length").get<size_t>();
    options.padding = Padding::kLongest;
    options.add_prefix_space = add_prefix_space(record);
    const std::vector<Encoding> got = tokenizer.encode_words(sentences, options, 2);
    const nlohmann::json& want = section.at("encodings");
    ASSERT_EQ(got.size(), want.size());
    Comparison comparison(file.stem().string() + " words");
    for (size_t i = 0; i < got.size(); ++i)
      comparison.check(got[i], want[i], record.at("pad_id").get<int32_t>(), nlohmann::json(sentences[i]).dump());
  }
}

// encode_overflowing(_batch) against tokenizer(questions, contexts, truncation="only_second", max_length, stride,
// return_overflowing_tokens=True, return_offsets_mapping=True, padding), and the library's refusals.
TEST(TaskTokenizers, OverflowingWindowsMatchTransformers) {
  for (const fs::path& file : cases()) {
    const nlohmann::json record = read_json(file);
    if (!record.contains("qa")) continue;
    SCOPED_TRACE(file.stem().string());
    const TextTokenizer tokenizer = load(file, record);
    const int32_t pad_id = record.at("pad_id").get<int32_t>();
    for (const nlohmann::json& section : record["qa"]) {
      const nlohmann::json& examples = inputs().at("qa").at(section.at("contexts").get<std::string>());
      OverflowOptions options;
      options.max_length = section.at("max_length").get<size_t>();
      options.stride = section.at("stride").get<size_t>();
      const std::string padding = section.at("padding").get<std::string>();
      options.padding = padding == "max_length" ? Padding::kMaxLength
                        : padding == "longest"  ? Padding::kLongest
                                                : Padding::kNone;
      options.add_prefix_space = add_prefix_space(record);
      const std::string what = fmt::format("{} qa {}/{}", file.stem().string(), options.max_length, options.stride);

      std::vector<std::string> texts;
      for (const nlohmann::json& index : section.at("examples")) {
        texts.push_back(examples[index.get<size_t>()].at("question").get<std::string>());
        texts.push_back(examples[index.get<size_t>()].at("context").get<std::string>());
      }
      std::vector<TextInput> batch;
      for (size_t i = 0; i < texts.size(); i += 2) batch.push_back({texts[i], texts[i + 1]});
      const OverflowingEncodings got = tokenizer.encode_overflowing_batch(batch, options, 2);
      const nlohmann::json& want = section.at("features");
      EXPECT_EQ(got.overflow_to_sample_mapping,
                section.at("overflow_to_sample_mapping").get<std::vector<int32_t>>()) << what;
      ASSERT_EQ(got.features.size(), want.size()) << what;
      Comparison comparison(what);
      for (size_t i = 0; i < want.size(); ++i)
        comparison.check(got.features[i], want[i], pad_id,
                         fmt::format("feature {} (example {})", i, got.overflow_to_sample_mapping[i]));

      // One input alone gives its windows of the batch (padding aside).
      size_t first = 0;
      for (size_t example = 0; example < batch.size(); ++example) {
        const std::vector<Encoding> alone = tokenizer.encode_overflowing(batch[example], options);
        for (size_t w = 0; w < alone.size() && first + w < got.features.size(); ++w) {
          const std::vector<int32_t>& in_batch = got.features[first + w].input_ids;
          const auto attended = static_cast<std::ptrdiff_t>(std::count(alone[w].attention_mask.begin(),
                                                                       alone[w].attention_mask.end(), 1));
          EXPECT_EQ(std::vector<int32_t>(alone[w].input_ids.begin(), alone[w].input_ids.begin() + attended),
                    std::vector<int32_t>(in_batch.begin(), in_batch.begin() + std::min<std::ptrdiff_t>(
                                                                     attended, std::ssize(in_batch))))
              << what << " example " << example;
        }
        first += alone.size();
      }
      EXPECT_EQ(first, got.features.size()) << what;

      for (const nlohmann::json& error : section.at("errors")) {
        const nlohmann::json& example = examples[error.at("example").get<size_t>()];
        const std::string question = example.at("question").get<std::string>();
        const std::string context = example.at("context").get<std::string>();
        expect_error([&] { tokenizer.encode_overflowing({question, context}, options); },
                     key_phrase(error.at("error").get<std::string>()), what);
      }
    }
    for (const nlohmann::json& probe : record.at("qa_errors")) {
      const nlohmann::json& example =
          inputs().at("qa").at(probe.at("contexts").get<std::string>())[probe.at("example").get<size_t>()];
      const std::string question = example.at("question").get<std::string>();
      const std::string context = example.at("context").get<std::string>();
      OverflowOptions options;
      options.max_length = probe.at("max_length").get<size_t>();
      options.stride = probe.at("stride").get<size_t>();
      options.add_prefix_space = add_prefix_space(record);
      const std::vector<TextInput> one = {{question, context}};
      expect_error([&] { tokenizer.encode_overflowing_batch(one, options); },
                   key_phrase(probe.at("error").get<std::string>()),
                   fmt::format("{} stride {} at max_length {}", file.stem().string(), options.stride,
                               options.max_length));
    }
  }
}

// sequence_ids (and ids, type ids) of ordinary texts and pairs through encode_batch, as tokenizer(texts, pairs,
// padding=True) gives them, without truncation and with longest_first to 24 tokens.
TEST(TaskTokenizers, SequenceIdsMatchTransformers) {
  std::vector<std::string> texts;
  std::vector<std::optional<std::string>> pairs;
  for (const nlohmann::json& p : inputs().at("pairs")) {
    texts.push_back(p.at("text").get<std::string>());
    pairs.push_back(p.at("text_pair").is_null() ? std::nullopt
                                                : std::optional<std::string>(p["text_pair"].get<std::string>()));
  }
  for (const fs::path& file : cases()) {
    const nlohmann::json record = read_json(file);
    if (!record.contains("pairs")) continue;
    SCOPED_TRACE(file.stem().string());
    const TextTokenizer tokenizer = load(file, record);
    const int32_t pad_id = record.at("pad_id").is_null() ? -1 : record["pad_id"].get<int32_t>();
    for (const nlohmann::json& section : record["pairs"]) {
      EncodeOptions options;
      options.truncate_to = section.at("max_length").get<size_t>();
      options.padding = pad_id >= 0 ? Padding::kLongest : Padding::kNone;
      // transformers takes the texts alone and the pairs in two batches, each padded to its longest.
      std::vector<Encoding> got(texts.size());
      for (const bool with_pair : {false, true}) {
        std::vector<TextInput> batch;
        std::vector<size_t> indexes;
        for (size_t i = 0; i < texts.size(); ++i)
          if (pairs[i].has_value() == with_pair) {
            batch.push_back({texts[i], pairs[i] ? std::optional<std::string_view>(*pairs[i]) : std::nullopt});
            indexes.push_back(i);
          }
        std::vector<Encoding> encoded = tokenizer.encode_batch(batch, options, 2);
        for (size_t j = 0; j < indexes.size(); ++j) got[indexes[j]] = std::move(encoded[j]);
      }
      const nlohmann::json& want = section.at("encodings");
      ASSERT_EQ(want.size(), got.size());
      Comparison comparison(fmt::format("{} pairs (truncation {})", file.stem().string(), options.truncate_to));
      for (size_t i = 0; i < got.size(); ++i)
        comparison.check(got[i], want[i], pad_id, nlohmann::json(texts[i]).dump());
    }
  }
}

// Without a post-processor the library marks no ranges on a single text: every token is sequence 0, the
// padding too; a pair's padding is none (tokenizers 0.23.3, char-bpe with padding by id 0).
TEST(TaskTokenizers, SequenceIdsWithoutPostProcessor) {
  nlohmann::json document = read_json(kFixtures / "tokenizers" / "char-bpe" / "tokenizer.json");
  document["padding"] = {{"pad_id", 0}};
  const tok::Tokenizer tokenizer(document, "char-bpe");
  EncodeOptions options;
  options.padding = Padding::kLongest;
  const std::vector<TextInput> singles = {{"ab cd", std::nullopt}, {"ab cd ef gh ij", std::nullopt}};
  std::vector<Encoding> e = tokenizer.encode_batch(singles, options);
  EXPECT_EQ(e[0].input_ids, (std::vector<int32_t>{71, 74, 75, 78, 0, 0, 0, 0, 0}));
  EXPECT_EQ(e[0].sequence_ids, std::vector<int32_t>(9, 0));
  EXPECT_EQ(e[1].sequence_ids, std::vector<int32_t>(9, 0));
  const std::vector<TextInput> pairs = {{"ab cd", "x"}, {"ab", "cd ef gh"}};
  e = tokenizer.encode_batch(pairs, options);
  EXPECT_EQ(e[0].sequence_ids, (std::vector<int32_t>{0, 0, 0, 0, 1, -1, -1}));
  EXPECT_EQ(e[1].sequence_ids, (std::vector<int32_t>{0, 0, 1, 1, 1, 1, 1}));
  const std::vector<std::vector<std::string>> words = {{"ab", "cd"}, {"ab", "cd", "ef", "gh"}};
  e = tokenizer.encode_words_batch(words, options);
  EXPECT_EQ(e[0].sequence_ids, std::vector<int32_t>(7, 0));
  EXPECT_EQ(e[0].word_ids, (std::vector<int32_t>{0, 0, 1, 1, -1, -1, -1}));
  EXPECT_EQ(e[1].word_ids, (std::vector<int32_t>{0, 0, 1, 1, 2, 2, 3}));
}

// The vocab.txt path of encode_batch (WordPieceTokenizer) and the tokenizer.json pipeline TextTokenizer makes
// of it for the task calls agree on every text and pair of the corpus.
TEST(TaskTokenizers, WordPiecePipelineAgreesWithWordPiece) {
  const fs::path vocab = kTask / "wordpiece-uncased-vocab" / "vocab.txt";
  const TextTokenizer tokenizer(WordPieceTokenizer::from_file(vocab.string(), {}), vocab.string());
  std::ifstream in(kFixtures / "tokenizers" / "corpus-subset.jsonl");
  std::vector<std::string> texts, pairs;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json r = nlohmann::json::parse(line);
    texts.push_back(r.at("text").get<std::string>());
    pairs.push_back(r.contains("text_pair") && !r["text_pair"].is_null() ? r["text_pair"].get<std::string>() : "");
  }
  ASSERT_GT(texts.size(), 100u);
  std::vector<TextInput> batch;
  for (size_t i = 0; i < texts.size(); ++i) batch.push_back({texts[i], pairs[i]});
  const std::vector<Encoding> fast = tokenizer.encode_batch(batch, {});
  OverflowOptions whole;
  whole.max_length = 100000;
  whole.stride = 0;
  const OverflowingEncodings windows = tokenizer.encode_overflowing_batch(batch, whole);
  ASSERT_EQ(windows.features.size(), fast.size());
  for (size_t i = 0; i < fast.size(); ++i) {
    EXPECT_EQ(windows.features[i].input_ids, fast[i].input_ids) << texts[i];
    EXPECT_EQ(windows.features[i].token_type_ids, fast[i].token_type_ids) << texts[i];
    EXPECT_EQ(windows.features[i].sequence_ids, fast[i].sequence_ids) << texts[i];
  }
}

TEST(TaskTokenizers, WindowErrorsNameTheInput) {
  const TextTokenizer tokenizer = TextTokenizer::load(
      (kFixtures / "tokenizers" / "wordpiece-uncased" / "tokenizer.json").string(), "", {});
  const std::string context(400, 'a');
  const std::vector<TextInput> inputs = {{"a question", "a context"}, {"a b c d e f g h", "word " + context}};
  OverflowOptions options;
  options.max_length = 11;
  options.stride = 0;
  expect_error([&] { tokenizer.encode_overflowing_batch(inputs, options); }, "input 2: ", "second input");
  options.max_length = 3;
  expect_error([&] { tokenizer.encode_overflowing_batch(inputs, options); }, "adds 3 special tokens", "max_length 3");
  const std::vector<TextInput> single = {{"a b c d e f g h i j k l m n o p", std::nullopt}};
  options.max_length = 8;
  expect_error([&] { tokenizer.encode_overflowing_batch(single, options); },
               "Truncation error: Second sequence not provided", "a single text");
  const std::vector<std::vector<std::string>> words = {{"fine"}, {"bad\xff"}};
  expect_error([&] { tokenizer.encode_words(words, {}); }, "input 2: ", "invalid UTF-8 word");
}

}  // namespace
}  // namespace anatomy::data
