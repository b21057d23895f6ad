// tensorboard.cpp: TFRecord framing and the few protocol buffer fields of an Event.
#include "anatomy/io/tensorboard.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>

#include "anatomy/core/error.h"
#include "anatomy/io/files.h"

namespace anatomy::io {

namespace {

// The table of the reflected Castagnoli polynomial 0x82F63B78.
const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// Protocol buffer encoding: a varint, a field's key, little-endian fixed widths.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, int field, int wire) { put_varint(out, static_cast<uint64_t>(field) << 3 | wire); }
template <typename T>
void put_fixed(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // little-endian hosts (x86-64, aarch64)
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A reader of protocol buffer bytes; `what` names the record for errors.
class Fields {
 public:
  Fields(std::string_view bytes, std::string what) : p_(bytes), what_(std::move(what)) {}
  bool done() const { return p_.empty(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_.empty()) bad("a varint runs past the end");
      const uint8_t b = static_cast<uint8_t>(p_.front());
      p_.remove_prefix(1);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    bad("a varint longer than 10 bytes");
  }
  template <typename T>
  T fixed() {
    if (p_.size() < sizeof(T)) bad("a fixed field runs past the end");
    T v;
    std::memcpy(&v, p_.data(), sizeof(T));
    p_.remove_prefix(sizeof(T));
    return v;
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (n > p_.size()) bad("a length-delimited field runs past the end");
    const std::string_view b = p_.substr(0, n);
    p_.remove_prefix(n);
    return b;
  }
  void skip(int wire) {
    switch (wire) {
      case 0: varint(); break;
      case 1: fixed<uint64_t>(); break;
      case 2: bytes(); break;
      case 5: fixed<uint32_t>(); break;
      default: bad(fmt::format("wire type {}", wire));
    }
  }
  [[noreturn]] void bad(const std::string& why) const { fail("{}: not an Event protocol buffer ({})", what_, why); }

 private:
  std::string_view p_;
  std::string what_;
};

}  // namespace

uint32_t crc32c(const uint8_t* data, size_t n) {
  const auto& t = crc_table();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = t[(c ^ data[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const uint8_t* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string event_file_name() {
  static std::atomic<int> uid{0};
  return fmt::format("events.out.tfevents.{:010d}.{}.{}.{}", static_cast<int64_t>(now_seconds()), host_name(),
                     static_cast<int>(getpid()), uid++);
}

std::string default_logging_dir(const std::string& output_dir) {
  const std::time_t t = std::time(nullptr);
  std::tm local{};
  localtime_r(&t, &local);
  char stamp[64];
  std::strftime(stamp, sizeof stamp, "%b%d_%H-%M-%S", &local);
  return (std::filesystem::path(output_dir) / "runs" / (std::string(stamp) + "_" + host_name())).string();
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("--logging-dir {}: cannot create ({})", dir, ec.message());
  path_ = (std::filesystem::path(dir) / event_file_name()).string();
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) fail("{}: cannot open for writing", path_);
  std::string event;
  put_key(event, 1, 1);
  put_fixed<double>(event, now_seconds());
  put_bytes(event, 3, "brain.Event:2");
  write_record(event);
  flush();
}

void EventFileWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  std::string v;
  put_bytes(v, 1, tag);
  put_key(v, 2, 5);
  put_fixed<float>(v, static_cast<float>(value));
  std::string summary;
  put_bytes(summary, 1, v);
  std::string event;
  put_key(event, 1, 1);
  put_fixed<double>(event, wall_time);
  put_key(event, 2, 0);
  put_varint(event, static_cast<uint64_t>(step));
  put_bytes(event, 5, summary);
  write_record(event);
}

void EventFileWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  add_scalar(tag, value, step, now_seconds());
}

void EventFileWriter::write_record(const std::string& bytes) {
  std::string header;
  put_fixed<uint64_t>(header, bytes.size());
  const auto* h = reinterpret_cast<const uint8_t*>(header.data());
  put_fixed<uint32_t>(header, masked_crc32c(h, 8));
  std::string footer;
  put_fixed<uint32_t>(footer, masked_crc32c(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  out_ << header << bytes << footer;
  if (!out_) fail("{}: write failed", path_);
}

void EventFileWriter::flush() {
  out_.flush();
  if (!out_) fail("{}: write failed", path_);
}

std::vector<Event> read_event_file(const std::string& path) {
  const std::vector<uint8_t> data = read_file_bytes(path);
  std::vector<Event> events;
  size_t at = 0;
  for (int record = 0; at < data.size(); ++record) {
    const std::string what = fmt::format("{}: record {}", path, record);
    if (data.size() - at < 12) fail("{}: a header of {} bytes, 12 expected", what, data.size() - at);
    uint64_t length;
    uint32_t length_crc;
    std::memcpy(&length, data.data() + at, 8);
    std::memcpy(&length_crc, data.data() + at + 8, 4);
    if (length_crc != masked_crc32c(data.data() + at, 8)) fail("{}: the length's CRC does not match", what);
    at += 12;
    if (length > data.size() - at || data.size() - at - length < 4)
      fail("{}: {} bytes announced, {} left", what, length, data.size() - at);
    uint32_t data_crc;
    std::memcpy(&data_crc, data.data() + at + length, 4);
    if (data_crc != masked_crc32c(data.data() + at, length)) fail("{}: the data's CRC does not match", what);
    Fields f(std::string_view(reinterpret_cast<const char*>(data.data() + at), length), what);
    at += length + 4;
    Event e;
    while (!f.done()) {
      const uint64_t key = f.varint();
      const int field = static_cast<int>(key >> 3), wire = static_cast<int>(key & 7);
      if (field == 1 && wire == 1) e.wall_time = f.fixed<double>();
      else if (field == 2 && wire == 0) e.step = static_cast<int64_t>(f.varint());
      else if (field == 3 && wire == 2) e.file_version = std::string(f.bytes());
      else if (field == 5 && wire == 2) {
        Fields summary(f.bytes(), what);
        while (!summary.done()) {
          const uint64_t k = summary.varint();
          if (k != (1 << 3 | 2)) {
            summary.skip(static_cast<int>(k & 7));
            continue;
          }
          Fields value(summary.bytes(), what);
          Event::Value v;
          while (!value.done()) {
            const uint64_t vk = value.varint();
            if (vk == (1 << 3 | 2)) v.tag = std::string(value.bytes());
            else if (vk == (2 << 3 | 5)) v.simple_value = value.fixed<float>();
            else value.skip(static_cast<int>(vk & 7));
          }
          e.values.push_back(std::move(v));
        }
      } else {
        f.skip(wire);
      }
    }
    events.push_back(std::move(e));
  }
  return events;
}

}  // namespace anatomy::io
