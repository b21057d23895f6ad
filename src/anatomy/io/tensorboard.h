// tensorboard.h: TensorBoard event files, written by hand (no TensorFlow, no
// protobuf library): TFRecord framing (length, masked CRC-32C of the length,
// the bytes, masked CRC-32C of the bytes) around Event protocol buffers
// (wall_time, step, Summary.Value{tag, simple_value}), the first event naming
// the file version "brain.Event:2", as torch.utils.tensorboard.SummaryWriter
// writes them. A reader of the same records checks the CRCs (tests, tools).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace anatomy::io {

// CRC-32C (Castagnoli), and TFRecord's mask of it.
uint32_t crc32c(const uint8_t* data, size_t n);
uint32_t masked_crc32c(const uint8_t* data, size_t n);

class EventFileWriter {
 public:
  // Creates `dir` and dir/events.out.tfevents.<seconds>.<host>.<pid>.<n>, and
  // writes its version event; errors name the file.
  explicit EventFileWriter(const std::string& dir);
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time);
  void add_scalar(const std::string& tag, double value, int64_t step);  // wall_time: now
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& bytes);
  std::string path_;
  std::ofstream out_;
};

// One event of a file, as read back.
struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  struct Value {
    std::string tag;
    float simple_value = 0;
  };
  std::vector<Value> values;
};

// The events of a file; an error names the file and the record whose length,
// CRC or protocol buffer is wrong.
std::vector<Event> read_event_file(const std::string& path);

// torch's SummaryWriter's file name for now: events.out.tfevents.<seconds>.<host>.<pid>.<n>.
std::string event_file_name();
// Trainer's default logging directory under `output_dir`: runs/<Mon DD_HH-MM-SS>_<host>.
std::string default_logging_dir(const std::string& output_dir);

}  // namespace anatomy::io
