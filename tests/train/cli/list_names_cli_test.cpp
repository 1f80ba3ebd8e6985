// Class names in lists, end to end through the cutrain program (real processes, real JPEGs the
// test makes): `cutrain train` on a CSV whose labels are names keeps the sorted names with the
// run; the validation list's names map to the training classes by name, not by its own
// sorting; a resumed run, eval and predict map names as the run did; check-data and pack read CSV lists; a
// name the run does not know, or a bad --csv-columns, is a plain message and exit status 2.
#include <filesystem>
#include <sstream>

#include "data/image.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/train_fixture.h"
#include "train/checkpoint/checkpoint.h"
#include "train/cli/cli.h"
#include "train/setup/config.h"

using namespace cutrain;
using namespace cutrain_test;
namespace fs = std::filesystem;

namespace {

// A 12x12 RGB JPEG of one colour per class, with a little texture.
void write_class_jpeg(const std::string& path, int k, int i) {
  Image img;
  img.h = img.w = 12, img.c = 3;
  for (int y = 0; y < 12; y++)
    for (int x = 0; x < 12; x++)
      for (int c = 0; c < 3; c++)
        img.pixels.push_back(uint8_t((c == k ? 200 : 40) + ((x + y + i) % 4) * 10));
  fs::create_directories(fs::path(path).parent_path());
  write_bytes(path, encode_jpeg(img.pixels.data(), 12, 12, 3));
}

// The image count of class `name` in a per-class table of `out` (the row whose words after
// the class index are the name's words), or -1.
long images_of(const std::string& out, const std::string& name) {
  std::istringstream lines(out);
  std::vector<std::string> want;
  std::istringstream nw(name);
  for (std::string w; nw >> w;) want.push_back(w);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string s; words >> s;) w.push_back(s);
    if (w.size() < want.size() + 2 || w[0].find_first_not_of("0123456789") != std::string::npos)
      continue;
    if (std::equal(want.begin(), want.end(), w.begin() + 1)) return std::stol(w[want.size() + 1]);
  }
  return -1;
}

}  // namespace

TEST_CASE("cutrain: train on a CSV of class names; val, eval and predict map names by name") {
  TempDir dir;
  // Three classes, named in the CSV; sorted: ankle boot = 0, bag = 1, shoe = 2.
  const std::vector<std::string> names = {"shoe", "bag", "ankle boot"};
  std::string csv = "id,filename,class\r\n";
  for (int i = 0; i < 8; i++)
    for (int k = 0; k < 3; k++) {
      const std::string file = "img/" + names[size_t(k)] + ", " + std::to_string(i) + ".jpg";
      write_class_jpeg(dir / ("data/" + file), k, i);
      csv += std::to_string(i * 3 + k) + ",\"" + file + "\"," + names[size_t(k)] + "\r\n";
    }
  write_text(dir / "data/train.csv", csv);
  // Validation: only shoes and a bag, so its own sorting would make bag 0 and shoe 1.
  write_text(dir / "data/val.txt", "img/shoe, 0.jpg\tshoe\nimg/shoe, 1.jpg\tshoe\n"
                                   "img/bag, 2.jpg\tbag\nimg/shoe, 3.jpg\tshoe\n");
  write_text(dir / "small.model", kSmallModel);
  const std::string run = dir / "run", log = dir / "log";
  Ran r = run_cutrain({"train", "--train", dir / "data/train.csv", "--val", dir / "data/val.txt",
                       "--model", dir / "small.model", "--device", "cpu", "--epochs", "1",
                       "--batch", "8", "--size", "12", "--mean", "0.4,0.4,0.4", "--std",
                       "0.3,0.3,0.3", "--threads", "1", "--out", run},
                      log);
  INFO("exit " << r.status << ", printed:\n" << r.output);
  REQUIRE(r.status == 0);
  const std::vector<std::string> sorted = {"ankle boot", "bag", "shoe"};
  REQUIRE(config_from_json_text(read_text(run + "/config.json"), "config.json").class_names ==
          sorted);
  const Checkpoint ckpt = read_checkpoint(newest_checkpoint(run));
  REQUIRE(config_from_json_text(ckpt.config_json, "checkpoint").class_names == sorted);
  // The run's last evaluation: the validation images under the training classes' names.
  REQUIRE(images_of(r.output, "shoe") == 3);
  REQUIRE(images_of(r.output, "bag") == 1);
  REQUIRE(images_of(r.output, "ankle boot") == 0);

  // Resumed, the names map as before: the training data's fingerprint is unchanged.
  r = run_cutrain({"train", "--resume", run, "--epochs", "2"}, log);
  REQUIRE(r.status == 0);
  REQUIRE(r.output.find("resuming from") != std::string::npos);
  REQUIRE(images_of(r.output, "shoe") == 3);

  r = run_cutrain({"eval", "--checkpoint", run, "--data", dir / "data/val.txt", "--device", "cpu"},
                  log);
  REQUIRE(r.status == 0);
  REQUIRE(images_of(r.output, "shoe") == 3);
  REQUIRE(images_of(r.output, "bag") == 1);
  // The same labels as a CSV with other column names, chosen by --csv-columns.
  write_text(dir / "data/val2.csv", "name,where\nbag,\"img/bag, 5.jpg\"\nshoe,\"img/shoe, 6.jpg\"\n"
                                    "\"ankle boot\",\"img/ankle boot, 7.jpg\"\n");
  r = run_cutrain({"eval", "--checkpoint", run, "--data", dir / "data/val2.csv", "--csv-columns",
                   "where,name", "--device", "cpu"},
                  log);
  REQUIRE(r.status == 0);
  REQUIRE(images_of(r.output, "ankle boot") == 1);
  REQUIRE(images_of(r.output, "bag") == 1);
  REQUIRE(images_of(r.output, "shoe") == 1);

  r = run_cutrain({"predict", "--checkpoint", run, "--list", dir / "data/val.txt", "--device",
                   "cpu", "--top", "3"},
                  log);
  REQUIRE(r.status == 0);
  REQUIRE(count_of(r.output, "[label shoe") == 3);
  REQUIRE(count_of(r.output, "[label bag") == 1);
  REQUIRE(count_of(r.output, "ankle boot") == 4);  // among each image's top 3

  // A name the run does not know: every such line, the unknown names and the known classes.
  write_text(dir / "data/bad.txt", "img/shoe, 0.jpg\tshoe\nimg/bag, 1.jpg\that\n"
                                   "img/bag, 2.jpg\tShoe\n");
  r = run_cutrain({"eval", "--checkpoint", run, "--data", dir / "data/bad.txt", "--device", "cpu"},
                  log);
  REQUIRE(r.status == kExitUsage);
  REQUIRE(r.output.find(dir / "data/bad.txt" + ":2: unknown class 'hat'") != std::string::npos);
  REQUIRE(r.output.find(dir / "data/bad.txt" + ":3: unknown class 'Shoe'") != std::string::npos);
  REQUIRE(r.output.find("2 class names are not among the checkpoint's classes: 'Shoe', 'hat'") !=
          std::string::npos);
  REQUIRE(r.output.find("the checkpoint's classes (3): 'ankle boot', 'bag', 'shoe'") !=
          std::string::npos);
  r = run_cutrain({"train", "--train", dir / "data/train.csv", "--val", dir / "data/bad.txt",
                   "--model", dir / "small.model", "--device", "cpu", "--out", dir / "run2"},
                  log);
  REQUIRE(r.status == kExitUsage);
  REQUIRE(r.output.find("2 class names are not among the training classes: 'Shoe', 'hat'") !=
          std::string::npos);
  REQUIRE(r.output.find("the training classes (3): 'ankle boot', 'bag', 'shoe'") !=
          std::string::npos);
}

TEST_CASE("cutrain: check-data and pack read CSV lists; --csv-columns is checked on every command") {
  TempDir dir;
  std::string csv = "path,label\n";
  for (int i = 0; i < 6; i++) {
    const std::string file = "img/" + std::to_string(i) + ".jpg";
    write_class_jpeg(dir / file, i % 2, i);
    csv += file + "," + (i % 2 ? "dog" : "cat") + "\n";
  }
  write_text(dir / "list.csv", csv);
  write_text(dir / "list.dat", csv);  // not .csv by name: CSV by --csv-columns
  const std::string log = dir / "log";
  Ran r = run_cutrain({"check-data", dir / "list.csv", "--size", "12", "--channels", "3"}, log);
  INFO("printed:\n" << r.output);
  REQUIRE(r.status == 0);
  REQUIRE(images_of(r.output, "cat") == 3);
  REQUIRE(images_of(r.output, "dog") == 3);
  r = run_cutrain({"check-data", dir / "list.dat", "--csv-columns", "path,label"}, log);
  REQUIRE(r.status == 0);
  r = run_cutrain({"pack", dir / "list.dat", dir / "p.h5", "--size", "8", "--csv-columns", "0,1"},
                  log);
  REQUIRE(r.status == 0);
  REQUIRE(r.output.find("packed 6 of 6 images") != std::string::npos);

  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"check-data", dir / "list.csv", "--csv-columns", "path"},
        {"pack", dir / "list.csv", dir / "q.h5", "--size", "8", "--csv-columns", "a,b,c"},
        {"eval", "--checkpoint", dir / "none", "--data", dir / "list.csv", "--csv-columns", "x"},
        {"predict", "--checkpoint", dir / "none", "--list", dir / "list.csv", "--csv-columns",
         "label,LABEL"},
        {"train", "--train", dir / "list.csv", "--csv-columns", "p"}}) {
    r = run_cutrain(args, log);
    INFO(args[0] << ": exit " << r.status << ", printed:\n" << r.output);
    REQUIRE(r.status == kExitUsage);
    REQUIRE(r.output.find("--csv-columns") != std::string::npos);
    REQUIRE(r.output.find("expected PATH,LABEL") != std::string::npos);
  }
  // A column the header lacks names the header's columns.
  r = run_cutrain({"check-data", dir / "list.csv", "--csv-columns", "file,label"}, log);
  REQUIRE(r.status == kExitUsage);
  REQUIRE(r.output.find("list.csv:1: no column named 'file' for the path in the header ('path', "
                        "'label')") != std::string::npos);
}

TEST_CASE("cutrain: train, pack and check-data refuse class names that are not UTF-8, writing nothing") {
  TempDir dir;
  // A folder of class folders, one named in Latin-1; and a list of indices whose classes.txt
  // is Latin-1.
  write_class_jpeg(dir / "imgs/ok/1.jpg", 0, 0);
  write_class_jpeg(dir / "imgs/caf\xE9/1.jpg", 1, 0);
  write_class_jpeg(dir / "list/1.jpg", 0, 1);
  write_text(dir / "list/list.txt", "1.jpg 0\n1.jpg 1\n");
  write_text(dir / "list/classes.txt", "tea\ncaf\xE9\n");
  const std::string log = dir / "log";
  for (const std::string& data : {dir / "imgs", dir / "list/list.txt"}) {
    INFO(data);
    const std::string where = data == dir / "imgs" ? "its name is not UTF-8 text (byte 3 of the name)"
                                                   : "is not UTF-8 text (byte 7 of the file)";
    Ran r = run_cutrain({"train", "--train", data, "--epochs", "1", "--device", "cpu", "--out",
                         dir / "run"},
                        log);
    INFO(r.output);
    REQUIRE(r.status == kExitUsage);
    REQUIRE(r.output.find(where) != std::string::npos);
    REQUIRE(!names_source_location(r.output));
    REQUIRE(!fs::exists(dir / "run/config.json"));
    r = run_cutrain({"pack", data, dir / "p.h5", "--size", "8"}, log);
    REQUIRE(r.status == kExitUsage);
    REQUIRE(r.output.find(where) != std::string::npos);
    REQUIRE(!fs::exists(dir / "p.h5"));
    r = run_cutrain({"check-data", data}, log);
    REQUIRE(r.status == kExitUsage);
    REQUIRE(r.output.find(where) != std::string::npos);
  }
}
