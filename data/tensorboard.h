// defines: TensorBoard's event files: crc32c() and masked_crc32c() (TFRecord's checksums),
// EventWriter (a run's new event file: scalars and text, each record on disk as it is
// written), read_event_file() (the whole records of a file, a crash's cut-off last one left
// out), event_step(), and trim_event_files() (a resumed run's older files cut back to the step
// it resumes from).
//
// The format, as TensorBoard reads it (TensorFlow's record_writer.cc; tensorboard/compat/proto/
// event.proto, summary.proto, tensor.proto): a file of records, each
//   uint64 length | uint32 masked_crc32c(length) | length bytes of data | uint32 masked_crc32c(data)
// (little-endian), the data one Event message in protobuf's wire format. The fields written:
//   Event           { double wall_time = 1; int64 step = 2; string file_version = 3;
//                     Summary summary = 5; }
//   Summary         { repeated Value value = 1; }
//   Summary.Value   { string tag = 1; float simple_value = 2; TensorProto tensor = 8;
//                     SummaryMetadata metadata = 9; }
//   SummaryMetadata { PluginData plugin_data = 1; }    PluginData { string plugin_name = 1; }
//   TensorProto     { DataType dtype = 1 (DT_STRING = 7); TensorShapeProto tensor_shape = 2;
//                     repeated bytes string_val = 8; }
//   TensorShapeProto { repeated Dim dim = 2; }         Dim { int64 size = 1; }
// A file starts with an Event whose file_version is "brain.Event:2". A scalar is a Value with a
// simple_value; a text (the text plugin's) a Value with a one-string DT_STRING tensor and the
// plugin's name. These few fields are encoded by hand (varints, fixed 4- and 8-byte numbers,
// length-prefixed strings and messages): simpler than generating protobuf classes for six
// messages, and tested against TensorBoard's own reader (tests/train/run/tensorboard_test.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cutrain {

// CRC-32C (Castagnoli, the polynomial 0x1EDC6F41 reflected), as iSCSI (RFC 3720) and TFRecord
// use it; `crc` continues an earlier call's result.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// TFRecord's masked form: rotate right by 15 bits, add 0xa282ead8 (so that a CRC stored in the
// data it covers does not checksum to a fixed value).
uint32_t masked_crc32c(const void* data, size_t n);

// One new event file in `dir`: events.out.tfevents.<seconds>.<host>.<pid>, its seconds above
// those of every event file already there, so that TensorBoard, which reads a folder's files
// in the order of their names, reads it after them. Each record goes to the file in one write()
// call as it is made (no buffering here), so a reader sees every record as soon as it is
// written and a crash cuts at most the last one short. Not thread-safe. Throws cutrain::Error
// naming the file when it cannot be made or written.
class EventWriter {
 public:
  explicit EventWriter(const std::string& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // One Event at `step` with a scalar per (tag, value) (float, as TensorBoard keeps them).
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  // A text (Markdown) for the text plugin, shown under `tag`.
  void text(int64_t step, const std::string& tag, const std::string& markdown);
  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& event);
  std::string path_;
  int fd_ = -1;
};

// The data of each whole record of an event file, in order, up to the first one cut short or
// failing a checksum (what a crash in the middle of a write leaves); `clean`, when given, says
// whether the file ended after its last whole record. Throws cutrain::Error when it cannot be
// read.
std::vector<std::string> read_event_file(const std::string& path, bool* clean = nullptr);

// An Event's step (0 when the field is absent, as protobuf reads it); throws cutrain::Error on
// data that is not an Event.
int64_t event_step(const std::string& event);

// Every event file in `dir` keeps only its records of steps <= last_step (and steps without a
// step: file_version), in order: a run resumed from the checkpoint at last_step writes the
// later steps again, and TensorBoard would show both. A file with nothing to drop and no cut
// record is left as it is; a rewritten one replaces the old atomically (a crash leaves one or
// the other). Returns the number of records dropped.
int64_t trim_event_files(const std::string& dir, int64_t last_step);

// Whether `name` (a file name, no folder) is an event file: TensorBoard's own test, "tfevents"
// in the name.
bool is_event_file(const std::string& name);

}  // namespace cutrain
