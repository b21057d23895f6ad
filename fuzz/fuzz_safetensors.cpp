// fuzz_safetensors: model.safetensors (the 8-byte header length, the JSON
// header, the data buffer) through SafetensorsFile::open and every tensor
// reader; or, for input that starts with '{', a model.safetensors.index.json
// through SafetensorsSet::open_dir, beside a valid shard a.safetensors
// holding tensors "x" and "y" (the index may map any names to any files).
#include <cstdint>
#include <string>

#include "anatomy/io/safetensors.h"
#include "fuzz_util.h"

using namespace anatomy;

namespace {

void read_all(const io::SafetensorsFile& file) {
  for (const std::string& name : file.names()) {
    const io::StTensorInfo& info = file.info(name);
    (void)info.numel();
    (void)file.raw(name);
    if (io::st_dtype_is_float(info.dtype)) {
      (void)file.read_f32(name);
      (void)file.read_f64(name, info.shape);
    } else {
      (void)file.read_i64(name, info.shape);
    }
    fuzz::expect_error([&] { file.check_shape(name, {1, 2}); });
  }
  for (const auto& [key, value] : file.metadata()) (void)(key.size() + value.size());
  fuzz::expect_error([&] { (void)file.info("absent"); });
}

const std::string& index_dir() {
  static const std::string dir = [] {
    const std::string d = fuzz::fresh_dir("index");
    const float x[2] = {1.0f, 2.0f};
    const int64_t y[1] = {7};
    io::write_safetensors(d + "/a.safetensors", {{"x", io::StDType::F32, {2}, x}, {"y", io::StDType::I64, {1}, y}});
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes = fuzz::as_text(data, size);
  if (!bytes.empty() && bytes[0] == '{') {
    const std::string& dir = index_dir();
    fuzz::write_file(dir + "/model.safetensors.index.json", bytes);
    fuzz::expect_error([&] {
      const io::SafetensorsSet set = io::SafetensorsSet::open_dir(dir);
      for (const std::string& name : set.names()) read_all(set.file_of(name));
    });
    return 0;
  }
  const std::string path = fuzz::scratch_file("model.safetensors", bytes);
  fuzz::expect_error([&] { read_all(io::SafetensorsFile::open(path)); });
  return 0;
}
