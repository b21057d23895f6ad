// safetensors.cpp: strict safetensors reading (validated the way the reference
// implementation validates), converting tensor readers, the sharded checkpoint
// set, and the atomic writer.
#include "anatomy/io/safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "anatomy/core/dtype.h"
#include "anatomy/core/error.h"
#include "anatomy/io/files.h"
#include "anatomy/io/json.h"
#include "anatomy/io/torch_checkpoint.h"

namespace anatomy::io {

// The format stores little-endian numbers; the readers copy them as they are.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using nlohmann::json;

// The reference implementation refuses headers above 100 MB (HeaderTooLarge).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

std::string shape_string(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// Parses JSON, rejecting duplicate keys in any object (nlohmann would silently
// keep the last one, which would hide a corrupt or hand-edited header).
// `where` starts the error messages (a path).
json parse_json_strict(std::string_view text, const std::string& where) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  json::parser_callback_t callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !open_objects.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  check_json_depth(text, where);
  json parsed;
  try {
    parsed = json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    fail("{}: header is not valid JSON: {}", where, e.what());
  }
  if (!duplicate.empty()) fail("{}: duplicate key '{}' in JSON", where, duplicate);
  return parsed;
}

// a * b, or false on overflow.
bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// Reads the entry `name` of the header into an StTensorInfo, checking types,
// the dtype, the shape and that the byte range matches shape x dtype size and
// lies within a data buffer of `data_bytes` bytes.
StTensorInfo parse_entry(const std::string& path, const std::string& name, const json& entry, uint64_t data_bytes) {
  if (!entry.is_object()) fail("{}: tensor '{}': entry is a JSON {}, expected an object", path, name, entry.type_name());
  StTensorInfo info;
  info.name = name;

  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) fail("{}: tensor '{}': missing \"dtype\"", path, name);
  if (!dtype_it->is_string()) fail("{}: tensor '{}': \"dtype\" is a JSON {}, expected a string", path, name, dtype_it->type_name());
  const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
  if (!parse_st_dtype(dtype_name, &info.dtype)) fail("{}: tensor '{}': unsupported dtype '{}'", path, name, dtype_name);

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) fail("{}: tensor '{}': missing \"shape\"", path, name);
  if (!shape_it->is_array()) fail("{}: tensor '{}': \"shape\" is a JSON {}, expected an array", path, name, shape_it->type_name());
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& dim : *shape_it) {
    if (dim.is_number_integer() && !dim.is_number_unsigned())  // a negative integer
      fail("{}: tensor '{}': negative dimension {} in \"shape\" {}", path, name, dim.get<int64_t>(), shape_it->dump());
    if (!dim.is_number_unsigned())
      fail("{}: tensor '{}': \"shape\" {} holds a non-integer", path, name, shape_it->dump());
    uint64_t d = dim.get<uint64_t>();
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || !checked_mul(numel, d, &numel)) overflow = true;
    info.shape.push_back(static_cast<int64_t>(d));
  }
  uint64_t nbytes = 0;
  if (overflow || !checked_mul(numel, st_dtype_size(info.dtype), &nbytes))
    fail("{}: tensor '{}': shape {} is too large", path, name, shape_it->dump());

  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end()) fail("{}: tensor '{}': missing \"data_offsets\"", path, name);
  const json& offsets = *offsets_it;
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
    fail("{}: tensor '{}': \"data_offsets\" is {}, expected [begin, end] of two non-negative integers", path, name,
         offsets.dump());
  info.begin = offsets[0].get<uint64_t>();
  info.end = offsets[1].get<uint64_t>();
  if (info.end < info.begin)
    fail("{}: tensor '{}': data_offsets [{}, {}] end before they begin", path, name, info.begin, info.end);
  if (info.end > data_bytes)
    fail("{}: tensor '{}': data_offsets [{}, {}] go beyond the data buffer ({} bytes)", path, name, info.begin,
         info.end, data_bytes);
  if (info.end - info.begin != nbytes)
    fail("{}: tensor '{}': data_offsets [{}, {}] span {} bytes, but shape {} of {} needs {}", path, name, info.begin,
         info.end, info.end - info.begin, shape_string(info.shape), st_dtype_name(info.dtype), nbytes);
  return info;
}

// Reads one little-endian element of type T from unaligned memory.
template <typename T>
T load(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// Converts a floating-point tensor's bytes to Out (float or double).
template <typename Out>
std::vector<Out> convert_float(StDType dtype, std::span<const uint8_t> bytes) {
  size_t n = bytes.size() / st_dtype_size(dtype);
  std::vector<Out> out(n);
  const uint8_t* p = bytes.data();
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case StDType::F64: out[i] = static_cast<Out>(load<double>(p + 8 * i)); break;
      case StDType::F32: out[i] = static_cast<Out>(load<float>(p + 4 * i)); break;
      case StDType::F16: out[i] = static_cast<Out>(f16_to_float(load<uint16_t>(p + 2 * i))); break;
      case StDType::BF16: out[i] = static_cast<Out>(bf16_to_float(load<uint16_t>(p + 2 * i))); break;
      default: ANATOMY_CHECK(false, "convert_float of {}", st_dtype_name(dtype));
    }
  }
  return out;
}

std::vector<int64_t> convert_int(StDType dtype, std::span<const uint8_t> bytes) {
  size_t n = bytes.size() / st_dtype_size(dtype);
  std::vector<int64_t> out(n);
  const uint8_t* p = bytes.data();
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case StDType::I64: out[i] = load<int64_t>(p + 8 * i); break;
      case StDType::I32: out[i] = load<int32_t>(p + 4 * i); break;
      case StDType::I16: out[i] = load<int16_t>(p + 2 * i); break;
      case StDType::I8: out[i] = load<int8_t>(p + i); break;
      case StDType::U8: out[i] = p[i]; break;
      case StDType::BOOL: out[i] = p[i] != 0; break;
      default: ANATOMY_CHECK(false, "convert_int of {}", st_dtype_name(dtype));
    }
  }
  return out;
}

}  // namespace

size_t st_dtype_size(StDType dtype) {
  switch (dtype) {
    case StDType::F64: return 8;
    case StDType::F32: return 4;
    case StDType::F16: return 2;
    case StDType::BF16: return 2;
    case StDType::I64: return 8;
    case StDType::I32: return 4;
    case StDType::I16: return 2;
    case StDType::I8: return 1;
    case StDType::U8: return 1;
    case StDType::BOOL: return 1;
  }
  return 0;
}

std::string_view st_dtype_name(StDType dtype) {
  switch (dtype) {
    case StDType::F64: return "F64";
    case StDType::F32: return "F32";
    case StDType::F16: return "F16";
    case StDType::BF16: return "BF16";
    case StDType::I64: return "I64";
    case StDType::I32: return "I32";
    case StDType::I16: return "I16";
    case StDType::I8: return "I8";
    case StDType::U8: return "U8";
    case StDType::BOOL: return "BOOL";
  }
  return "?";
}

bool parse_st_dtype(std::string_view name, StDType* out) {
  static constexpr StDType kAll[] = {StDType::F64, StDType::F32, StDType::F16, StDType::BF16, StDType::I64,
                                     StDType::I32, StDType::I16, StDType::I8,  StDType::U8,   StDType::BOOL};
  for (StDType dtype : kAll) {
    if (st_dtype_name(dtype) == name) {
      *out = dtype;
      return true;
    }
  }
  return false;
}

bool st_dtype_is_float(StDType dtype) {
  return dtype == StDType::F64 || dtype == StDType::F32 || dtype == StDType::F16 || dtype == StDType::BF16;
}

int64_t StTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---------------------------------------------------------------------------
// SafetensorsFile

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile file;
  file.path_ = path;
  auto bytes = std::make_shared<std::vector<uint8_t>>(read_file_bytes(path));
  const uint64_t size = bytes->size();
  if (size < 8) fail("{}: file is {} bytes, too short for the 8-byte header length", path, size);
  const uint64_t header_bytes = load<uint64_t>(bytes->data());
  if (header_bytes > kMaxHeaderBytes)
    fail("{}: header length {} is larger than the {}-byte limit", path, header_bytes, kMaxHeaderBytes);
  if (header_bytes > size - 8)
    fail("{}: header length {} goes beyond the end of the file ({} bytes)", path, header_bytes, size);
  const std::string_view header(reinterpret_cast<const char*>(bytes->data()) + 8, header_bytes);
  // As the reference implementation does: the header must open with '{' (no
  // leading padding; trailing spaces are allowed and ignored by the JSON parser).
  if (header.empty() || header.front() != '{') fail("{}: header does not start with '{{'", path);
  const json root = parse_json_strict(header, path);
  if (!root.is_object()) fail("{}: header is a JSON {}, expected an object", path, root.type_name());

  file.data_start_ = 8 + header_bytes;
  const uint64_t data_bytes = size - file.data_start_;
  for (const auto& [key, value] : root.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) fail("{}: \"{}\" is a JSON {}, expected an object", path, kMetadataKey, value.type_name());
      for (const auto& [meta_key, meta_value] : value.items()) {
        if (!meta_value.is_string())
          fail("{}: {} entry '{}' is a JSON {}, expected a string", path, kMetadataKey, meta_key, meta_value.type_name());
        file.metadata_[meta_key] = meta_value.get<std::string>();
      }
      continue;
    }
    file.tensors_[key] = parse_entry(path, key, value, data_bytes);
  }

  // The tensors, sorted by offset, must tile the data buffer exactly (the
  // reference rejects overlaps and gaps as InvalidOffset, and a buffer longer
  // than the tensors as MetadataIncompleteBuffer).
  std::vector<const StTensorInfo*> by_offset;
  for (const auto& [name, info] : file.tensors_) by_offset.push_back(&info);
  std::sort(by_offset.begin(), by_offset.end(), [](const StTensorInfo* a, const StTensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const StTensorInfo* previous = nullptr;
  for (const StTensorInfo* info : by_offset) {
    if (info->begin < covered)
      fail("{}: tensor '{}': data_offsets [{}, {}] overlap tensor '{}' [{}, {}]", path, info->name, info->begin,
           info->end, previous->name, previous->begin, previous->end);
    if (info->begin > covered)
      fail("{}: tensor '{}': data_offsets [{}, {}] leave a gap of {} bytes after byte {} of the data buffer", path,
           info->name, info->begin, info->end, info->begin - covered, covered);
    covered = info->end;
    previous = info;
  }
  if (covered != data_bytes)
    fail("{}: the tensors cover {} bytes of the {}-byte data buffer; {} trailing bytes belong to no tensor", path,
         covered, data_bytes, data_bytes - covered);

  file.bytes_ = std::move(bytes);
  return file;
}

SafetensorsFile SafetensorsFile::view(std::string path, std::shared_ptr<const std::vector<uint8_t>> bytes,
                                      std::vector<StTensorInfo> tensors) {
  SafetensorsFile file;
  file.path_ = std::move(path);
  const uint64_t size = bytes->size();
  for (StTensorInfo& info : tensors) {
    uint64_t nbytes = st_dtype_size(info.dtype);
    for (int64_t d : info.shape)
      if (d < 0 || !checked_mul(nbytes, static_cast<uint64_t>(d), &nbytes))
        fail("{}: tensor '{}': shape {} is too large", file.path_, info.name, shape_string(info.shape));
    if (info.end < info.begin || info.end > size || info.end - info.begin != nbytes)
      fail("{}: tensor '{}': bytes [{}, {}) do not hold shape {} of {} within the file's {} bytes", file.path_,
           info.name, info.begin, info.end, shape_string(info.shape), st_dtype_name(info.dtype), size);
    std::string name = info.name;
    if (!file.tensors_.emplace(name, std::move(info)).second) fail("{}: tensor '{}' appears twice", file.path_, name);
  }
  file.bytes_ = std::move(bytes);
  return file;
}

const StTensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("{}: no tensor '{}'", path_, name);
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_) out.push_back(name);  // std::map: already sorted
  return out;
}

std::span<const uint8_t> SafetensorsFile::raw(const std::string& name) const {
  const StTensorInfo& i = info(name);
  return {bytes_->data() + data_start_ + i.begin, static_cast<size_t>(i.end - i.begin)};
}

void SafetensorsFile::check_shape(const std::string& name, const std::vector<int64_t>& expected) const {
  const StTensorInfo& i = info(name);
  if (i.shape != expected)
    fail("{}: tensor '{}' has shape {}, expected {}", path_, name, shape_string(i.shape), shape_string(expected));
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  const StTensorInfo& i = info(name);
  if (!st_dtype_is_float(i.dtype))
    fail("{}: tensor '{}' has dtype {}, expected a floating-point dtype", path_, name, st_dtype_name(i.dtype));
  return convert_float<float>(i.dtype, raw(name));
}

std::vector<double> SafetensorsFile::read_f64(const std::string& name) const {
  const StTensorInfo& i = info(name);
  if (!st_dtype_is_float(i.dtype))
    fail("{}: tensor '{}' has dtype {}, expected a floating-point dtype", path_, name, st_dtype_name(i.dtype));
  return convert_float<double>(i.dtype, raw(name));
}

std::vector<int64_t> SafetensorsFile::read_i64(const std::string& name) const {
  const StTensorInfo& i = info(name);
  if (st_dtype_is_float(i.dtype))
    fail("{}: tensor '{}' has dtype {}, expected an integer or BOOL dtype", path_, name, st_dtype_name(i.dtype));
  return convert_int(i.dtype, raw(name));
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name, const std::vector<int64_t>& expected) const {
  check_shape(name, expected);
  return read_f32(name);
}

std::vector<double> SafetensorsFile::read_f64(const std::string& name, const std::vector<int64_t>& expected) const {
  check_shape(name, expected);
  return read_f64(name);
}

std::vector<int64_t> SafetensorsFile::read_i64(const std::string& name, const std::vector<int64_t>& expected) const {
  check_shape(name, expected);
  return read_i64(name);
}

// ---------------------------------------------------------------------------
// SafetensorsSet

namespace {

// Weights in formats anatomy does not read, as Hugging Face names them: a
// directory holding only these gets an error that says what is there.
struct ForeignWeights {
  std::string_view name;  // a file name, or a suffix when it starts with '.'
  std::string_view what;
};
constexpr ForeignWeights kForeignWeights[] = {
    {"tf_model.h5", "TensorFlow weights"},
    {"tf_model.h5.index.json", "sharded TensorFlow weights"},
    {"model.ckpt.index", "a TensorFlow 1 checkpoint"},
    {"flax_model.msgpack", "Flax weights"},
    {"flax_model.msgpack.index.json", "sharded Flax weights"},
    {".gguf", "GGUF weights, llama.cpp's format"},
    {".onnx", "an ONNX graph"},
    {".h5", "Keras weights"},
};

// The sorted names of `dir`'s entries ({} when it cannot be listed).
std::vector<std::string> directory_names(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    out.push_back(it->path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Reads a weight_map index (model.safetensors.index.json or
// pytorch_model.bin.index.json) and opens each shard once with `open`.
void open_shards(const std::string& dir, const std::string& index_path,
                 SafetensorsFile (*open)(const std::string&), std::vector<SafetensorsFile>& files,
                 std::map<std::string, size_t>& file_index) {
  namespace fs = std::filesystem;
  const std::string text = read_text_file(index_path);
  const json index = parse_json_strict(text, index_path);
  if (!index.is_object()) fail("{}: is a JSON {}, expected an object", index_path, index.type_name());
  auto map_it = index.find("weight_map");
  if (map_it == index.end()) fail("{}: missing \"weight_map\"", index_path);
  if (!map_it->is_object()) fail("{}: \"weight_map\" is a JSON {}, expected an object", index_path, map_it->type_name());
  if (map_it->empty()) fail("{}: \"weight_map\" is empty", index_path);

  // Open each shard once, in name order, and check that it holds what is mapped to it.
  std::map<std::string, std::vector<std::string>> tensors_of_shard;
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string() || shard.get_ref<const std::string&>().empty())
      fail("{}: weight_map entry for tensor '{}' is {}, expected a shard file name", index_path, tensor, shard.dump());
    tensors_of_shard[shard.get<std::string>()].push_back(tensor);
  }
  for (const auto& [shard, tensors] : tensors_of_shard) {
    const std::string shard_path = (fs::path(dir) / shard).string();
    if (!path_exists(shard_path))
      fail("{}: shard '{}' (holding tensor '{}') does not exist", index_path, shard, tensors.front());
    files.push_back(open(shard_path));
    const SafetensorsFile& file = files.back();
    for (const std::string& tensor : tensors) {
      if (!file.has(tensor))
        fail("{}: tensor '{}' is mapped to shard '{}', which does not hold it", index_path, tensor, shard);
      file_index[tensor] = files.size() - 1;
    }
  }
}

}  // namespace

std::string find_weights_file(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!is_directory(dir)) fail("{}: not a directory", dir);
  // transformers' order: safetensors first, then the pickled state dict.
  for (const char* name : {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                           "pytorch_model.bin.index.json"})
    if (path_exists((fs::path(dir) / name).string())) return name;
  std::vector<std::string> found;
  for (const std::string& entry : directory_names(dir))
    for (const ForeignWeights& f : kForeignWeights) {
      const bool suffix = f.name.front() == '.';
      if (suffix ? entry.size() > f.name.size() && entry.ends_with(f.name) : entry == f.name) {
        found.push_back(fmt::format("{} ({})", entry, f.what));
        break;
      }
    }
  if (!found.empty())
    fail("{}: holds {}, but no weights anatomy reads: model.safetensors, pytorch_model.bin and their sharded "
         ".index.json are missing (convert with transformers: from_pretrained, then save_pretrained)",
         dir, fmt::join(found, "; "));
  fail("{}: no weights: neither model.safetensors, model.safetensors.index.json, pytorch_model.bin nor "
       "pytorch_model.bin.index.json is there",
       dir);
}

SafetensorsSet SafetensorsSet::open_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  SafetensorsSet set;
  set.dir_ = dir;
  set.source_ = find_weights_file(dir);
  const std::string path = (fs::path(dir) / set.source_).string();
  if (set.source_ == "model.safetensors" || set.source_ == "pytorch_model.bin") {
    set.files_.push_back(set.source_ == "model.safetensors" ? SafetensorsFile::open(path) : open_torch_checkpoint(path));
    for (const std::string& name : set.files_[0].names()) set.file_index_[name] = 0;
  } else if (set.source_ == "model.safetensors.index.json") {
    open_shards(dir, path, SafetensorsFile::open, set.files_, set.file_index_);
  } else {
    open_shards(dir, path, open_torch_checkpoint, set.files_, set.file_index_);
  }
  return set;
}

const SafetensorsFile& SafetensorsSet::file_of(const std::string& name) const {
  auto it = file_index_.find(name);
  if (it == file_index_.end()) fail("{}: checkpoint has no tensor '{}'", dir_, name);
  return files_[it->second];
}

std::vector<std::string> SafetensorsSet::names() const {
  std::vector<std::string> out;
  out.reserve(file_index_.size());
  for (const auto& [name, index] : file_index_) out.push_back(name);
  return out;
}

// ---------------------------------------------------------------------------
// Writer

void write_safetensors(const std::string& path, const std::vector<StWriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // nlohmann::ordered_json keeps the header's entries in the order written:
  // metadata first (as the reference writer does), then the tensors in layout order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const StWriteTensor& t : tensors) {
    if (t.name.empty()) fail("{}: cannot write a tensor with an empty name", path);
    if (t.name == kMetadataKey) fail("{}: cannot write a tensor named '{}'", path, t.name);
    if (!seen.insert(t.name).second) fail("{}: tensor '{}' given twice", path, t.name);
    uint64_t bytes = st_dtype_size(t.dtype);
    for (int64_t d : t.shape) {
      if (d < 0) fail("{}: tensor '{}': negative dimension in shape {}", path, t.name, shape_string(t.shape));
      if (!checked_mul(bytes, static_cast<uint64_t>(d), &bytes))
        fail("{}: tensor '{}': shape {} is too large", path, t.name, shape_string(t.shape));
    }
    if (bytes > 0 && t.data == nullptr) fail("{}: tensor '{}': no data for {} bytes", path, t.name, bytes);
    header[t.name] = {{"dtype", st_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    sizes.push_back(bytes);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::exception& e) {  // e.g. a name that is not valid UTF-8
    fail("{}: cannot encode the header: {}", path, e.what());
  }
  // Pad so that the data buffer (at 8 + N) starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_bytes = text.size();

  AtomicFile file(path);
  file.write(&header_bytes, 8);
  file.write(text);
  for (size_t i = 0; i < tensors.size(); ++i) file.write(tensors[i].data, sizes[i]);
  file.commit();
}

}  // namespace anatomy::io
