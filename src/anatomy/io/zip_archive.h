// zip_archive.h: a strict reader of the zip archives that torch.save writes
// (its "zipfile" format, PyTorch >= 1.6): the central directory (ZIP64 too),
// each entry's local header, and the bytes of entries that are stored, not
// compressed. Nothing is extracted to disk and nothing is decompressed: an
// entry compressed by another tool is refused, naming it.
//
// Every offset and size read from the file is checked against the file's size
// before it is used; a defect is an Error "<path>: ..." naming the entry.
//
// The layout (APPNOTE.TXT, sections 4.3.x): local header + data for each entry,
// then the central directory (one header per entry, with its local header's
// offset), then, for ZIP64, the ZIP64 end record and its locator, and last the
// end of central directory record (22 bytes plus a comment of up to 65535).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace anatomy::io {

struct ZipEntry {
  std::string name;
  uint16_t flags = 0;         // general purpose bit flag (bit 0: encrypted)
  uint16_t method = 0;        // 0: stored; 8: deflate; ...
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;
  uint64_t size = 0;          // uncompressed
  uint64_t local_header_offset = 0;
};

class ZipArchive {
 public:
  // Reads the central directory of `bytes` (the whole file, kept alive by the
  // archive). Error "<path>: ..." if it is not a zip archive or is damaged.
  static ZipArchive parse(std::string path, std::shared_ptr<const std::vector<uint8_t>> bytes);

  const std::string& path() const { return path_; }
  const std::vector<ZipEntry>& entries() const { return entries_; }  // in central directory order
  const ZipEntry* find(const std::string& name) const;               // null when absent

  // The entry's bytes as stored, after checking its local header against the
  // central directory, that it is stored (not compressed, not encrypted), that
  // it lies within the file and that its CRC-32 matches (a CRC of 0 is taken
  // as "not computed", which torch.serialization.set_crc32_options(False)
  // writes). Error naming the entry otherwise.
  std::span<const uint8_t> stored(const ZipEntry& entry) const;
  // Where stored(entry)'s bytes begin within the file.
  uint64_t data_offset(const ZipEntry& entry) const;

  const std::shared_ptr<const std::vector<uint8_t>>& bytes() const { return bytes_; }

 private:
  std::string path_;
  std::shared_ptr<const std::vector<uint8_t>> bytes_;
  std::vector<ZipEntry> entries_;
  std::map<std::string, size_t> index_;
};

// The CRC-32 of zip (and gzip, PNG): polynomial 0xEDB88320, reflected.
uint32_t crc32(std::span<const uint8_t> bytes, uint32_t crc = 0);

// Whether `bytes` start like a zip archive (a local header or, for an empty
// archive, an end of central directory record).
bool looks_like_zip(std::span<const uint8_t> bytes);

}  // namespace anatomy::io
