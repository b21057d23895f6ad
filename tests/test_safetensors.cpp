// test_safetensors.cpp: the safetensors reader and writer, the sharded
// checkpoint set, and the file helpers (whole-file reads, atomic writes).
// Each malformed-file test writes the bad bytes to a temp directory and expects
// an anatomy::Error that names the file and the offending tensor or dtype.
#include <gtest/gtest.h>

#include "test_util.h"
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "anatomy/core/dtype.h"
#include "anatomy/core/error.h"
#include "anatomy/io/files.h"
#include "anatomy/io/safetensors.h"

namespace fs = std::filesystem;
using namespace anatomy;
using namespace anatomy::io;

namespace {

const std::string kFixtures = anatomy::test::fixtures_dir();

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            (std::string("anatomy_st_") + test->test_suite_name() + "_" + test->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file made of a given header text and data buffer.
std::string st_bytes(const std::string& header, const std::string& data, uint64_t header_len_override = UINT64_MAX) {
  uint64_t n = header_len_override == UINT64_MAX ? header.size() : header_len_override;
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

// Runs `body`, expecting an anatomy::Error whose message contains every one of `parts`.
template <typename Body>
void expect_error(Body body, const std::vector<std::string>& parts) {
  try {
    body();
    ADD_FAILURE() << "expected anatomy::Error containing '" << parts.front() << "'";
  } catch (const Error& e) {
    std::string message = e.what();
    for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << "message: " << message << "\nmissing: " << part;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "message is not one line: " << message;
  }
}

// Writes header + data as a file and expects opening it to fail, naming the file and `parts`.
void expect_malformed(const TempDir& dir, const std::string& header, const std::string& data,
                      const std::vector<std::string>& parts) {
  std::string path = dir.file("bad.safetensors");
  write_bytes(path, st_bytes(header, data));
  std::vector<std::string> all = {path};
  all.insert(all.end(), parts.begin(), parts.end());
  expect_error([&] { SafetensorsFile::open(path); }, all);
}

std::string zeros(size_t n) { return std::string(n, '\0'); }

}  // namespace

// ---------------------------------------------------------------------------
// Round trips

TEST(SafetensorsRoundTrip, AllDtypesWithMetadataAndPadding) {
  TempDir dir;
  const std::string path = dir.file("all.safetensors");
  std::vector<double> f64 = {1.5, -2.25, 1e300};
  std::vector<float> f32 = {0.1f, -3.0f, 7.5f, 1e-30f, 2.0f, 4.0f};
  std::vector<uint16_t> f16 = {float_to_f16(1.0f), float_to_f16(-0.5f), float_to_f16(65504.0f)};
  std::vector<uint16_t> bf16 = {float_to_bf16(3.0f), float_to_bf16(-1e20f)};
  std::vector<int64_t> i64 = {-(int64_t{1} << 62), 7};
  std::vector<int32_t> i32 = {-2147483647 - 1, 5, 6};
  std::vector<int16_t> i16 = {-32768, 32767};
  std::vector<int8_t> i8 = {-128, 127, 0};
  std::vector<uint8_t> u8 = {255, 0, 1};
  std::vector<uint8_t> boolean = {1, 0, 1, 1};
  std::vector<StWriteTensor> tensors = {
      {"z.f64", StDType::F64, {3}, f64.data()},          {"y.f32", StDType::F32, {2, 3}, f32.data()},
      {"x.f16", StDType::F16, {3}, f16.data()},          {"w.bf16", StDType::BF16, {1, 2}, bf16.data()},
      {"v.i64", StDType::I64, {2}, i64.data()},          {"u.i32", StDType::I32, {3}, i32.data()},
      {"t.i16", StDType::I16, {2}, i16.data()},          {"s.i8", StDType::I8, {3}, i8.data()},
      {"r.u8", StDType::U8, {3, 1}, u8.data()},          {"q.bool", StDType::BOOL, {2, 2}, boolean.data()},
      {"p.empty", StDType::F32, {0, 4}, nullptr},        {"o.scalar", StDType::F32, {}, f32.data()},
  };
  write_safetensors(path, tensors, {{"format", "pt"}, {"note", "round trip"}});

  // The raw layout: header length a multiple of 8, padded with spaces.
  std::vector<uint8_t> bytes = read_file_bytes(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(n));
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
  EXPECT_EQ(header.find("__metadata__"), 2u) << "metadata comes first, as the reference writer puts it";

  SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.path(), path);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().at("note"), "round trip");
  EXPECT_EQ(file.metadata().size(), 2u);
  EXPECT_EQ(file.names(), (std::vector<std::string>{"o.scalar", "p.empty", "q.bool", "r.u8", "s.i8", "t.i16", "u.i32",
                                                    "v.i64", "w.bf16", "x.f16", "y.f32", "z.f64"}));
  // Laid out in the given order, contiguously.
  uint64_t offset = 0;
  for (const StWriteTensor& t : tensors) {
    const StTensorInfo& info = file.info(t.name);
    EXPECT_EQ(info.begin, offset) << t.name;
    EXPECT_EQ(info.dtype, t.dtype) << t.name;
    EXPECT_EQ(info.shape, t.shape) << t.name;
    offset = info.end;
  }
  EXPECT_EQ(offset + 8 + n, bytes.size());

  EXPECT_EQ(file.read_f64("z.f64"), f64);
  EXPECT_EQ(file.read_f32("y.f32"), f32);
  EXPECT_EQ(file.read_f32("x.f16"), (std::vector<float>{1.0f, -0.5f, 65504.0f}));
  EXPECT_EQ(file.read_f64("w.bf16"), (std::vector<double>{3.0, static_cast<double>(bf16_to_float(float_to_bf16(-1e20f)))}));
  EXPECT_EQ(file.read_i64("v.i64"), i64);
  EXPECT_EQ(file.read_i64("u.i32"), (std::vector<int64_t>{-2147483648LL, 5, 6}));
  EXPECT_EQ(file.read_i64("t.i16"), (std::vector<int64_t>{-32768, 32767}));
  EXPECT_EQ(file.read_i64("s.i8"), (std::vector<int64_t>{-128, 127, 0}));
  EXPECT_EQ(file.read_i64("r.u8"), (std::vector<int64_t>{255, 0, 1}));
  EXPECT_EQ(file.read_i64("q.bool"), (std::vector<int64_t>{1, 0, 1, 1}));
  EXPECT_TRUE(file.read_f32("p.empty").empty());
  EXPECT_EQ(file.read_f32("o.scalar"), std::vector<float>{0.1f});
  // F64 narrowed to float; F32 widened to double.
  EXPECT_EQ(file.read_f32("z.f64")[1], -2.25f);
  EXPECT_TRUE(std::isinf(file.read_f32("z.f64")[2]));
  EXPECT_EQ(file.read_f64("y.f32")[0], static_cast<double>(0.1f));
  EXPECT_EQ(file.raw("v.i64").size(), 16u);
}

TEST(SafetensorsRoundTrip, NoMetadataKeyWhenEmptyAndOverwrites) {
  TempDir dir;
  const std::string path = dir.file("a.safetensors");
  std::vector<float> one = {1.0f};
  write_safetensors(path, {{"a", StDType::F32, {1}, one.data()}});
  std::vector<uint8_t> bytes = read_file_bytes(path);
  std::string text(bytes.begin(), bytes.end());
  EXPECT_EQ(text.find("__metadata__"), std::string::npos);
  EXPECT_TRUE(SafetensorsFile::open(path).metadata().empty());

  std::vector<float> two = {2.0f, 3.0f};
  write_safetensors(path, {{"b", StDType::F32, {2}, two.data()}});
  SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_FALSE(file.has("a"));
  EXPECT_EQ(file.read_f32("b", {2}), two);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1) << "no temp file left";
}

TEST(SafetensorsRoundTrip, EmptyFileHasNoTensors) {
  TempDir dir;
  const std::string path = dir.file("empty.safetensors");
  write_safetensors(path, {});
  SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_TRUE(file.names().empty());
  EXPECT_EQ(fs::file_size(path), 16u);  // "{}" padded to 8 bytes
}

TEST(SafetensorsWrite, RejectsBadTensorsAndLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  std::vector<float> x = {1.0f, 2.0f};
  expect_error([&] { write_safetensors(path, {{"a", StDType::F32, {1}, x.data()}, {"a", StDType::F32, {1}, x.data()}}); },
               {path, "'a'", "twice"});
  expect_error([&] { write_safetensors(path, {{"neg", StDType::F32, {-1, 2}, x.data()}}); }, {path, "'neg'", "negative"});
  expect_error([&] { write_safetensors(path, {{"__metadata__", StDType::F32, {1}, x.data()}}); }, {path, "__metadata__"});
  expect_error([&] { write_safetensors(path, {{"null", StDType::F32, {2}, nullptr}}); }, {path, "'null'"});
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

// ---------------------------------------------------------------------------
// Fixtures written by PyTorch / safetensors

TEST(SafetensorsFixture, BertTinyModel) {
  SafetensorsFile file = SafetensorsFile::open(kFixtures + "/bert-tiny-cls/model.safetensors");
  EXPECT_EQ(file.info("bert.embeddings.word_embeddings.weight").shape, (std::vector<int64_t>{1024, 64}));
  EXPECT_EQ(file.info("bert.embeddings.word_embeddings.weight").dtype, StDType::F32);
  EXPECT_EQ(file.info("classifier.weight").shape, (std::vector<int64_t>{2, 64}));
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.names().size(), 41u);
  std::vector<float> bias = file.read_f32("classifier.bias", {2});
  EXPECT_FLOAT_EQ(bias[0], -0.00368239963427186f);
  EXPECT_FLOAT_EQ(bias[1], -0.002395290182903409f);
  EXPECT_EQ(file.read_f32("bert.embeddings.word_embeddings.weight", {1024, 64}).size(), 1024u * 64u);
  expect_error([&] { file.read_f32("classifier.weight", {64, 2}); },
               {file.path(), "tensor 'classifier.weight' has shape [2, 64], expected [64, 2]"});
}

TEST(SafetensorsFixture, BertTinyReference) {
  SafetensorsFile file = SafetensorsFile::open(kFixtures + "/bert-tiny-cls/reference.safetensors");
  EXPECT_EQ(file.info("loss").dtype, StDType::F64);
  EXPECT_EQ(file.info("loss").shape, (std::vector<int64_t>{1}));
  EXPECT_EQ(file.read_i64("labels"), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(file.info("input_ids").shape, (std::vector<int64_t>{3, 16}));
  // The losses agree with the JSON written by the same script.
  nlohmann::json ref = nlohmann::json::parse(read_text_file(kFixtures + "/bert-tiny-cls/reference.json"));
  std::vector<double> losses = file.read_f64("train_losses");
  ASSERT_EQ(losses.size(), ref["train_losses"].size());
  for (size_t i = 0; i < losses.size(); ++i) EXPECT_DOUBLE_EQ(losses[i], ref["train_losses"][i].get<double>());
  EXPECT_EQ(file.read_f64("loss")[0], losses[0]);
}

// ---------------------------------------------------------------------------
// Reader errors on well-formed files

TEST(SafetensorsRead, WrongKindAndMissingTensor) {
  TempDir dir;
  const std::string path = dir.file("k.safetensors");
  std::vector<float> f = {1.0f};
  std::vector<int64_t> i = {1};
  write_safetensors(path, {{"f", StDType::F32, {1}, f.data()}, {"i", StDType::I64, {1}, i.data()}});
  SafetensorsFile file = SafetensorsFile::open(path);
  expect_error([&] { file.read_i64("f"); }, {path, "'f'", "F32"});
  expect_error([&] { file.read_f32("i"); }, {path, "'i'", "I64"});
  expect_error([&] { file.read_f64("i"); }, {path, "'i'", "I64"});
  expect_error([&] { file.info("nope"); }, {path + ": no tensor 'nope'"});
  expect_error([&] { file.read_f32("nope"); }, {path, "'nope'"});
  expect_error([&] { file.read_i64("i", {2}); }, {path, "tensor 'i' has shape [1], expected [2]"});
}

// ---------------------------------------------------------------------------
// Malformed files: one test per defect

TEST(SafetensorsMalformed, MissingFile) {
  TempDir dir;
  std::string path = dir.file("absent.safetensors");
  expect_error([&] { SafetensorsFile::open(path); }, {path});
}

TEST(SafetensorsMalformed, ShorterThanEightBytes) {
  TempDir dir;
  std::string path = dir.file("short.safetensors");
  write_bytes(path, "abc");
  expect_error([&] { SafetensorsFile::open(path); }, {path, "too short"});
}

TEST(SafetensorsMalformed, HeaderLengthBeyondFile) {
  TempDir dir;
  std::string path = dir.file("long.safetensors");
  write_bytes(path, st_bytes("{}", "", 1000));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "header length 1000"});
}

TEST(SafetensorsMalformed, HeaderLengthAbsurd) {
  TempDir dir;
  std::string path = dir.file("huge.safetensors");
  write_bytes(path, st_bytes("{}", "", uint64_t{1} << 40));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "limit"});
}

TEST(SafetensorsMalformed, HeaderNotJson) {
  TempDir dir;
  expect_malformed(dir, R"({"a": {"dtype": "F32",)", "", {"not valid JSON"});
}

TEST(SafetensorsMalformed, HeaderNotAnObject) {
  TempDir dir;
  expect_malformed(dir, "[1, 2]  ", "", {"'{'"});
}

TEST(SafetensorsMalformed, HeaderNotUtf8) {
  TempDir dir;
  expect_malformed(dir, "{\"a\xff\": 1}", "", {"not valid JSON"});
}

TEST(SafetensorsMalformed, EntryNotAnObject) {
  TempDir dir;
  expect_malformed(dir, R"({"w": [1, 2]})", "", {"'w'", "expected an object"});
}

TEST(SafetensorsMalformed, MissingDtype) {
  TempDir dir;
  expect_malformed(dir, R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", zeros(4), {"'w'", "dtype"});
}

TEST(SafetensorsMalformed, DtypeNotString) {
  TempDir dir;
  expect_malformed(dir, R"({"w": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})", zeros(4), {"'w'", "dtype"});
}

TEST(SafetensorsMalformed, UnknownDtype) {
  TempDir dir;
  expect_malformed(dir, R"({"w": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}})", zeros(4),
                   {"'w'", "F8_E4M3"});
}

TEST(SafetensorsMalformed, MissingShape) {
  TempDir dir;
  expect_malformed(dir, R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", zeros(4), {"'w'", "shape"});
}

TEST(SafetensorsMalformed, ShapeNotArray) {
  TempDir dir;
  expect_malformed(dir, R"({"w": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})", zeros(4), {"'w'", "shape"});
}

TEST(SafetensorsMalformed, ShapeHoldsNonInteger) {
  TempDir dir;
  expect_malformed(dir, R"({"w": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}})", zeros(4),
                   {"'w'", "non-integer"});
}

TEST(SafetensorsMalformed, NegativeDimension) {
  TempDir dir;
  expect_malformed(dir, R"({"w": {"dtype": "F32", "shape": [-1, 2], "data_offsets": [0, 4]}})", zeros(4),
                   {"'w'", "negative dimension -1"});
}

TEST(SafetensorsMalformed, ShapeOverflows) {
  TempDir dir;
  expect_malformed(dir, R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})",
                   zeros(4), {"'w'", "too large"});
}

TEST(SafetensorsMalformed, MissingDataOffsets) {
  TempDir dir;
  expect_malformed(dir, R"({"w": {"dtype": "F32", "shape": [1]}})", zeros(4), {"'w'", "data_offsets"});
}

TEST(SafetensorsMalformed, DataOffsetsIllTyped) {
  TempDir dir;
  expect_malformed(dir, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", zeros(4),
                   {"'w'", "data_offsets"});
  expect_malformed(dir, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", zeros(4),
                   {"'w'", "data_offsets"});
  expect_malformed(dir, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": "0-4"}})", zeros(4),
                   {"'w'", "data_offsets"});
}

TEST(SafetensorsMalformed, EndBeforeBegin) {
  TempDir dir;
  expect_malformed(dir, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", zeros(4),
                   {"'w'", "end before"});
}

TEST(SafetensorsMalformed, EndBeyondDataBuffer) {
  TempDir dir;
  expect_malformed(dir, R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", zeros(4),
                   {"'w'", "beyond the data buffer"});
}

TEST(SafetensorsMalformed, SizeDisagreesWithShape) {
  TempDir dir;
  expect_malformed(dir, R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", zeros(8),
                   {"'w'", "needs 12"});
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  TempDir dir;
  expect_malformed(dir,
                   R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                   R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                   zeros(12), {"'b'", "overlap", "'a'"});
}

TEST(SafetensorsMalformed, GapBetweenTensors) {
  TempDir dir;
  expect_malformed(dir,
                   R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                   R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                   zeros(12), {"'b'", "gap"});
}

TEST(SafetensorsMalformed, TrailingBytesBelongToNoTensor) {
  TempDir dir;
  expect_malformed(dir, R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", zeros(8),
                   {"4 trailing bytes"});
}

TEST(SafetensorsMalformed, DuplicateTensorName) {
  TempDir dir;
  expect_malformed(dir,
                   R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                   R"( "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                   zeros(8), {"duplicate", "'a'"});
}

TEST(SafetensorsMalformed, MetadataValueNotString) {
  TempDir dir;
  expect_malformed(dir, R"({"__metadata__": {"epoch": 3}})", "", {"__metadata__", "'epoch'"});
}

TEST(SafetensorsMalformed, PaddedHeaderIsAccepted) {
  // The counterpart of the cases above: trailing spaces after the JSON are legal.
  TempDir dir;
  std::string path = dir.file("padded.safetensors");
  float value = 2.5f;
  std::string data(4, '\0');
  std::memcpy(data.data(), &value, 4);
  write_bytes(path, st_bytes(R"({"a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}      )", data));
  EXPECT_EQ(SafetensorsFile::open(path).read_f32("a"), std::vector<float>{2.5f});
}

// ---------------------------------------------------------------------------
// Checkpoint directories

namespace {

// Writes two shards and their index into `dir`: a, b in shard 1; c in shard 2.
void write_sharded(const TempDir& dir, const std::string& weight_map_json) {
  std::vector<float> a = {1, 2}, b = {3}, c = {4, 5, 6};
  write_safetensors(dir.file("model-00001-of-00002.safetensors"),
                    {{"a", StDType::F32, {2}, a.data()}, {"b", StDType::F32, {1}, b.data()}});
  write_safetensors(dir.file("model-00002-of-00002.safetensors"), {{"c", StDType::F32, {3}, c.data()}});
  write_text_file_atomic(dir.file("model.safetensors.index.json"),
                         R"({"metadata": {"total_size": 24}, "weight_map": )" + weight_map_json + "}");
}

}  // namespace

TEST(SafetensorsSet, ReadsAcrossShards) {
  TempDir dir;
  write_sharded(dir, R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                         "c": "model-00002-of-00002.safetensors"})");
  SafetensorsSet set = SafetensorsSet::open_dir(dir.path().string());
  EXPECT_EQ(set.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(set.has("c"));
  EXPECT_FALSE(set.has("d"));
  EXPECT_EQ(set.file_of("a").read_f32("a"), (std::vector<float>{1, 2}));
  EXPECT_EQ(set.file_of("c").read_f32("c", {3}), (std::vector<float>{4, 5, 6}));
  EXPECT_NE(set.file_of("c").path().find("model-00002-of-00002"), std::string::npos);
  EXPECT_EQ(set.files().size(), 2u);
  expect_error([&] { set.file_of("d"); }, {dir.path().string(), "'d'"});
}

TEST(SafetensorsSet, MissingShardIsAnError) {
  TempDir dir;
  write_sharded(dir, R"({"a": "model-00001-of-00002.safetensors", "c": "model-00003-of-00002.safetensors"})");
  expect_error([&] { SafetensorsSet::open_dir(dir.path().string()); },
               {dir.file("model.safetensors.index.json"), "model-00003-of-00002.safetensors", "'c'"});
}

TEST(SafetensorsSet, TensorAbsentFromItsShardIsAnError) {
  TempDir dir;
  write_sharded(dir, R"({"a": "model-00001-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"})");
  expect_error([&] { SafetensorsSet::open_dir(dir.path().string()); },
               {dir.file("model.safetensors.index.json"), "'c'", "model-00001-of-00002.safetensors"});
}

TEST(SafetensorsSet, BadIndexIsAnError) {
  TempDir dir;
  write_sharded(dir, R"(["a"])");
  expect_error([&] { SafetensorsSet::open_dir(dir.path().string()); },
               {dir.file("model.safetensors.index.json"), "weight_map"});
}

TEST(SafetensorsSet, SingleFileDirectory) {
  SafetensorsSet set = SafetensorsSet::open_dir(kFixtures + "/bert-tiny-cls");
  ASSERT_TRUE(set.has("classifier.weight"));
  EXPECT_EQ(set.file_of("classifier.weight").info("classifier.weight").shape, (std::vector<int64_t>{2, 64}));
  EXPECT_EQ(set.names().size(), 41u);
}

TEST(SafetensorsSet, EmptyDirectoryIsAnError) {
  TempDir dir;
  expect_error([&] { SafetensorsSet::open_dir(dir.path().string()); }, {dir.path().string(), "model.safetensors"});
  expect_error([&] { SafetensorsSet::open_dir(dir.file("nonexistent")); }, {dir.file("nonexistent")});
}

// ---------------------------------------------------------------------------
// File helpers

TEST(SafetensorsIo, ReadFileBytesNamesMissingFile) {
  TempDir dir;
  expect_error([&] { read_file_bytes(dir.file("nothing.bin")); }, {dir.file("nothing.bin")});
  expect_error([&] { read_file_bytes(dir.path().string()); }, {dir.path().string(), "directory"});
  write_bytes(dir.file("three.bin"), std::string("a\0b", 3));
  EXPECT_EQ(read_file_bytes(dir.file("three.bin")), (std::vector<uint8_t>{'a', 0, 'b'}));
}

TEST(AtomicFile, NoFileWhenNotCommitted) {
  TempDir dir;
  const std::string path = dir.file("out.txt");
  {
    AtomicFile file(path);
    file.write("partial");
    EXPECT_EQ(file.temp_path(), path + ".tmp." + std::to_string(::getpid()));
    EXPECT_TRUE(fs::exists(file.temp_path()));
    EXPECT_FALSE(fs::exists(path));
  }
  EXPECT_TRUE(fs::is_empty(dir.path())) << "neither the file nor its temp file remains";
}

TEST(AtomicFile, UncommittedWriteKeepsOldContent) {
  TempDir dir;
  const std::string path = dir.file("out.txt");
  write_text_file_atomic(path, "old");
  try {
    AtomicFile file(path);
    file.write("new but unfinished");
    throw std::runtime_error("interrupted");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read_text_file(path), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(AtomicFile, CommitReplacesFile) {
  TempDir dir;
  const std::string path = dir.file("out.txt");
  write_text_file_atomic(path, "first");
  AtomicFile file(path);
  file.write("second");
  file.write(std::string_view(" part"));
  file.commit();
  EXPECT_FALSE(fs::exists(file.temp_path()));
  EXPECT_EQ(read_text_file(path), "second part");
  expect_error([&] { file.write("more"); }, {path});
}

TEST(AtomicFile, UncreatableTempFileNamesPath) {
  TempDir dir;
  const std::string path = dir.file("no/such/dir/out.txt");
  expect_error([&] { AtomicFile file(path); }, {path});
}
