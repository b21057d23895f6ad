// fuzz_torch_checkpoint: pytorch_model.bin (torch.save's zip archive and its
// data.pkl, read by the restricted unpickler) through open_torch_checkpoint
// and every tensor reader. The input's first byte picks what the rest is:
//   even: the whole file (the zip archive: central directory, ZIP64 records,
//         local headers, CRCs; then the pickle inside);
//   odd:  data.pkl alone, which the harness stores in an archive as torch.save
//         lays it out (archive/data.pkl, archive/byteorder "little",
//         archive/data/0 ... archive/data/13 of the sizes that the storages of
//         tests/fixtures/pytorch-bin/dtypes.bin have), so that mutations reach
//         the unpickler without first breaking a CRC.
#include <cstdint>
#include <string>
#include <vector>

#include "anatomy/io/torch_checkpoint.h"
#include "anatomy/io/zip_archive.h"
#include "fuzz_util.h"

using namespace anatomy;

namespace {

void put16(std::string& out, uint32_t v) {
  out += static_cast<char>(v & 0xFF);
  out += static_cast<char>((v >> 8) & 0xFF);
}
void put32(std::string& out, uint32_t v) {
  put16(out, v & 0xFFFF);
  put16(out, v >> 16);
}

// A zip archive of stored entries (CRC computed), as torch.save writes one.
std::string zip(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out, directory;
  for (const auto& [name, data] : entries) {
    const uint32_t crc = io::crc32({reinterpret_cast<const uint8_t*>(data.data()), data.size()});
    const auto offset = static_cast<uint32_t>(out.size());
    put32(out, 0x04034b50);
    put16(out, 20), put16(out, 0), put16(out, 0), put16(out, 0), put16(out, 0);
    put32(out, crc), put32(out, data.size()), put32(out, data.size());
    put16(out, name.size()), put16(out, 0);
    out += name;
    out += data;
    put32(directory, 0x02014b50);
    put16(directory, 20), put16(directory, 20), put16(directory, 0), put16(directory, 0);
    put16(directory, 0), put16(directory, 0);
    put32(directory, crc), put32(directory, data.size()), put32(directory, data.size());
    put16(directory, name.size()), put16(directory, 0), put16(directory, 0), put16(directory, 0);
    put16(directory, 0), put32(directory, 0), put32(directory, offset);
    directory += name;
  }
  const auto directory_offset = static_cast<uint32_t>(out.size());
  out += directory;
  put32(out, 0x06054b50);
  put16(out, 0), put16(out, 0), put16(out, entries.size()), put16(out, entries.size());
  put32(out, directory.size()), put32(out, directory_offset), put16(out, 0);
  return out;
}

std::string archive_of_pickle(std::string_view pickle) {
  std::vector<std::pair<std::string, std::string>> entries = {{"archive/data.pkl", std::string(pickle)},
                                                              {"archive/byteorder", "little"}};
  const size_t sizes[] = {24, 16, 8, 6, 24, 8, 4, 2, 2, 3, 4, 0, 48, 24};
  for (size_t k = 0; k < std::size(sizes); ++k) {
    std::string bytes(sizes[k], '\0');
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 37 + k);
    entries.emplace_back("archive/data/" + std::to_string(k), bytes);
  }
  return zip(entries);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest = fuzz::as_text(data + 1, size - 1);
  const std::string path =
      fuzz::scratch_file("pytorch_model.bin", (data[0] & 1) ? std::string_view(archive_of_pickle(rest)) : rest);
  fuzz::expect_error([&] {
    const io::SafetensorsFile file = io::open_torch_checkpoint(path);
    for (const std::string& name : file.names()) {
      const io::StTensorInfo& info = file.info(name);
      (void)file.raw(name);
      if (io::st_dtype_is_float(info.dtype)) (void)file.read_f32(name, info.shape);
      else (void)file.read_i64(name, info.shape);
    }
  });
  return 0;
}
