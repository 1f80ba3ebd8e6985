// Tables with class names that are not ASCII, through the real program on real files: a
// folder of class folders "Jalapeño" (a combining tilde), "cat", "Ñandú", "靴" and a name of
// 25 靴 (50 columns, past kMaxNameColumns), a few JPEGs each. check-data's class histogram,
// the per-class report at the end of `cutrain train` and of `cutrain eval`, and `cutrain
// predict`'s rows must each put the column after the name at the same display column on
// every row, and cut the long name between characters, marked with "…".
#include <unistr.h>

#include <string>
#include <vector>

#include "data/image.h"
#include "data/text_width.h"
#include "tests/data/temp_dir.h"
#include "tests/data/test_images.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/train_fixture.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

const std::string kBoot = "\u9774";  // 靴, 2 columns

std::string repeat(const std::string& s, int n) {
  std::string r;
  for (int i = 0; i < n; i++) r += s;
  return r;
}

// The class folders in the order a folder scan sorts them (by bytes), and each as a table
// shows it: the 50-column name cut to 19 靴 (38 columns) and "…", one column under the cap.
const std::vector<std::string> kNames = {"Jalapen\u0303o", "cat", "\u00d1and\u00fa", kBoot,
                                         repeat(kBoot, 25)};
const std::vector<std::string> kShown = {kNames[0], kNames[1], kNames[2], kNames[3],
                                         repeat(kBoot, 19) + "\u2026"};
constexpr int kPerClass = 4;

// DIR/<name>/<i>.jpg: 16x16 RGB JPEGs, a different pattern per class.
void write_class_folders(const std::string& dir) {
  for (size_t c = 0; c < kNames.size(); c++) {
    std::filesystem::create_directories(dir + "/" + kNames[c]);
    for (int i = 0; i < kPerClass; i++) {
      Image img = pattern_image(16, 16, 3);
      for (uint8_t& p : img.pixels) p = uint8_t(p + 40 * c + 7 * i);
      write_bytes(dir + "/" + kNames[c] + "/" + std::to_string(i) + ".jpg",
                  encode_jpeg(img.pixels.data(), img.h, img.w, img.c));
    }
  }
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

// The display column where the field after `name` ends on `line` (the fields after a name are
// right-aligned numbers, so their ends line up); the name must be followed by a space.
size_t end_of_field_after(const std::string& line, const std::string& name) {
  INFO("line: '" << line << "', name: '" << name << "'");
  const size_t at = line.find(name + " ");
  REQUIRE(at != std::string::npos);
  const size_t start = line.find_first_not_of(' ', at + name.size());
  REQUIRE(start != std::string::npos);
  const size_t end = std::min(line.find(' ', start), line.size());
  return display_width(line.substr(0, end));
}

// The `count` lines after the first line that starts with `head` (or from it, with_head).
std::vector<std::string> rows_after(const std::string& output, const std::string& head,
                                    size_t count, bool with_head = false) {
  const std::vector<std::string> lines = lines_of(output);
  for (size_t i = 0; i < lines.size(); i++)
    if (lines[i].rfind(head, 0) == 0) {
      REQUIRE(i + count < lines.size());
      return std::vector<std::string>(lines.begin() + long(i) + (with_head ? 0 : 1),
                                       lines.begin() + long(i + 1 + count));
    }
  FAIL("no line starts with '" << head << "'");
  return {};
}

// A per-class report (train's final one, eval's): the header and one row per class, the
// image counts ending in one column, the long name cut between characters.
void require_aligned_report(const std::string& output, const std::string& after) {
  const std::string from_here = output.substr(output.find(after));
  const std::vector<std::string> rows = rows_after(from_here, "  class  name", kNames.size(), true);
  const size_t column = end_of_field_after(rows[0], "name");  // the header's "images"
  for (size_t c = 0; c < kNames.size(); c++) {
    const std::string& row = rows[c + 1];
    REQUIRE(row.rfind("  " + std::string(4, ' ') + std::to_string(c) + "  ", 0) == 0);
    REQUIRE(end_of_field_after(row, kShown[c]) == column);
  }
}

bool valid_utf8(const std::string& s) {
  return u8_check(reinterpret_cast<const uint8_t*>(s.data()), s.size()) == nullptr;
}

}  // namespace

TEST_CASE("tables: non-ASCII class names line up in check-data, train, eval and predict") {
  TempDir dir;
  const std::string data = dir / "data";
  write_class_folders(data);
  // The widths the tables must honour, measured by the helper the unit tests pin down.
  REQUIRE(display_width(kNames[0]) == 8);
  REQUIRE(display_width(kNames[2]) == 5);
  REQUIRE(display_width(kNames[4]) == 50);
  REQUIRE(display_width(kShown[4]) == kMaxNameColumns - 1);

  SUBCASE("check-data: the histogram's counts end in one column") {
    const Ran r = run_cutrain({"check-data", data, "--threads", "2"}, dir / "log");
    INFO("exit " << r.status << ", printed:\n" << r.output);
    REQUIRE(r.status == 0);
    REQUIRE(valid_utf8(r.output));
    const std::vector<std::string> rows =
        rows_after(r.output, "  classes (good images):", kNames.size());
    const size_t column = end_of_field_after(rows[0], kShown[0]);
    for (size_t c = 0; c < kNames.size(); c++) {
      REQUIRE(rows[c].rfind("    " + std::string(2, ' ') + std::to_string(c) + " ", 0) == 0);
      REQUIRE(end_of_field_after(rows[c], kShown[c]) == column);
      REQUIRE(rows[c].find(" " + std::to_string(kPerClass)) != std::string::npos);
    }
    REQUIRE(r.output.find(kNames[4]) == std::string::npos);  // cut, not printed whole
  }

  SUBCASE("train, eval and predict: the per-class reports and the predictions") {
    write_text(dir / "tiny.model", kTinyModel);
    const std::string run = dir / "run";
    Ran r = run_cutrain({"train", "--train", data, "--val", data, "--model", dir / "tiny.model",
                         "--batch", "4", "--epochs", "1", "--device", "cpu", "--threads", "2",
                         "--log-every", "1000", "--out", run},
                        dir / "train.log");
    {
      INFO("train: exit " << r.status << ", printed:\n" << r.output);
      REQUIRE(r.status == 0);
      REQUIRE(valid_utf8(r.output));
      require_aligned_report(r.output, "final: ");
    }

    r = run_cutrain({"eval", "--checkpoint", run, "--data", data, "--threads", "2"},
                    dir / "eval.log");
    {
      INFO("eval: exit " << r.status << ", printed:\n" << r.output);
      REQUIRE(r.status == 0);
      REQUIRE(valid_utf8(r.output));
      require_aligned_report(r.output, "loss ");
    }

    r = run_cutrain({"predict", "--checkpoint", run, "--list", data, "--top", "5", "--threads",
                     "2"},
                    dir / "predict.log");
    INFO("predict: exit " << r.status << ", printed:\n" << r.output);
    REQUIRE(r.status == 0);
    REQUIRE(valid_utf8(r.output));
    // Each image: its path line, then 5 rows "  k. <name> <probability>%", every class once.
    size_t rows = 0, column = 0;
    for (const std::string& line : lines_of(r.output)) {
      if (line.size() < 5 || line.compare(0, 2, "  ") != 0 || line[3] != '.') continue;
      size_t c = 0;
      while (c < kShown.size() && line.find(" " + kShown[c] + " ") == std::string::npos) c++;
      INFO("line: '" << line << "'");
      REQUIRE(c < kShown.size());
      const size_t end = end_of_field_after(line, kShown[c]);
      if (rows++ == 0) column = end;
      REQUIRE(end == column);
    }
    REQUIRE(rows == kNames.size() * kNames.size() * kPerClass);
  }
}
