#include "data/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/atomic_file.h"
#include "kernels/check.h"

namespace cutrain {

namespace fs = std::filesystem;

// ---- CRC-32C -------------------------------------------------------------------------------

namespace {
// The table of the byte-at-a-time algorithm: table[b] is the CRC of the byte b alone.
std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t b = 0; b < 256; b++) {
    uint32_t c = b;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected poly
    t[b] = c;
  }
  return t;
}
}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc32c_table();
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

// ---- protobuf's wire format, the few pieces the Event needs --------------------------------

namespace {
// A field's key: (number << 3) | wire type; 0 varint, 1 fixed 8 bytes, 2 length-prefixed,
// 5 fixed 4 bytes.
enum Wire { varint = 0, fixed64 = 1, bytes = 2, fixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) out += char(uint8_t(v) | 0x80), v >>= 7;
  out += char(uint8_t(v));
}
void put_key(std::string& out, int field, Wire w) { put_varint(out, uint64_t(field) << 3 | w); }
void put_le(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; i++) out += char(uint8_t(v >> (8 * i)));
}
void put_bytes(std::string& out, int field, const std::string& b) {  // strings and messages
  put_key(out, field, bytes);
  put_varint(out, b.size());
  out += b;
}
void put_double(std::string& out, int field, double v) {
  uint64_t u;
  std::memcpy(&u, &v, 8);
  put_key(out, field, fixed64);
  put_le(out, u, 8);
}
void put_float(std::string& out, int field, float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  put_key(out, field, fixed32);
  put_le(out, u, 4);
}
void put_int(std::string& out, int field, int64_t v) {  // int64: negatives as 10-byte varints
  put_key(out, field, varint);
  put_varint(out, uint64_t(v));
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Event { wall_time = 1, step = 2, ...rest }: `rest` the encoded field(s) after them.
std::string event(int64_t step, const std::string& rest) {
  std::string e;
  put_double(e, 1, wall_time());
  if (step != 0) put_int(e, 2, step);  // proto3: a zero is left out
  return e + rest;
}

// One record's framing around `data`.
std::string record(const std::string& data) {
  std::string len;
  put_le(len, data.size(), 8);
  std::string r = len;
  put_le(r, masked_crc32c(len.data(), 8), 4);
  r += data;
  put_le(r, masked_crc32c(data.data(), data.size()), 4);
  return r;
}

uint64_t get_le(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= uint64_t(uint8_t(p[i])) << (8 * i);
  return v;
}

// The 10-digit seconds of an event file's name written by EventWriter (or TensorFlow, PyTorch:
// "events.out.tfevents.<seconds>...."); -1 when the name has none.
long long name_seconds(const std::string& name) {
  const std::string prefix = "events.out.tfevents.";
  if (name.rfind(prefix, 0) != 0) return -1;
  char* end = nullptr;
  const long long s = std::strtoll(name.c_str() + prefix.size(), &end, 10);
  return end != name.c_str() + prefix.size() ? s : -1;
}

void write_all(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    USER_CHECK(n > 0, "cannot write the TensorBoard event file " << path << ": "
                                                                 << std::strerror(errno));
    done += size_t(n);
  }
}
}  // namespace

bool is_event_file(const std::string& name) { return name.find("tfevents") != std::string::npos; }

// ---- the writer ----------------------------------------------------------------------------

EventWriter::EventWriter(const std::string& dir) {
  long long seconds = static_cast<long long>(wall_time());
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    seconds = std::max(seconds, name_seconds(e.path().filename().string()) + 1);
  char host[256] = "localhost";
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  char name[400];
  std::snprintf(name, sizeof name, "events.out.tfevents.%010lld.%s.%d", seconds, host,
                int(::getpid()));
  path_ = (fs::path(dir) / name).string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  USER_CHECK(fd_ >= 0, "cannot create the TensorBoard event file " << path_ << ": "
                                                                   << std::strerror(errno));
  std::string version;
  put_bytes(version, 3, "brain.Event:2");
  write_event(event(0, version));
}

EventWriter::~EventWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void EventWriter::write_event(const std::string& e) { write_all(fd_, record(e), path_); }

void EventWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    put_bytes(value, 1, tag);
    put_float(value, 2, float(v));
    put_bytes(summary, 1, value);
  }
  std::string rest;
  put_bytes(rest, 5, summary);
  write_event(event(step, rest));
}

void EventWriter::text(int64_t step, const std::string& tag, const std::string& markdown) {
  std::string plugin, metadata, dim, shape, tensor, value, summary, rest;
  put_bytes(plugin, 1, "text");    // PluginData.plugin_name
  put_bytes(metadata, 1, plugin);  // SummaryMetadata.plugin_data
  put_int(dim, 1, 1);              // Dim.size
  put_bytes(shape, 2, dim);        // TensorShapeProto.dim: one string
  put_int(tensor, 1, 7);           // TensorProto.dtype = DT_STRING
  put_bytes(tensor, 2, shape);
  put_bytes(tensor, 8, markdown);  // string_val
  put_bytes(value, 1, tag);
  put_bytes(value, 8, tensor);
  put_bytes(value, 9, metadata);
  put_bytes(summary, 1, value);
  put_bytes(rest, 5, summary);
  write_event(event(step, rest));
}

// ---- reading and trimming ------------------------------------------------------------------

std::vector<std::string> read_event_file(const std::string& path, bool* clean) {
  std::ifstream f(path, std::ios::binary);
  USER_CHECK(f, "cannot read the TensorBoard event file " << path << ": "
                                                          << std::strerror(errno));
  std::ostringstream all;
  all << f.rdbuf();
  const std::string s = all.str();
  std::vector<std::string> out;
  size_t at = 0;
  for (;;) {
    if (s.size() - at < 12) break;
    const uint64_t n = get_le(s.data() + at, 8);
    if (uint32_t(get_le(s.data() + at + 8, 4)) != masked_crc32c(s.data() + at, 8)) break;
    if (n > s.size() - at - 12 || s.size() - at - 12 - n < 4) break;  // cut short
    const char* data = s.data() + at + 12;
    if (uint32_t(get_le(data + n, 4)) != masked_crc32c(data, size_t(n))) break;
    out.emplace_back(data, size_t(n));
    at += 12 + size_t(n) + 4;
  }
  if (clean) *clean = at == s.size();
  return out;
}

int64_t event_step(const std::string& e) {
  size_t at = 0;
  const auto varint_at = [&]() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      USER_CHECK(shift < 70 && at < e.size(), "not an Event message: a varint cut short");
      const uint8_t b = uint8_t(e[at++]);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  int64_t step = 0;
  while (at < e.size()) {
    const uint64_t key = varint_at();
    const int field = int(key >> 3);
    switch (key & 7) {
      case varint: {
        const uint64_t v = varint_at();
        if (field == 2) step = int64_t(v);
        break;
      }
      case fixed64: at += 8; break;
      case bytes: at += size_t(varint_at()); break;
      case fixed32: at += 4; break;
      default: USER_CHECK(false, "not an Event message: a field of wire type " << (key & 7));
    }
    USER_CHECK(at <= e.size(), "not an Event message: it ends inside field " << field);
  }
  return step;
}

int64_t trim_event_files(const std::string& dir, int64_t last_step) {
  int64_t dropped = 0;
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && is_event_file(e.path().filename().string()) &&
        e.path().filename().string().find(".tmp-") == std::string::npos)
      files.push_back(e.path());
  for (const fs::path& p : files) {
    bool clean = true;
    const std::vector<std::string> records = read_event_file(p.string(), &clean);
    std::string kept;
    int64_t dropped_here = 0;
    try {
      for (const std::string& r : records) {
        if (event_step(r) <= last_step) kept += record(r);
        else dropped_here++;
      }
    } catch (const Error& e) {
      rethrow_with_context(e, "the TensorBoard event file " + p.string());
    }
    if (dropped_here == 0 && clean) continue;
    write_file_atomically(p.string(), kept);
    dropped += dropped_here;
  }
  return dropped;
}

}  // namespace cutrain
