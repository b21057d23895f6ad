// zip_archive.cpp: the central directory, ZIP64 records and stored entries of
// a zip archive, every field bounds-checked before use.
#include "anatomy/io/zip_archive.h"

#include <array>
#include <cstring>
#include <string_view>

#include "anatomy/core/error.h"

namespace anatomy::io {

namespace {

constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint16_t kZip64ExtraId = 0x0001;

constexpr uint64_t kLocalHeaderBytes = 30;
constexpr uint64_t kCentralHeaderBytes = 46;
constexpr uint64_t kEndBytes = 22;
constexpr uint64_t kZip64LocatorBytes = 20;
constexpr uint64_t kZip64EndBytes = 56;  // up to and including the central directory's offset
constexpr uint64_t kMaxComment = 65535;

// Little-endian reads at a position the caller has checked.
uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t u32(const uint8_t* p) { return u16(p) | (static_cast<uint32_t>(u16(p + 2)) << 16); }
uint64_t u64(const uint8_t* p) { return u32(p) | (static_cast<uint64_t>(u32(p + 4)) << 32); }

// a + b <= limit, without overflow.
bool fits(uint64_t a, uint64_t b, uint64_t limit) { return a <= limit && b <= limit - a; }

std::string_view method_name(uint16_t method) {
  switch (method) {
    case 8: return "deflate";
    case 9: return "deflate64";
    case 12: return "bzip2";
    case 14: return "LZMA";
    case 93: return "Zstandard";
    case 95: return "xz";
    default: return "a compression method";
  }
}

// The table of the byte-wise CRC-32 and the seven tables of slicing-by-8.
struct Crc32Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  constexpr Crc32Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (size_t k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  }
};
constexpr Crc32Tables kCrc;

}  // namespace

uint32_t crc32(std::span<const uint8_t> bytes, uint32_t crc) {
  const auto& t = kCrc.t;
  uint32_t c = ~crc;
  const uint8_t* p = bytes.data();
  size_t n = bytes.size();
  for (; n >= 8; n -= 8, p += 8) {
    const uint32_t lo = u32(p) ^ c, hi = u32(p + 4);
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][hi & 0xff] ^
        t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
  }
  for (; n > 0; --n, ++p) c = t[0][(c ^ *p) & 0xff] ^ (c >> 8);
  return ~c;
}

bool looks_like_zip(std::span<const uint8_t> bytes) {
  if (bytes.size() < 4) return false;
  const uint32_t signature = u32(bytes.data());
  return signature == kLocalHeaderSignature || signature == kEndSignature;
}

ZipArchive ZipArchive::parse(std::string path, std::shared_ptr<const std::vector<uint8_t>> bytes) {
  ZipArchive zip;
  zip.path_ = std::move(path);
  const std::string& where = zip.path_;
  const uint8_t* data = bytes->data();
  const uint64_t size = bytes->size();
  if (size < kEndBytes) fail("{}: {} bytes, too short for a zip archive", where, size);

  // The end record: the last position whose record, with its comment, ends the file.
  uint64_t end = UINT64_MAX;
  const uint64_t lowest = size - kEndBytes > kMaxComment ? size - kEndBytes - kMaxComment : 0;
  for (uint64_t at = size - kEndBytes + 1; at-- > lowest;) {
    if (u32(data + at) == kEndSignature && at + kEndBytes + u16(data + at + 20) == size) {
      end = at;
      break;
    }
  }
  if (end == UINT64_MAX)
    fail("{}: no end of central directory record: not a zip archive, or truncated", where);
  const uint8_t* e = data + end;
  uint64_t disk = u16(e + 4), cd_disk = u16(e + 6);
  uint64_t count_here = u16(e + 8), count = u16(e + 10);
  uint64_t cd_size = u32(e + 12), cd_offset = u32(e + 16);
  uint64_t cd_limit = end;  // the central directory ends before the records that follow it

  // ZIP64: a locator just before the end record points at the ZIP64 end record.
  if (end >= kZip64LocatorBytes && u32(data + end - kZip64LocatorBytes) == kZip64LocatorSignature) {
    const uint8_t* locator = data + end - kZip64LocatorBytes;
    const uint64_t record = u64(locator + 8);
    if (u32(locator + 4) != 0 || u32(locator + 16) > 1)
      fail("{}: a zip archive split over several disks is not supported", where);
    if (!fits(record, kZip64EndBytes, end - kZip64LocatorBytes))
      fail("{}: the ZIP64 end record's offset {} lies outside the file", where, record);
    const uint8_t* z = data + record;
    if (u32(z) != kZip64EndSignature) fail("{}: no ZIP64 end record at offset {}", where, record);
    if (u64(z + 4) < kZip64EndBytes - 12 || !fits(record + 12, u64(z + 4), end - kZip64LocatorBytes))
      fail("{}: the ZIP64 end record's size {} is wrong", where, u64(z + 4));
    disk = u32(z + 16);
    cd_disk = u32(z + 20);
    count_here = u64(z + 24);
    count = u64(z + 32);
    cd_size = u64(z + 40);
    cd_offset = u64(z + 48);
    cd_limit = record;
  } else if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    fail("{}: the end record defers to a ZIP64 record that is not there (truncated?)", where);
  }
  if (disk != 0 || cd_disk != 0 || count_here != count)
    fail("{}: a zip archive split over several disks is not supported", where);
  if (!fits(cd_offset, cd_size, cd_limit))
    fail("{}: the central directory (offset {}, {} bytes) lies outside the file ({} bytes): truncated or damaged",
         where, cd_offset, cd_size, size);
  if (count > cd_size / kCentralHeaderBytes)
    fail("{}: {} entries cannot fit a central directory of {} bytes", where, count, cd_size);

  const uint64_t cd_end = cd_offset + cd_size;
  uint64_t at = cd_offset;
  zip.entries_.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    if (!fits(at, kCentralHeaderBytes, cd_end))
      fail("{}: central directory entry {} of {} runs past the directory's end", where, i, count);
    const uint8_t* h = data + at;
    if (u32(h) != kCentralHeaderSignature)
      fail("{}: central directory entry {} of {} has no header signature at offset {}", where, i, count, at);
    const uint64_t name_bytes = u16(h + 28), extra_bytes = u16(h + 30), comment_bytes = u16(h + 32);
    if (!fits(at + kCentralHeaderBytes, name_bytes + extra_bytes + comment_bytes, cd_end))
      fail("{}: central directory entry {} of {} runs past the directory's end", where, i, count);
    ZipEntry entry;
    entry.flags = u16(h + 8);
    entry.method = u16(h + 10);
    entry.crc32 = u32(h + 16);
    entry.compressed_size = u32(h + 20);
    entry.size = u32(h + 24);
    uint64_t entry_disk = u16(h + 34);
    entry.local_header_offset = u32(h + 42);
    entry.name.assign(reinterpret_cast<const char*>(h + kCentralHeaderBytes), name_bytes);
    if (entry.name.empty()) fail("{}: central directory entry {} has an empty name", where, i);
    // Names appear in error lines: control characters (a newline, say) are refused here.
    for (const char c : entry.name)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F)
        fail("{}: central directory entry {} has a name with a control character (byte 0x{:02X})", where, i,
             static_cast<unsigned char>(c));

    // The ZIP64 extra field holds, in this order, each of these whose 32-bit field is saturated.
    const uint8_t* extra = h + kCentralHeaderBytes + name_bytes;
    for (uint64_t x = 0; x < extra_bytes;) {
      if (x + 4 > extra_bytes) fail("{}: entry '{}': a truncated extra field", where, entry.name);
      const uint16_t id = u16(extra + x);
      const uint64_t field_bytes = u16(extra + x + 2);
      if (!fits(x + 4, field_bytes, extra_bytes)) fail("{}: entry '{}': an extra field runs past its end", where, entry.name);
      if (id == kZip64ExtraId) {
        const uint8_t* f = extra + x + 4;
        uint64_t used = 0;
        auto take = [&](uint64_t* value, uint64_t saturated, int width) {
          if (*value != saturated) return;
          if (used + width > field_bytes)
            fail("{}: entry '{}': the ZIP64 extra field lacks a value its header defers to it", where, entry.name);
          *value = width == 8 ? u64(f + used) : u32(f + used);
          used += width;
        };
        take(&entry.size, 0xFFFFFFFF, 8);
        take(&entry.compressed_size, 0xFFFFFFFF, 8);
        take(&entry.local_header_offset, 0xFFFFFFFF, 8);
        take(&entry_disk, 0xFFFF, 4);
      }
      x += 4 + field_bytes;
    }
    if (entry_disk != 0) fail("{}: entry '{}' is on another disk of a split archive", where, entry.name);
    if (!fits(entry.local_header_offset, kLocalHeaderBytes, cd_offset))
      fail("{}: entry '{}': its local header's offset {} lies outside the entries' part of the file", where,
           entry.name, entry.local_header_offset);
    if (!zip.index_.emplace(entry.name, zip.entries_.size()).second)
      fail("{}: entry '{}' appears twice in the central directory", where, entry.name);
    zip.entries_.push_back(std::move(entry));
    at += kCentralHeaderBytes + name_bytes + extra_bytes + comment_bytes;
  }
  if (at != cd_end)
    fail("{}: the central directory holds {} bytes beyond its {} entries", where, cd_end - at, count);
  zip.bytes_ = std::move(bytes);
  return zip;
}

const ZipEntry* ZipArchive::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

uint64_t ZipArchive::data_offset(const ZipEntry& entry) const {
  const uint8_t* data = bytes_->data();
  const uint64_t size = bytes_->size();
  const std::string& where = path_;
  if (entry.flags & 1) fail("{}: entry '{}' is encrypted", where, entry.name);
  if (entry.method != 0)
    fail("{}: entry '{}' is compressed ({}, method {}); torch.save stores every entry uncompressed, so the file was "
         "zipped again by another tool: re-save it with torch.save or convert it to safetensors",
         where, entry.name, method_name(entry.method), entry.method);
  if (entry.compressed_size != entry.size)
    fail("{}: entry '{}' is stored, but its stored size {} differs from its size {}", where, entry.name,
         entry.compressed_size, entry.size);
  const uint64_t at = entry.local_header_offset;  // parse() checked that its 30 bytes are in the file
  const uint8_t* h = data + at;
  if (u32(h) != kLocalHeaderSignature)
    fail("{}: entry '{}': no local header at offset {} (damaged, or wrong offsets)", where, entry.name, at);
  if (u16(h + 8) != entry.method)
    fail("{}: entry '{}': its local header's method {} differs from the central directory's {}", where, entry.name,
         u16(h + 8), entry.method);
  const uint64_t name_bytes = u16(h + 26), extra_bytes = u16(h + 28);
  if (!fits(at + kLocalHeaderBytes, name_bytes + extra_bytes, size))
    fail("{}: entry '{}': its local header runs past the end of the file", where, entry.name);
  if (std::string_view(reinterpret_cast<const char*>(h + kLocalHeaderBytes), name_bytes) != entry.name)
    fail("{}: entry '{}': its local header names another entry (damaged, or wrong offsets)", where, entry.name);
  const uint64_t begin = at + kLocalHeaderBytes + name_bytes + extra_bytes;
  if (!fits(begin, entry.size, size))
    fail("{}: entry '{}': its {} bytes at offset {} run past the end of the file ({} bytes): truncated", where,
         entry.name, entry.size, begin, size);
  return begin;
}

std::span<const uint8_t> ZipArchive::stored(const ZipEntry& entry) const {
  const uint64_t begin = data_offset(entry);
  const std::span<const uint8_t> out(bytes_->data() + begin, static_cast<size_t>(entry.size));
  if (entry.crc32 != 0 || entry.size == 0) {
    const uint32_t actual = crc32(out);
    if (actual != entry.crc32)
      fail("{}: entry '{}' fails its CRC-32 check ({:08x}, the directory says {:08x}): the file is damaged", path_,
           entry.name, actual, entry.crc32);
  }
  return out;
}

}  // namespace anatomy::io
