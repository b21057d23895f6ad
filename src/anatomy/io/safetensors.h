// safetensors.h: a strict reader and an atomic writer of the safetensors format
// (https://github.com/huggingface/safetensors), plus the set of files that make
// up a Hugging Face checkpoint (one model.safetensors, or shards listed by
// model.safetensors.index.json; else pytorch_model.bin or its shards, read
// through torch_checkpoint.h into the same view).
//
// Layout: an 8-byte little-endian u64 N, N bytes of JSON header
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}            (optional, strings only)
// possibly padded with trailing spaces, then the data buffer. Offsets are
// relative to the start of the data buffer. As in the reference implementation,
// the tensors must cover the data buffer exactly: sorted by offset they are
// contiguous, without gaps or overlap, and end where the file ends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace anatomy::io {

// The dtypes the reader understands (the format has more, e.g. F8_E4M3; a file
// using one is rejected, naming it).
enum class StDType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

size_t st_dtype_size(StDType dtype);
std::string_view st_dtype_name(StDType dtype);
// Parses a dtype name as the format spells it; false for names not understood.
bool parse_st_dtype(std::string_view name, StDType* out);
bool st_dtype_is_float(StDType dtype);  // F64, F32, F16, BF16

struct StTensorInfo {
  std::string name;
  StDType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;  // byte offsets within the data buffer
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Reads and validates the whole file; Error "<path>: ..." on any defect.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const StTensorInfo& info(const std::string& name) const;  // Error "<path>: no tensor '<name>'" if absent
  std::vector<std::string> names() const;                    // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Converting readers: F64/F32/F16/BF16 -> float / double; I64/I32/I16/I8/U8/BOOL -> int64.
  // A dtype of the other kind (read_i64 of F32, read_f32 of I64) is an Error.
  std::vector<float> read_f32(const std::string& name) const;
  std::vector<double> read_f64(const std::string& name) const;
  std::vector<int64_t> read_i64(const std::string& name) const;
  // The same, after checking that the shape equals `expected`, else
  // Error "<path>: tensor '<name>' has shape [a, b], expected [c, d]".
  std::vector<float> read_f32(const std::string& name, const std::vector<int64_t>& expected) const;
  std::vector<double> read_f64(const std::string& name, const std::vector<int64_t>& expected) const;
  std::vector<int64_t> read_i64(const std::string& name, const std::vector<int64_t>& expected) const;
  // Error naming file and tensor unless the tensor's shape is `expected`.
  void check_shape(const std::string& name, const std::vector<int64_t>& expected) const;

  // The tensor's bytes as stored (little-endian, not necessarily aligned).
  std::span<const uint8_t> raw(const std::string& name) const;

  // A view of tensors that another container holds (torch_checkpoint.h): each
  // info's [begin, end) is a byte range of `bytes` (the whole file), and ranges
  // may overlap (tensors that share a storage). Error "<path>: ..." if a name
  // repeats, a range lies outside `bytes` or does not span shape x dtype size.
  static SafetensorsFile view(std::string path, std::shared_ptr<const std::vector<uint8_t>> bytes,
                              std::vector<StTensorInfo> tensors);

 private:
  std::string path_;
  // Shared so that copying a SafetensorsFile does not copy a multi-GB buffer.
  std::shared_ptr<const std::vector<uint8_t>> bytes_;
  size_t data_start_ = 0;  // offset of the data buffer within bytes_
  std::map<std::string, StTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face checkpoint's weights, in transformers' order of preference:
// DIR/model.safetensors; the safetensors shards that
// DIR/model.safetensors.index.json lists ({"metadata": {...}, "weight_map":
// {"tensor name": "shard file name"}}); DIR/pytorch_model.bin, a state dict
// saved by torch.save (torch_checkpoint.h); or the .bin shards that
// DIR/pytorch_model.bin.index.json lists the same way. Every mapped shard must
// exist and hold the tensors mapped to it. Lookup is by tensor name across
// shards; every file is seen through SafetensorsFile's readers.
class SafetensorsSet {
 public:
  static SafetensorsSet open_dir(const std::string& dir);  // Error naming the dir if none of the four exists

  const std::string& dir() const { return dir_; }
  // The file read: "model.safetensors", "pytorch_model.bin.index.json", ...
  const std::string& source() const { return source_; }
  bool has(const std::string& name) const { return file_index_.count(name) != 0; }
  const SafetensorsFile& file_of(const std::string& name) const;  // Error naming the tensor and dir if absent
  std::vector<std::string> names() const;                          // sorted
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  std::string dir_;
  std::string source_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> file_index_;  // tensor name -> index into files_
};

// Which of the four files SafetensorsSet::open_dir reads in `dir`, by name.
// Without any: an Error that names the weights of other formats the directory
// holds (tf_model.h5, flax_model.msgpack, model.ckpt.index, *.gguf, ...) and
// the files that are missing.
std::string find_weights_file(const std::string& dir);

struct StWriteTensor {
  std::string name;
  StDType dtype;
  std::vector<int64_t> shape;
  const void* data;  // numel * st_dtype_size(dtype) bytes, little-endian; may be null when numel is 0
};

// Writes one file atomically (temp + rename), tensors laid out in the given
// order, the header padded with spaces to a multiple of 8 bytes so the data
// buffer starts aligned. Error on duplicate or empty names, "__metadata__" as a
// tensor name, or negative dimensions.
void write_safetensors(const std::string& path, const std::vector<StWriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace anatomy::io
