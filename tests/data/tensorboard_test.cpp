// TensorBoard's event files (data/tensorboard.h): CRC-32C against RFC 3720's vectors, the
// records read back as written, a crash's cut-off record tolerated, a resumed run's trim, and
// the names. TensorBoard itself reads them in tests/train/run/tensorboard_test.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "data/tensorboard.h"
#include "kernels/check.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"

using namespace cutrain;
using namespace cutrain_test;
namespace fs = std::filesystem;

namespace {
std::vector<std::string> event_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (is_event_file(e.path().filename().string())) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int64_t> steps_of(const std::vector<std::string>& records) {
  std::vector<int64_t> s;
  for (const std::string& r : records) s.push_back(event_step(r));
  return s;
}
}  // namespace

TEST_CASE("crc32c: RFC 3720's test vectors and the usual check value") {
  std::vector<uint8_t> b(32, 0);
  REQUIRE(crc32c(b.data(), 32) == 0x8A9136AAu);  // 32 bytes of zeros
  std::fill(b.begin(), b.end(), 0xFF);
  REQUIRE(crc32c(b.data(), 32) == 0x62A8AB43u);  // 32 bytes of ones
  for (int i = 0; i < 32; i++) b[size_t(i)] = uint8_t(i);
  REQUIRE(crc32c(b.data(), 32) == 0x46DD794Eu);  // 0, 1, ..., 31
  for (int i = 0; i < 32; i++) b[size_t(i)] = uint8_t(31 - i);
  REQUIRE(crc32c(b.data(), 32) == 0x113FDB5Cu);  // 31, 30, ..., 0
  const uint8_t read_pdu[48] = {0x01, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                0x14, 0,    0, 0, 0, 0, 4, 0, 0, 0, 0, 0x14, 0, 0, 0, 0x18,
                                0x28, 0,    0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0};
  REQUIRE(crc32c(read_pdu, 48) == 0xD9963A56u);  // an iSCSI read command
  REQUIRE(crc32c("123456789", 9) == 0xE3069283u);
  // In pieces: the same as at once.
  REQUIRE(crc32c("6789", 4, crc32c("12345", 5)) == 0xE3069283u);
  // TFRecord's mask: rotated right by 15 bits, plus 0xa282ead8.
  REQUIRE(masked_crc32c("123456789", 9) == ((0xE3069283u >> 15 | 0xE3069283u << 17) + 0xa282ead8u));
}

TEST_CASE("event files: what is written is read back, record for record") {
  TempDir dir;
  std::string path;
  {
    EventWriter w(dir.str());
    path = w.path();
    w.text(0, "config", "    {}\n");
    for (int s = 1; s <= 3; s++) w.scalars(s, {{"train/loss", 1.0 / s}});
    w.scalars(int64_t(1) << 40, {{"big", 1}});  // a step past 32 bits
  }
  REQUIRE(fs::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);
  bool clean = false;
  const std::vector<std::string> r = read_event_file(path, &clean);
  REQUIRE(clean);
  REQUIRE(steps_of(r) == std::vector<int64_t>{0, 0, 1, 2, 3, int64_t(1) << 40});
  REQUIRE(r[0].find("brain.Event:2") != std::string::npos);  // the first: the file version
  REQUIRE(r[1].find("config") != std::string::npos);
  REQUIRE_ERROR(event_step(std::string("\x08\xff", 2)), "not an Event message");
}

TEST_CASE("event files: a record cut short by a crash ends the file, anywhere it is cut") {
  TempDir dir;
  std::string path;
  {
    EventWriter w(dir.str());
    path = w.path();
    w.scalars(1, {{"a", 1}});
    w.scalars(2, {{"a", 2}});
  }
  const std::vector<uint8_t> whole = read_bytes(path);
  const std::vector<std::string> r = read_event_file(path);
  REQUIRE(r.size() == 3);
  const size_t last = whole.size() - (16 + r.back().size());  // where the last record starts
  TempDir d2;
  const std::string p = (d2.path() / "events.out.tfevents.1").string();
  for (size_t n = last; n < whole.size(); n++) {  // every length inside the last record
    write_bytes(p, std::vector<uint8_t>(whole.begin(), whole.begin() + long(n)));
    bool clean = false;
    REQUIRE(read_event_file(p, &clean).size() == 2);
    REQUIRE(clean == (n == last));
  }
  // A flipped byte inside the last record's data: that record is dropped.
  std::vector<uint8_t> bad = whole;
  bad[whole.size() - 6] ^= 0x40;
  write_bytes(p, bad);
  bool clean = true;
  REQUIRE(read_event_file(p, &clean).size() == 2);
  REQUIRE_FALSE(clean);
}

TEST_CASE("event files: a resumed run trims the folder's files to its step, each step once") {
  TempDir dir;
  std::string first;
  {
    EventWriter w(dir.str());
    first = w.path();
    for (int s = 1; s <= 6; s++) w.scalars(s, {{"train/loss", s}});
  }
  // The crash's last record, half written.
  std::vector<uint8_t> bytes = read_bytes(first);
  const std::vector<uint8_t> whole = bytes;
  bytes.resize(bytes.size() - 5);
  write_bytes(first, bytes);
  REQUIRE(trim_event_files(dir.str(), 10) == 0);  // only the cut record goes: nothing dropped
  bool clean = false;
  REQUIRE(steps_of(read_event_file(first, &clean)) == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  REQUIRE(clean);  // rewritten without the cut record
  REQUIRE(trim_event_files(dir.str(), 3) == 2);
  REQUIRE(steps_of(read_event_file(first, &clean)) == std::vector<int64_t>{0, 1, 2, 3});
  REQUIRE(clean);
  const auto before = read_bytes(first);
  REQUIRE(trim_event_files(dir.str(), 3) == 0);
  REQUIRE(read_bytes(first) == before);
  // The resumed run's file comes after the first in name order (TensorBoard's reading order),
  // even within the same second, or when the first's clock ran ahead.
  const fs::path ahead = dir.path() / "events.out.tfevents.2999999999.elsewhere.1";
  write_bytes(ahead.string(), whole);
  EventWriter w(dir.str());
  const std::vector<std::string> files = event_files(dir.path());
  REQUIRE(files.size() == 3);
  REQUIRE(files.back() == w.path());
}
