// defines: reported_run(), one real `cutrain train` process per test process (2 epochs of
// kTinyModel on 320 Fashion-MNIST images and a file that is no image, validated on 100, with a
// trace), whose folder the report tests read; find_program(), a program on PATH.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/fashion_mnist_data.h"
#include "tests/train/train_fixture.h"

namespace cutrain_test {

// `name` from PATH (or /usr/bin), or "" when it is not there.
inline std::string find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  const std::string dirs = std::string(path ? path : "") + ":/usr/bin";
  for (size_t b = 0; b <= dirs.size();) {
    size_t e = dirs.find(':', b);
    if (e == std::string::npos) e = dirs.size();
    const std::filesystem::path p = std::filesystem::path(dirs.substr(b, e - b)) / name;
    if (e > b && ::access(p.c_str(), X_OK) == 0) return p.string();
    b = e + 1;
  }
  return "";
}

struct ReportedRun {
  std::string dir;       // the run folder (--out)
  std::string bad_file;  // the training list's file that is no image
  Ran train;             // the training process's exit status and output
};

// 2 epochs of 10 steps (~1 s on two cores), trained once per test process by bin/cutrain.
inline const ReportedRun& reported_run() {
  static TempDir dir;
  static const ReportedRun run = [] {
    const FashionMnistFiles& fm = fashion_mnist_jpegs();
    ReportedRun r;
    r.dir = dir / "run";
    // The first 319 training images and a file that is no image (a bad file the run skips).
    r.bad_file = dir / "not-an-image.jpg";
    write_text(r.bad_file, "this is not a JPEG");
    // The list's paths are relative to its folder: made absolute for a list elsewhere.
    const std::string images = std::filesystem::path(fm.train).parent_path().string() + "/";
    std::ifstream train(fm.train);
    std::string list, line;
    for (int i = 0; i < 319 && std::getline(train, line); i++) list += images + line + "\n";
    write_text(dir / "train.txt", list + r.bad_file + "\t3\n");
    std::filesystem::copy_file(fm.classes, dir / "classes.txt");  // the class names
    write_text(dir / "tiny.model", kTinyModel);
    r.train = run_cutrain({"train", "--train", dir / "train.txt", "--val", fm.test, "--limit-val",
                           "100", "--model", dir / "tiny.model", "--batch", "32", "--epochs",
                           "2", "--lr", "0.05", "--seed", "7", "--threads", "2",
                           "--log-every", "2", "--device", "cpu", "--trace",
                           // relative, from here: config.json must say where it went
                           std::filesystem::relative(dir / "trace.json").string(), "--out", r.dir},
                          dir / "train.log");
    return r;
  }();
  return run;
}

}  // namespace cutrain_test
