// Nothing read from a file, a folder name or the command line reaches the terminal raw (issue
// 47): the real cutrain program, fed names holding ESC, BEL, CR, LF, backspace, invalid UTF-8
// and bidi controls through each reader (a crafted and a damaged checkpoint, the configuration
// a checkpoint holds, a pack, an image list and its classes.txt, a CSV, class folders, a model
// description, a recipe, the command line), prints every one of them escaped
// (kernels/printable.h) while its message still names the thing.
#include <unistr.h>

#include <filesystem>
#include <string>
#include <vector>

#include "data/hdf5_io.h"
#include "kernels/printable.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/checkpoint/checkpoint_fixture.h"
#include "tests/train/cli_fixture.h"
#include "train/checkpoint/checkpoint.h"
#include "train/cli/cli.h"

using namespace cutrain;
using namespace cutrain_test;
namespace fs = std::filesystem;

namespace {

// Names as a crafted file would hold them: a title and a clear screen, a bell, a carriage
// return that would overwrite the line, a backspace, a byte that is not UTF-8, and a
// right-to-left override that would draw "gpj.exe" as "exe.jpg".
const std::string kTitle = "\x1b]0;owned\x07\x1b[2J";
const std::string kCr = "ok\rforged";
const std::string kBs = "back\bspace";
const std::string kLatin1 = "caf\xe9";
const std::string kRtl = "photo\u202egpj.exe";

// Everything cutrain printed, checked byte by byte: valid UTF-8, no control character but the
// line breaks, no C1 or bidi control.
void require_printable(const std::string& out) {
  INFO("output: " << printable_message(out));
  const uint8_t* b = reinterpret_cast<const uint8_t*>(out.data());
  REQUIRE(u8_check(b, out.size()) == nullptr);
  for (size_t i = 0; i < out.size();) {
    ucs4_t uc;
    i += size_t(u8_mbtouc(&uc, b + i, out.size() - i));
    INFO("code point U+" << std::hex << uc);
    REQUIRE((uc >= 0x20 || uc == '\n'));
    REQUIRE(!(uc >= 0x7F && uc <= 0x9F));
    REQUIRE(!(uc == 0x061C || uc == 0x200E || uc == 0x200F || (uc >= 0x202A && uc <= 0x202E) ||
              (uc >= 0x2066 && uc <= 0x2069)));
  }
}

// A refusal: exit 2, printable, its error one line (the output's last; with `alone`, the only
// one), naming `shown` (the name with its escapes).
void require_one_line_refusal(const Ran& r, const std::string& shown, bool alone = true) {
  INFO("output: " << printable_message(r.output));
  REQUIRE(r.status == kExitUsage);
  require_printable(r.output);
  REQUIRE((!r.output.empty() && r.output.back() == '\n'));
  const size_t start = alone ? 0 : r.output.rfind('\n', r.output.size() - 2) + 1;
  const std::string error = r.output.substr(start);
  REQUIRE(error.rfind("cutrain: ", 0) == 0);
  REQUIRE(error.find('\n') == error.size() - 1);
  REQUIRE(error.find(shown) != std::string::npos);
}

// Replaces the checkpoint's /tensor_names with `names`, as someone crafting a file would.
void set_tensor_names(const std::string& path, const std::vector<std::string>& names) {
  H5Handle file;
  {
    H5Lock lock;
    file = h5_owned(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose, "open");
    h5_check(H5Ldelete(file.get(), "tensor_names", H5P_DEFAULT), "delete");
  }
  h5_write_strings(file.get(), "tensor_names", names);
  REQUIRE(file.close());
}

}  // namespace

TEST_CASE("printable: a crafted checkpoint's tensor name cannot drive the terminal") {
  TempDir dir;
  const std::string path = dir / "crafted.h5";
  write_checkpoint(small_checkpoint(3), path);
  set_tensor_names(path, {"conv1.w", kTitle});
  const Ran r = run_cutrain({"eval", "--checkpoint", path}, dir / "log");
  require_one_line_refusal(r, "dataset '\\x1b]0;owned\\x07\\x1b[2J' is missing");
  REQUIRE(r.output.find(path) != std::string::npos);

  // Every other kind of byte in a name, one per file.
  for (const std::string& name : {kCr, kBs, kLatin1, kRtl, std::string("line\nbreak")}) {
    set_tensor_names(path, {"conv1.w", name});
    require_one_line_refusal(run_cutrain({"eval", "--checkpoint", path}, dir / "log"),
                             "dataset '" + printable(name) + "' is missing");
  }
}

TEST_CASE("printable: a checkpoint with one byte flipped in a name gives one printable line") {
  TempDir dir;
  const std::string good = dir / "good.h5";
  Checkpoint c = small_checkpoint(3);
  c.tensors.emplace_back("conv1.w.momentum", Tensor::zeros({4, 3, 3, 1}, DType::f32));
  write_checkpoint(c, good);
  const std::vector<uint8_t> bytes = read_bytes(good);
  const std::string name = "conv1.w.momentum";
  // The name is in the file more than once (the list of names, the group's link): each copy
  // damaged in turn, its 'm' made 0x92 as in the report that found it.
  int copies = 0, named = 0;
  for (auto at = std::search(bytes.begin(), bytes.end(), name.begin(), name.end());
       at != bytes.end(); at = std::search(at + 1, bytes.end(), name.begin(), name.end())) {
    copies++;
    std::vector<uint8_t> damaged = bytes;
    damaged[size_t(at - bytes.begin()) + 8] = 0x92;
    const std::string path = dir / ("damaged-" + std::to_string(copies) + ".h5");
    write_bytes(path, damaged);
    const Ran r = run_cutrain({"eval", "--checkpoint", path}, dir / "log");
    require_one_line_refusal(r, path);
    if (r.output.find("'conv1.w.\\x92omentum'") != std::string::npos) named++;
  }
  REQUIRE(copies >= 2);
  REQUIRE(named >= 1);  // the list's copy: "dataset 'conv1.w.\x92omentum' is missing"
}

TEST_CASE("printable: the configuration a checkpoint carries is quoted printable") {
  TempDir dir;
  const std::string path = dir / "c.h5";
  Checkpoint c = small_checkpoint(3);
  c.config_json = "{\"\\u001b[2Jmodel\\u202e\": 1}";  // JSON's escapes: ESC and U+202E
  write_checkpoint(c, path);
  require_one_line_refusal(run_cutrain({"eval", "--checkpoint", path}, dir / "log"),
                           "unknown key '\\x1b[2Jmodel\\u202e'");
  c.config_json = "{\"model\": \"\x1b[2J\xff";  // not JSON: the parser's own words quote it
  write_checkpoint(c, path);
  const Ran r = run_cutrain({"eval", "--checkpoint", path}, dir / "log");
  require_one_line_refusal(r, "not valid JSON");
}

TEST_CASE("printable: a pack's path and an HDF5 file that is not a pack") {
  TempDir dir;
  const std::string path = dir / ("pack" + kTitle + kRtl + ".h5");
  write_checkpoint(small_checkpoint(1), path);  // HDF5, but no pack
  require_one_line_refusal(
      run_cutrain({"train", "--train", path, "--out", dir / "run"}, dir / "log"),
      "pack\\x1b]0;owned\\x07\\x1b[2Jphoto\\u202egpj.exe.h5' is an HDF5 file but not a "
      "cutrain pack",
      false);  // after the device notice
}

TEST_CASE("printable: lists, classes.txt and CSV quote their names escaped") {
  TempDir dir;
  // Labels the classes.txt beside the list does not know: each named, escaped, one per line.
  write_text(dir / "a/classes.txt", "cat\ndog\n");
  write_text(dir / "a/list.txt", "1.jpg\t" + kTitle + "\n2.jpg\t" + kCr + "\n3.jpg\t" + kBs +
                                     "\n4.jpg\t" + kLatin1 + "\n5.jpg\t" + kRtl + "\n");
  Ran r = run_cutrain({"check-data", dir / "a/list.txt"}, dir / "log");
  INFO(printable_message(r.output));
  REQUIRE(r.status == kExitUsage);
  require_printable(r.output);
  for (const std::string& n : {kTitle, kCr, kBs, kLatin1, kRtl})
    REQUIRE(r.output.find("unknown class '" + printable(n) + "'") != std::string::npos);

  // A duplicate name in classes.txt.
  write_text(dir / "b/classes.txt", "cat\n" + kTitle + "\n" + kTitle + "\n");
  write_text(dir / "b/list.txt", "1.jpg 0\n");
  require_one_line_refusal(run_cutrain({"check-data", dir / "b/list.txt"}, dir / "log"),
                           "duplicate class name '\\x1b]0;owned\\x07\\x1b[2J'");

  // A CSV whose header names no usable column: the header's names quoted.
  write_text(dir / "c/list.csv", "file" + kTitle + ",label" + kRtl + "\n1.jpg,cat\n");
  require_one_line_refusal(run_cutrain({"check-data", dir / "c/list.csv"}, dir / "log"),
                           "'file\\x1b]0;owned\\x07\\x1b[2J', 'labelphoto\\u202egpj.exe'");
}

TEST_CASE("printable: folder names: refused ones and accepted ones, in messages and tables") {
  TempDir dir;
  // A line break in a class folder's name is refused, the name shown escaped.
  write_text(dir / "a/cat/1.jpg", "not a jpeg");
  write_text(dir / "a/two\nlines\r/1.jpg", "not a jpeg");
  require_one_line_refusal(run_cutrain({"check-data", dir / "a"}, dir / "log"),
                           "class folder 'two\\x0alines\\x0d'");

  // An escape sequence or a bidi control is a valid name: the bad files' lines and the class
  // table show it escaped.
  write_text(dir / "b/red" + kTitle + "/1.jpg", "not a jpeg");
  write_text(dir / "b/" + kRtl + "/1.jpg", "not a jpeg");
  const Ran r = run_cutrain({"check-data", dir / "b"}, dir / "log");
  INFO(printable_message(r.output));
  require_printable(r.output);
  REQUIRE(r.output.find("red\\x1b]0;owned\\x07\\x1b[2J/1.jpg") != std::string::npos);
  REQUIRE(r.output.find("photo\\u202egpj.exe") != std::string::npos);
}

TEST_CASE("printable: a model description, a recipe and the command line") {
  TempDir dir;
  write_text(dir / "m.model", "conv 8 3x3\nconv" + kTitle + " 3x3\n");
  require_one_line_refusal(run_cutrain({"describe", dir / "m.model"}, dir / "log"),
                           "m.model:2: unknown layer 'conv\\x1b]0;owned\\x07\\x1b[2J'");
  write_text(dir / "m2.model", "conv 8 3x3 pad=" + kLatin1 + kRtl + "\n");
  require_one_line_refusal(run_cutrain({"describe", dir / "m2.model"}, dir / "log"),
                           "caf\\xe9photo\\u202egpj.exe");

  write_text(dir / "r.json", "{\"lr\": 0.1, \"\\u001b[2Jepochs\\u0007\": 3}");
  write_text(dir / "list.txt", "1.jpg 0\n");
  require_one_line_refusal(
      run_cutrain({"train", "--train", dir / "list.txt", "--recipe", dir / "r.json", "--out",
                   dir / "run"},
                  dir / "log"),
      "'\\x1b[2Jepochs\\x07' is not an option");

  // An unknown option, and a path given on the command line.
  Ran r = run_cutrain({"train", "--tr" + kTitle + "ain", "x"}, dir / "log");
  INFO(printable_message(r.output));
  REQUIRE(r.status == kExitUsage);
  require_printable(r.output);
  REQUIRE(r.output.find("unknown option --tr\\x1b]0;owned\\x07\\x1b[2Jain") != std::string::npos);
  require_one_line_refusal(run_cutrain({"check-data", dir / ("no" + kCr + kBs)}, dir / "log"),
                           "no" + printable(kCr + kBs) + "' does not exist");
}
