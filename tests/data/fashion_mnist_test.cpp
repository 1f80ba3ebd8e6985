// Fashion-MNIST import, on the real IDX files: 60,000 + 10,000 list entries in IDX order,
// classes.txt, every JPEG decoded and compared with its IDX pixels; reuse, re-import, and
// that a failed import leaves no list behind. Bad input on a small synthetic data set.
#include <turbojpeg.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/fashion_mnist.h"
#include "data/idx.h"
#include "data/image.h"
#include "tests/data/idx_files.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::TempDir;
namespace fs = std::filesystem;

namespace {

IdxDataset read_real(const char* prefix) {
  const std::string dir = cutrain::fashion_mnist_idx_dir() + "/" + prefix;
  REQUIRE_MESSAGE(fs::exists(dir + "-images-idx3-ubyte.gz"),
                  dir << "-images-idx3-ubyte.gz is missing: install dataset-fashion-mnist");
  return read_idx_dataset(dir + "-images-idx3-ubyte.gz", dir + "-labels-idx1-ubyte.gz");
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(), path << " is missing");
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  return lines;
}

// Line n (from 0) of a file that must have it.
std::string nth_line(const std::string& path, size_t n) {
  const std::vector<std::string> lines = read_lines(path);
  REQUIRE(lines.size() > n);
  return lines[n];
}

// A JPEG decoded to (H,W) uint8 by the pipeline's decoder (data/image.h); REQUIREs that the
// file is a one-channel (grayscale) JPEG of the expected size.
std::vector<uint8_t> decode_gray(const std::string& path, int H, int W) {
  std::vector<uint8_t> jpeg;
  DecodeResult r = read_file_bytes(path, jpeg);
  INFO(path << ": " << r.message);
  REQUIRE(r.ok());
  // The colour space from the header: the decoder below would turn colour into gray silently.
  tjhandle tj = tjInitDecompress();
  int w = 0, h = 0, subsamp = 0, colorspace = -1;
  tjDecompressHeader3(tj, jpeg.data(), jpeg.size(), &w, &h, &subsamp, &colorspace);
  tjDestroy(tj);
  REQUIRE(colorspace == TJCS_GRAY);
  Image img;
  r = decode_image(jpeg.data(), jpeg.size(), 1, 0, int64_t(H) * W, img);
  REQUIRE(r.ok());
  REQUIRE(img.h == H);
  REQUIRE(img.w == W);
  REQUIRE(img.c == 1);
  return img.pixels;
}

// Checks one split's list line by line against the IDX labels, decodes every listed JPEG and
// returns the largest absolute pixel error; adds to the error sum and the pixel count.
int check_split(const std::string& out, const char* split, const IdxDataset& idx,
                double* err_sum, int64_t* pixels) {
  const std::vector<std::string> lines = read_lines(out + "/" + split + ".txt");
  REQUIRE(int64_t(lines.size()) == idx.images.N);
  int max_err = 0;
  for (size_t i = 0; i < lines.size(); i++) {
    char want[64];
    std::snprintf(want, sizeof want, "%s/%d/%05zu.jpg\t%d", split, idx.labels[i], i,
                  idx.labels[i]);
    INFO(split << ".txt line " << i + 1);
    REQUIRE(lines[i] == want);
    const std::vector<uint8_t> px =
        decode_gray(out + "/" + lines[i].substr(0, lines[i].find('\t')), 28, 28);
    const uint8_t* ref = idx.images.image(int64_t(i));
    for (size_t p = 0; p < px.size(); p++) {
      const int e = std::abs(int(px[p]) - int(ref[p]));
      max_err = std::max(max_err, e);
      *err_sum += e;
    }
    *pixels += int64_t(px.size());
  }
  return max_err;
}

// A small synthetic data set in IDX form under dir: 30 train and 10 test images of 4x5, train
// labels 0,1,..,9,0,.. and test labels 9,8,..,0; a test may change them and write() again.
struct SmallSet {
  std::string dir;
  std::vector<uint8_t> px = std::vector<uint8_t>(30 * 20), train_labels, test_labels;
  explicit SmallSet(const std::string& d) : dir(d) {
    fs::create_directories(dir);
    for (size_t i = 0; i < px.size(); i++) px[i] = uint8_t(i * 37);
    for (int i = 0; i < 30; i++) train_labels.push_back(uint8_t(i % 10));
    for (int i = 0; i < 10; i++) test_labels.push_back(uint8_t(9 - i));
    write();
  }
  void write() const {
    using cutrain_test::write_idx;
    write_idx(dir + "/train-images-idx3-ubyte.gz", kIdxImagesMagic, {30, 4, 5}, px, true);
    write_idx(dir + "/train-labels-idx1-ubyte.gz", kIdxLabelsMagic, {uint32_t(train_labels.size())},
              train_labels, true);
    write_idx(dir + "/t10k-images-idx3-ubyte.gz", kIdxImagesMagic, {10, 4, 5},
              std::vector<uint8_t>(px.begin(), px.begin() + 200), true);
    write_idx(dir + "/t10k-labels-idx1-ubyte.gz", kIdxLabelsMagic, {uint32_t(test_labels.size())},
              test_labels, true);
  }
};

}  // namespace

TEST_CASE("fashion-mnist import: 60,000 + 10,000 JPEGs whose pixels match the IDX files") {
  TempDir dir(TempDir::memory_if_possible);  // 70,000 files
  const std::string out = dir / "fm";
  int64_t calls = 0, last_done = -1, last_total = 0;
  bool monotone = true;
  ImportOptions opt;
  opt.threads = 2;
  opt.progress = [&](int64_t done, int64_t total) {
    monotone = monotone && done >= last_done;
    calls++;
    last_done = done;
    last_total = total;
  };
  const ImportSummary s = import_fashion_mnist(cutrain::fashion_mnist_idx_dir(), out, opt);
  REQUIRE(s.train == 60000);
  REQUIRE(s.test == 10000);
  REQUIRE_FALSE(s.reused);
  REQUIRE(s.threads == 2);
  REQUIRE(s.train_list == out + "/train.txt");
  REQUIRE(calls >= 1);
  REQUIRE(monotone);
  REQUIRE(last_done == 70000);
  REQUIRE(last_total == 70000);
  MESSAGE("import: " << s.seconds << " s, " << s.jpeg_bytes / 1e6 << " MB of JPEG");

  REQUIRE(read_lines(s.classes_file) == fashion_mnist_classes());
  REQUIRE(fashion_mnist_classes().size() == 10);
  REQUIRE(fashion_mnist_classes()[0] == "T-shirt/top");
  REQUIRE(fashion_mnist_classes()[9] == "Ankle boot");
  for (const auto& e : fs::directory_iterator(out))  // the temporary lists were renamed
    REQUIRE(e.path().extension() != ".tmp");

  // Every image, decoded (about 2 s on 2 cores). Quality 95 on 28x28 grayscale, measured over
  // all 70,000: max abs error 15, mean abs error 1.10 gray levels. At quality 95 the
  // quantisation steps are 1..12, and the largest errors sit on sharp edges against the black
  // background, where the lost high frequencies ring. The bounds leave room for another
  // libjpeg-turbo's rounding; a wrong or shifted image (mean error in the tens) fails both.
  double err_sum = 0;
  int64_t pixels = 0;
  int max_err = check_split(out, "train", read_real("train"), &err_sum, &pixels);
  max_err = std::max(max_err, check_split(out, "test", read_real("t10k"), &err_sum, &pixels));
  REQUIRE(pixels == 70000 * 28 * 28);
  const double mean_err = err_sum / double(pixels);
  MESSAGE("JPEG error over all 70,000 images: max " << max_err << ", mean " << mean_err);
  REQUIRE(max_err <= 20);
  REQUIRE(mean_err <= 1.25);

  // A second import finds the first complete and keeps it; it rewrites nothing.
  const auto written = fs::last_write_time(out + "/test/5/09999.jpg");  // the last: a sandal
  const ImportSummary again =
      import_fashion_mnist(cutrain::fashion_mnist_idx_dir(), out, opt);
  REQUIRE(again.reused);
  REQUIRE(again.train == 60000);
  REQUIRE(again.test == 10000);
  REQUIRE(again.jpeg_bytes == 0);
  REQUIRE(fs::last_write_time(out + "/test/5/09999.jpg") == written);
}

// The rest runs on a small synthetic set: the logic does not depend on the size, and each
// import of the real one creates 70,000 files.

TEST_CASE("fashion-mnist import: an incomplete import is redone, --force redoes any") {
  TempDir dir;
  SmallSet set(dir / "idx");
  const std::string out = dir / "fm", victim = out + "/test/0/00009.jpg";
  ImportOptions opt;
  opt.threads = 3;
  const ImportSummary first = import_fashion_mnist(set.dir, out, opt);
  REQUIRE(first.train == 30);
  REQUIRE(first.test == 10);
  REQUIRE_FALSE(first.reused);
  REQUIRE(nth_line(first.test_list, 9) == "test/0/00009.jpg\t0");
  REQUIRE(import_fashion_mnist(set.dir, out, opt).reused);

  // A missing image makes the import incomplete: everything is encoded again.
  fs::remove(victim);
  const ImportSummary redone = import_fashion_mnist(set.dir, out, opt);
  REQUIRE_FALSE(redone.reused);
  REQUIRE(fs::file_size(victim) > 0);
  REQUIRE(redone.jpeg_bytes == first.jpeg_bytes);  // the same bytes as the first time
  // So does an empty image (a write cut short),
  std::ofstream(victim, std::ios::trunc).close();
  REQUIRE_FALSE(import_fashion_mnist(set.dir, out, opt).reused);
  // a list that is not exactly what the import writes (one line short),
  std::vector<std::string> lines = read_lines(out + "/test.txt");
  std::ofstream list(out + "/test.txt", std::ios::trunc);
  for (size_t i = 0; i + 1 < lines.size(); i++) list << lines[i] << "\n";
  list.close();
  REQUIRE_FALSE(import_fashion_mnist(set.dir, out, opt).reused);
  REQUIRE(read_lines(out + "/test.txt") == lines);
  // another class file,
  std::ofstream(out + "/classes.txt", std::ios::app) << "Hat\n";
  REQUIRE_FALSE(import_fashion_mnist(set.dir, out, opt).reused);
  REQUIRE(read_lines(out + "/classes.txt") == fashion_mnist_classes());
  // and new labels in the IDX files.
  std::swap(set.train_labels[0], set.train_labels[1]);
  set.write();
  REQUIRE_FALSE(import_fashion_mnist(set.dir, out, opt).reused);
  REQUIRE(nth_line(out + "/train.txt", 0) == "train/1/00000.jpg\t1");
  // A complete import is kept, unless forced.
  REQUIRE(import_fashion_mnist(set.dir, out, opt).reused);
  opt.force = true;
  REQUIRE_FALSE(import_fashion_mnist(set.dir, out, opt).reused);
}


TEST_CASE("fashion-mnist import: a failed import leaves no list pointing at missing files") {
  TempDir dir;
  SmallSet set(dir / "idx");
  const std::string out = dir / "fm";
  ImportOptions opt;
  opt.threads = 2;
  import_fashion_mnist(set.dir, out, opt);
  // A folder where an image must go: the forced import fails part way, naming the file...
  fs::remove(out + "/train/3/00013.jpg");
  fs::create_directory(out + "/train/3/00013.jpg");
  opt.force = true;
  REQUIRE_ERROR(import_fashion_mnist(set.dir, out, opt), "train/3/00013.jpg: cannot create");
  // ...and leaves no list or class file, since it removed them before writing any image.
  for (const char* f : {"/train.txt", "/test.txt", "/classes.txt"})
    REQUIRE_FALSE(fs::exists(out + f));
  // Not complete, so not reused: the next import does the work again.
  fs::remove(out + "/train/3/00013.jpg");
  opt.force = false;
  REQUIRE_FALSE(import_fashion_mnist(set.dir, out, opt).reused);
  REQUIRE(fs::exists(out + "/train.txt"));
}

TEST_CASE("fashion-mnist import: bad input is refused clearly") {
  TempDir dir;
  SmallSet set(dir / "idx");
  const std::string out = dir / "fm";
  ImportOptions opt;
  opt.quality = 0;
  REQUIRE_ERROR(import_fashion_mnist(set.dir, out, opt), "JPEG quality must be in [1, 100]; got 0");
  opt.quality = 101;
  REQUIRE_ERROR(import_fashion_mnist(set.dir, out, opt), "got 101");
  opt.quality = 95;
  REQUIRE_ERROR(import_fashion_mnist(set.dir, "", opt), "the output folder must be named");
  opt.threads = -1;
  REQUIRE_ERROR(import_fashion_mnist(set.dir, out, opt), "threads must be >= 0");
  opt.threads = 0;
  REQUIRE_ERROR(import_fashion_mnist(dir / "nowhere", out, opt),
                "train-labels-idx1-ubyte.gz: cannot open");
  set.test_labels[4] = 10;
  set.write();
  REQUIRE_ERROR(import_fashion_mnist(set.dir, out, opt),
                "t10k-labels-idx1-ubyte.gz: label 10 of sample 4 is outside [0, 10)");
  // images and labels that disagree in count
  set.test_labels[4] = 4;
  set.test_labels.push_back(0);
  set.write();
  REQUIRE_ERROR(import_fashion_mnist(set.dir, out, opt),
                "t10k-images-idx3-ubyte.gz holds 10 images but");
  REQUIRE_FALSE(fs::exists(out + "/test.txt"));
}
