// test_torch_checkpoint.cpp: pytorch_model.bin without Python. Real files that
// torch.save wrote (tests/fixtures/pytorch-bin, made by
// tests/tools/make_pytorch_bin_fixture.py) read to the same tensors as the
// safetensors they came from; a model directory holding only them trains the
// same; and hand-made archives, each broken in one way (a global that would
// run a command, truncation, wrong offsets, compression, a missing storage,
// shapes that overflow, ...), end in one clear error and run nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anatomy/core/error.h"
#include "anatomy/io/files.h"
#include "anatomy/io/safetensors.h"
#include "anatomy/io/torch_checkpoint.h"
#include "anatomy/io/zip_archive.h"
#include "cli_error_util.h"
#include "test_util.h"

namespace anatomy {
namespace {

namespace fs = std::filesystem;
using io::open_torch_checkpoint;
using io::SafetensorsFile;
using io::SafetensorsSet;
using test::failed_cleanly;

std::string bin_fixture(const std::string& name) { return test::fixture("pytorch-bin/" + name); }

// Runs `f`, expecting an anatomy::Error whose message holds every one of `parts`.
::testing::AssertionResult throws_naming(const std::function<void()>& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts)
      if (message.find(part) == std::string::npos)
        return ::testing::AssertionFailure() << "the error does not name '" << part << "': " << message;
    if (message.find('\n') != std::string::npos) return ::testing::AssertionFailure() << "not one line: " << message;
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no error";
}

// ---------------------------------------------------------------------------
// Archives made by hand: a stored zip writer (optionally ZIP64) and a pickle
// writer for state dicts in torch.save's form (protocol 2).

struct ZipItem {
  std::string name, data;
  uint16_t method = 0;
};

void put16(std::string& s, uint16_t v) { s.append({static_cast<char>(v & 0xff), static_cast<char>(v >> 8)}); }
void put32(std::string& s, uint32_t v) {
  put16(s, static_cast<uint16_t>(v));
  put16(s, static_cast<uint16_t>(v >> 16));
}
void put64(std::string& s, uint64_t v) {
  put32(s, static_cast<uint32_t>(v));
  put32(s, static_cast<uint32_t>(v >> 32));
}

uint32_t crc_of(const std::string& s) {
  return io::crc32({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
}

// A zip archive of `items`, each stored as given. With `zip64`, the central
// directory defers every size and offset to ZIP64 extra fields and the end
// record to a ZIP64 end record, as a writer does past 4 GiB.
std::string make_zip(const std::vector<ZipItem>& items, bool zip64 = false) {
  std::string out, directory;
  for (const ZipItem& item : items) {
    const uint64_t offset = out.size();
    put32(out, 0x04034b50);
    put16(out, zip64 ? 45 : 20);
    put16(out, 0);
    put16(out, item.method);
    put32(out, 0);  // time, date
    put32(out, crc_of(item.data));
    put32(out, static_cast<uint32_t>(item.data.size()));
    put32(out, static_cast<uint32_t>(item.data.size()));
    put16(out, static_cast<uint16_t>(item.name.size()));
    put16(out, 0);
    out += item.name + item.data;

    put32(directory, 0x02014b50);
    put16(directory, zip64 ? 45 : 20);
    put16(directory, zip64 ? 45 : 20);
    put16(directory, 0);
    put16(directory, item.method);
    put32(directory, 0);
    put32(directory, crc_of(item.data));
    put32(directory, zip64 ? 0xFFFFFFFF : static_cast<uint32_t>(item.data.size()));
    put32(directory, zip64 ? 0xFFFFFFFF : static_cast<uint32_t>(item.data.size()));
    put16(directory, static_cast<uint16_t>(item.name.size()));
    put16(directory, zip64 ? 28 : 0);
    put16(directory, 0);  // comment
    put16(directory, 0);  // disk
    put16(directory, 0);
    put32(directory, 0);
    put32(directory, zip64 ? 0xFFFFFFFF : static_cast<uint32_t>(offset));
    directory += item.name;
    if (zip64) {
      put16(directory, 0x0001);
      put16(directory, 24);
      put64(directory, item.data.size());
      put64(directory, item.data.size());
      put64(directory, offset);
    }
  }
  const uint64_t cd_offset = out.size();
  out += directory;
  if (zip64) {
    const uint64_t record = out.size();
    put32(out, 0x06064b50);
    put64(out, 44);
    put16(out, 45);
    put16(out, 45);
    put32(out, 0);
    put32(out, 0);
    put64(out, items.size());
    put64(out, items.size());
    put64(out, directory.size());
    put64(out, cd_offset);
    put32(out, 0x07064b50);
    put32(out, 0);
    put64(out, record);
    put32(out, 1);
  }
  put32(out, 0x06054b50);
  put16(out, 0);
  put16(out, 0);
  put16(out, zip64 ? 0xFFFF : static_cast<uint16_t>(items.size()));
  put16(out, zip64 ? 0xFFFF : static_cast<uint16_t>(items.size()));
  put32(out, zip64 ? 0xFFFFFFFF : static_cast<uint32_t>(directory.size()));
  put32(out, zip64 ? 0xFFFFFFFF : static_cast<uint32_t>(cd_offset));
  put16(out, 0);
  return out;
}

// Pickle protocol 2, the opcodes torch.save's pickles use.
struct Pickle {
  std::string s = std::string("\x80\x02", 2);
  Pickle& op(char c) {
    s += c;
    return *this;
  }
  Pickle& str(const std::string& v) {
    s += 'X';
    put32(s, static_cast<uint32_t>(v.size()));
    s += v;
    return *this;
  }
  Pickle& integer(int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
      s += 'J';
      put32(s, static_cast<uint32_t>(static_cast<int32_t>(v)));
    } else {
      s += '\x8a';
      s += '\x08';
      put64(s, static_cast<uint64_t>(v));
    }
    return *this;
  }
  Pickle& global(const std::string& module, const std::string& name) {
    s += "c" + module + "\n" + name + "\n";
    return *this;
  }
  Pickle& ints(const std::vector<int64_t>& values) {
    op('(');
    for (int64_t v : values) integer(v);
    return op('t');
  }
};

struct TensorSpec {
  std::string name;
  std::string storage_class = "FloatStorage";
  std::string key = "0";
  int64_t numel = 0;  // of the storage
  int64_t offset = 0;
  std::vector<int64_t> shape, stride;
};

// OrderedDict(name -> _rebuild_tensor_v2(...)) for each spec, as torch.save pickles a state dict.
std::string state_dict_pickle(const std::vector<TensorSpec>& tensors) {
  Pickle p;
  p.global("collections", "OrderedDict").op(')').op('R').op('(');
  for (const TensorSpec& t : tensors) {
    p.str(t.name).global("torch._utils", "_rebuild_tensor_v2").op('(');
    p.op('(').str("storage").global("torch", t.storage_class).str(t.key).str("cpu").integer(t.numel).op('t').op('Q');
    p.integer(t.offset).ints(t.shape).ints(t.stride).op('\x89');
    p.global("collections", "OrderedDict").op(')').op('R').op('t').op('R');
  }
  p.op('u').op('.');
  return p.s;
}

std::string floats(const std::vector<float>& values) {
  std::string out(values.size() * 4, '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// A torch.save-like archive "archive/..." of `pickle` and storages key -> bytes.
std::string torch_zip(const std::string& pickle, const std::vector<std::pair<std::string, std::string>>& storages,
                      bool zip64 = false) {
  std::vector<ZipItem> items{{"archive/data.pkl", pickle}, {"archive/byteorder", "little"}};
  for (const auto& [key, bytes] : storages) items.push_back({"archive/data/" + key, bytes});
  items.push_back({"archive/version", "3\n"});
  return make_zip(items, zip64);
}

// One float tensor [2, 3] over storage "0".
std::string one_tensor_zip(bool zip64 = false) {
  return torch_zip(state_dict_pickle({{"w", "FloatStorage", "0", 6, 0, {2, 3}, {3, 1}}}),
                   {{"0", floats({1, 2, 3, 4, 5, 6})}}, zip64);
}

class TorchCheckpoint : public ::testing::Test {
 protected:
  // Writes `bytes` as tmp/<name> and returns its path.
  std::string write(const std::string& bytes, const std::string& name = "pytorch_model.bin") {
    const std::string path = tmp_.file(name);
    test::write_all_bytes(path, bytes);
    return path;
  }
  ::testing::AssertionResult refused(const std::string& bytes, std::initializer_list<std::string> parts) {
    const std::string path = write(bytes);
    std::vector<std::string> all{path};
    all.insert(all.end(), parts.begin(), parts.end());
    try {
      open_torch_checkpoint(path);
    } catch (const Error& e) {
      const std::string message = e.what();
      for (const std::string& part : all)
        if (message.find(part) == std::string::npos)
          return ::testing::AssertionFailure() << "the error does not name '" << part << "': " << message;
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "no error";
  }
  test::TempDir tmp_;
};

// ---------------------------------------------------------------------------
// Real files

void expect_same_tensors(const SafetensorsSet& got, const SafetensorsFile& want) {
  ASSERT_EQ(got.names(), want.names());
  for (const std::string& name : want.names()) {
    const SafetensorsFile& file = got.file_of(name);
    EXPECT_EQ(file.info(name).dtype, want.info(name).dtype) << name;
    EXPECT_EQ(file.info(name).shape, want.info(name).shape) << name;
    const auto a = file.raw(name), b = want.raw(name);
    ASSERT_EQ(a.size(), b.size()) << name;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << name << ": the bytes differ";
  }
}

TEST_F(TorchCheckpoint, SingleFileHoldsTheSafetensorsTensorsBitForBit) {
  const SafetensorsFile want = SafetensorsFile::open(test::fixture("bert-tiny-cls/model.safetensors"));
  const SafetensorsSet set = SafetensorsSet::open_dir(bin_fixture("single"));
  EXPECT_EQ(set.source(), "pytorch_model.bin");
  ASSERT_EQ(set.files().size(), 1u);
  EXPECT_EQ(set.files()[0].path(), bin_fixture("single") + "/pytorch_model.bin");
  expect_same_tensors(set, want);
}

TEST_F(TorchCheckpoint, ShardsListedByTheIndexHoldTheSafetensorsTensors) {
  const SafetensorsFile want = SafetensorsFile::open(test::fixture("bert-tiny-cls/model.safetensors"));
  const SafetensorsSet set = SafetensorsSet::open_dir(bin_fixture("sharded"));
  EXPECT_EQ(set.source(), "pytorch_model.bin.index.json");
  EXPECT_EQ(set.files().size(), 2u);
  expect_same_tensors(set, want);
}

TEST_F(TorchCheckpoint, EveryDtypeViewAndSharedStorageReadsItsValues) {
  const SafetensorsFile file = open_torch_checkpoint(bin_fixture("dtypes.bin"));
  const nlohmann::json want = nlohmann::json::parse(test::read_all_bytes(bin_fixture("dtypes.json")));
  const std::map<std::string, std::string> dtype_of = {
      {"float32", "F32"}, {"float64", "F64"}, {"float16", "F16"}, {"bfloat16", "BF16"}, {"int64", "I64"},
      {"int32", "I32"},   {"int16", "I16"},   {"int8", "I8"},     {"uint8", "U8"},      {"bool", "BOOL"}};
  std::vector<std::string> names;
  for (const auto& [name, t] : want.items()) names.push_back(name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(file.names(), names);
  for (const auto& [name, t] : want.items()) {
    const io::StTensorInfo& info = file.info(name);
    EXPECT_EQ(io::st_dtype_name(info.dtype), dtype_of.at(t["dtype"].get<std::string>())) << name;
    EXPECT_EQ(info.shape, t["shape"].get<std::vector<int64_t>>()) << name;
    const std::vector<double> values = t["values"].get<std::vector<double>>();
    if (io::st_dtype_is_float(info.dtype)) {
      EXPECT_EQ(file.read_f64(name), values) << name;
    } else {
      const std::vector<int64_t> got = file.read_i64(name);
      ASSERT_EQ(got.size(), values.size()) << name;
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(static_cast<double>(got[i]), values[i]) << name << "[" << i << "]";
    }
  }
  // The two names of one tensor are one range of the file; the views share a storage.
  EXPECT_EQ(file.raw("tied_a").data(), file.raw("tied_b").data());
  EXPECT_EQ(file.raw("view_tail").data() - file.raw("view_head").data(), 6 * 4);
}

TEST_F(TorchCheckpoint, Protocol4PicklesRead) {
  const SafetensorsFile file = open_torch_checkpoint(bin_fixture("protocol4.bin"));
  EXPECT_EQ(file.read_f32("a"), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(file.info("b").dtype, io::StDType::F16);
  EXPECT_EQ(file.read_f32("b", {2, 2}), (std::vector<float>(4, 1.0f)));
}

TEST_F(TorchCheckpoint, ANonContiguousTensorIsRefusedNamingItsStride) {
  EXPECT_TRUE(throws_naming([] { open_torch_checkpoint(bin_fixture("noncontiguous.bin")); },
                            {bin_fixture("noncontiguous.bin"), "'weight'", "not contiguous", "stride [1, 3]",
                             "shape [3, 4]"}));
}

TEST_F(TorchCheckpoint, AnUnreadDtypeIsRefusedNamingItsStorageClass) {
  EXPECT_TRUE(throws_naming([] { open_torch_checkpoint(bin_fixture("complex.bin")); },
                            {bin_fixture("complex.bin"), "torch.ComplexFloatStorage"}));
}

TEST_F(TorchCheckpoint, TheLegacyFormatIsRefusedWithHowToConvert) {
  EXPECT_TRUE(throws_naming([] { open_torch_checkpoint(bin_fixture("legacy.bin")); },
                            {bin_fixture("legacy.bin"), "legacy torch.save format",
                             "_use_new_zipfile_serialization=True", "safetensors"}));
}

// ---------------------------------------------------------------------------
// Hand-made archives

TEST_F(TorchCheckpoint, AHandMadeArchiveReads) {
  const SafetensorsFile file = open_torch_checkpoint(write(one_tensor_zip()));
  EXPECT_EQ(file.read_f32("w", {2, 3}), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST_F(TorchCheckpoint, Zip64RecordsAndExtraFieldsRead) {
  const SafetensorsFile file = open_torch_checkpoint(write(one_tensor_zip(/*zip64=*/true)));
  EXPECT_EQ(file.read_f32("w", {2, 3}), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST_F(TorchCheckpoint, AGlobalThatWouldRunACommandIsRefusedAndNothingRuns) {
  const std::string marker = tmp_.file("ran");
  // os.system("touch <marker>"), as pickle's REDUCE would call it.
  Pickle p;
  p.global("os", "system").str("touch " + marker).op('\x85').op('R').op('.');
  EXPECT_TRUE(refused(torch_zip(p.s, {}), {"data.pkl", "'os.system'", "refused"}));
  EXPECT_FALSE(fs::exists(marker)) << "the command ran";

  // The same through protocol 4's STACK_GLOBAL, inside a state dict's value.
  Pickle q;
  q.s = std::string("\x80\x04", 2);
  q.global("collections", "OrderedDict").op(')').op('R').op('(').str("w");
  q.op('\x8c').op(8).s += "builtins";
  q.op('\x8c').op(4).s += "eval";
  q.op('\x93').str("__import__('os').system('touch " + marker + "')").op('\x85').op('R').op('u').op('.');
  EXPECT_TRUE(refused(torch_zip(q.s, {}), {"'builtins.eval'"}));
  EXPECT_FALSE(fs::exists(marker)) << "the command ran";
}

// A global's name holding a newline (fuzz/fuzz_torch_checkpoint found one) is named on one line.
TEST_F(TorchCheckpoint, AGlobalNamedWithANewlineIsRefusedOnOneLine) {
  Pickle p;  // protocol 4's STACK_GLOBAL: the names are strings, and may hold anything
  p.s = std::string("\x80\x04", 2);
  p.op('\x8c').op(11).s += "collections";
  p.op('\x8c').op(12).s += "Ordered\nDict";
  p.op('\x93').op(')').op('R').op('.');
  EXPECT_TRUE(refused(torch_zip(p.s, {}), {"'collections.Ordered\\x0ADict'", "refused"}));
}

TEST_F(TorchCheckpoint, AModelObjectRatherThanAStateDictIsRefusedByItsClass) {
  Pickle p;
  p.global("transformers.models.bert.modeling_bert", "BertModel").op(')').op('\x81').op('.');
  EXPECT_TRUE(refused(torch_zip(p.s, {}), {"'transformers.models.bert.modeling_bert.BertModel'"}));
}

TEST_F(TorchCheckpoint, OpcodesAStateDictDoesNotUseAreRefused) {
  Pickle p;
  p.s += "(S'x'\n";  // STRING, protocol 0
  EXPECT_TRUE(refused(torch_zip(p.s, {}), {"STRING", "refused"}));
  Pickle q;
  q.op(']').op('.');  // a list, not a dict
  EXPECT_TRUE(refused(torch_zip(q.s, {}), {"list", "not a state dict"}));
}

TEST_F(TorchCheckpoint, EveryTruncationIsOneError) {
  const std::string whole = one_tensor_zip();
  for (size_t n = 0; n < whole.size(); ++n) {
    const std::string path = write(whole.substr(0, n));
    EXPECT_THROW(open_torch_checkpoint(path), Error) << "truncated to " << n << " bytes";
  }
  // A real file, cut in the middle of its data and just before its end record.
  const std::string real = test::read_all_bytes(bin_fixture("protocol4.bin"));
  EXPECT_TRUE(refused(real.substr(0, real.size() / 2), {"no end of central directory record"}));
  EXPECT_TRUE(refused(real.substr(0, real.size() - 1), {"no end of central directory record"}));
}

TEST_F(TorchCheckpoint, EveryDamagedByteIsAnErrorOrTheSameTensors) {
  // Each byte of a real file changed in turn: never a crash, and whatever
  // still reads (a byte of padding or of the serialization id) reads right.
  const std::string real = test::read_all_bytes(bin_fixture("protocol4.bin"));
  for (size_t i = 0; i < real.size(); ++i) {
    std::string bad = real;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    const std::string path = write(bad);
    try {
      const SafetensorsFile file = open_torch_checkpoint(path);
      EXPECT_EQ(file.read_f32("a"), (std::vector<float>{1.0f, 2.0f})) << "byte " << i;
    } catch (const Error&) {
    }
  }
}

TEST_F(TorchCheckpoint, WrongOffsetsAreNamed) {
  const std::string good = one_tensor_zip();
  // The central directory's offset (end record, bytes 16..19) past the file.
  std::string bad = good;
  const size_t end = bad.size() - 22;
  bad[end + 16] = static_cast<char>(0xff);
  bad[end + 17] = static_cast<char>(0xff);
  EXPECT_TRUE(refused(bad, {"central directory", "outside the file"}));
  // data.pkl's local header offset (central header byte 42) moved by one.
  std::string shifted = good;
  const size_t cd = shifted.find("PK\x01\x02");
  shifted[cd + 42] = static_cast<char>(shifted[cd + 42] + 1);
  EXPECT_TRUE(refused(shifted, {"'archive/data.pkl'", "no local header"}));
  // A storage's bytes changed: the CRC names the entry.
  std::string damaged = good;
  damaged[damaged.find("archive/data/0") + 14] ^= 1;
  EXPECT_TRUE(refused(damaged, {"'archive/data/0'", "CRC-32"}));
}

TEST_F(TorchCheckpoint, ACompressedEntryIsRefusedByName) {
  std::vector<ZipItem> items{{"archive/data.pkl", state_dict_pickle({}), 8}, {"archive/version", "3\n"}};
  EXPECT_TRUE(refused(make_zip(items), {"'archive/data.pkl'", "compressed (deflate", "torch.save"}));
}

TEST_F(TorchCheckpoint, AMissingStorageIsNamed) {
  const std::string pickle = state_dict_pickle({{"w", "FloatStorage", "5", 6, 0, {2, 3}, {3, 1}}});
  EXPECT_TRUE(refused(torch_zip(pickle, {{"0", floats({1, 2, 3, 4, 5, 6})}}), {"'w'", "'archive/data/5'", "not in the archive"}));
}

TEST_F(TorchCheckpoint, HugeShapesAreRefusedWithoutOverflow) {
  const std::string data = floats({1, 2, 3, 4, 5, 6});
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 40}, std::vector<int64_t>{int64_t{1} << 62, 1},
        std::vector<int64_t>{INT64_MAX, 2}}) {
    const std::string pickle = state_dict_pickle({{"w", "FloatStorage", "0", 6, 0, shape, {shape[1], 1}}});
    EXPECT_TRUE(refused(torch_zip(pickle, {{"0", data}}), {"'w'", "too large"}));
  }
  // A storage that claims more elements than its entry holds.
  const std::string claims = state_dict_pickle({{"w", "FloatStorage", "0", int64_t{1} << 61, 0, {2, 3}, {3, 1}}});
  EXPECT_TRUE(refused(torch_zip(claims, {{"0", data}}), {"'w'", "'archive/data/0'", "holds 24 bytes"}));
  // A tensor that reaches past its storage.
  const std::string past = state_dict_pickle({{"w", "FloatStorage", "0", 6, 4, {2, 3}, {3, 1}}});
  EXPECT_TRUE(refused(torch_zip(past, {{"0", data}}), {"'w'", "beyond its storage"}));
  const std::string offset = state_dict_pickle({{"w", "FloatStorage", "0", 6, INT64_MAX, {1}, {1}}});
  EXPECT_TRUE(refused(torch_zip(offset, {{"0", data}}), {"'w'", "beyond its storage"}));
}

TEST_F(TorchCheckpoint, AHandMadeNonContiguousStrideIsRefused) {
  const std::string pickle = state_dict_pickle({{"w", "FloatStorage", "0", 6, 0, {2, 3}, {1, 2}}});
  EXPECT_TRUE(refused(torch_zip(pickle, {{"0", floats({1, 2, 3, 4, 5, 6})}}), {"'w'", "not contiguous"}));
}

TEST_F(TorchCheckpoint, BigEndianAndNonZipFilesAreNamed) {
  std::vector<ZipItem> items{{"archive/data.pkl", state_dict_pickle({})}, {"archive/byteorder", "big"}};
  EXPECT_TRUE(refused(make_zip(items), {"big-endian"}));
  EXPECT_TRUE(refused("just some text, not an archive at all", {"not a zip archive"}));
  EXPECT_TRUE(refused(make_zip({{"data.pkl", state_dict_pickle({})}}), {"not in a folder"}));
  EXPECT_TRUE(refused(make_zip({{"archive/other", "x"}}), {"no entry 'archive/data.pkl'"}));
}

// ---------------------------------------------------------------------------
// Through the `anatomy` binary

class TorchCheckpointCli : public TorchCheckpoint {
 protected:
  void SetUp() override { test::write_i64_tensors(data_, test::valid_train_tensors()); }
  test::CommandResult train(const std::string& model, const std::string& out) {
    return test::run_anatomy("train --model " + model + " --train-file " + data_ +
                             " --device cpu --no-progress --max-steps 3 --learning-rate 1e-3 --logging-steps 1 "
                             "--output-dir " + out);
  }
  std::string data_ = tmp_.file("train.safetensors");
};

TEST_F(TorchCheckpointCli, TrainsFromPytorchModelBinAsFromSafetensors) {
  const auto a = train(test::fixture("bert-tiny-cls"), tmp_.file("from-safetensors"));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  for (const std::string dir : {"single", "sharded"}) {
    const auto b = train(bin_fixture(dir), tmp_.file(dir));
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_NE(b.output.find(dir == "single" ? "weights from pytorch_model.bin\n" : "weights from pytorch_model.bin.index.json"),
              std::string::npos)
        << b.output;
    const auto x = test::log_records(tmp_.file("from-safetensors")), y = test::log_records(tmp_.file(dir));
    ASSERT_EQ(x.size(), 3u);
    ASSERT_EQ(y.size(), x.size());
    for (const auto& [step, record] : x) {
      EXPECT_EQ(y.at(step)["loss"], record["loss"]) << dir << " step " << step;
      EXPECT_EQ(y.at(step)["grad_norm"], record["grad_norm"]) << dir << " step " << step;
    }
  }
}

TEST_F(TorchCheckpointCli, SafetensorsArePreferredWhenBothAreThere) {
  const std::string dir = tmp_.file("both");
  fs::create_directories(dir);
  for (const char* file : {"config.json", "model.safetensors"})
    fs::copy_file(test::fixture("bert-tiny-cls") + "/" + file, dir + "/" + file);
  // A pytorch_model.bin that would fail: it is never read.
  test::write_all_bytes(dir + "/pytorch_model.bin", "not a zip archive");
  EXPECT_EQ(SafetensorsSet::open_dir(dir).source(), "model.safetensors");
  const auto r = train(dir, tmp_.file("out"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(TorchCheckpointCli, AMaliciousPickleIsOneErrorAndRunsNothing) {
  const std::string dir = tmp_.file("model");
  fs::create_directories(dir);
  fs::copy_file(test::fixture("bert-tiny-cls/config.json"), dir + "/config.json");
  const std::string marker = tmp_.file("ran");
  Pickle p;
  p.global("os", "system").str("touch " + marker).op('\x85').op('R').op('.');
  test::write_all_bytes(dir + "/pytorch_model.bin", torch_zip(p.s, {}));
  const auto r = train(dir, tmp_.file("out"));
  EXPECT_TRUE(failed_cleanly(r, {dir + "/pytorch_model.bin", "'os.system'"}));
  EXPECT_FALSE(fs::exists(marker)) << "the command ran";
  EXPECT_TRUE(test::nothing_at(tmp_.file("out")));
}

TEST_F(TorchCheckpointCli, ALegacyFileIsOneError) {
  const std::string dir = tmp_.file("model");
  fs::create_directories(dir);
  fs::copy_file(test::fixture("bert-tiny-cls/config.json"), dir + "/config.json");
  fs::copy_file(bin_fixture("legacy.bin"), dir + "/pytorch_model.bin");
  const auto r = train(dir, tmp_.file("out"));
  EXPECT_TRUE(failed_cleanly(r, {dir + "/pytorch_model.bin", "legacy torch.save format"}));
}

}  // namespace
}  // namespace anatomy
