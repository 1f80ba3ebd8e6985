// IDX reader: the real Fashion-MNIST files (counts, sizes, known first labels and pixels), the
// same data read plain and gzipped, and every kind of bad file refused with the file's name.
#include <cstdio>
#include <filesystem>

#include "data/fashion_mnist.h"
#include "data/idx.h"
#include "tests/data/idx_files.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::read_bytes;
using cutrain_test::TempDir;
using cutrain_test::write_idx;
using cutrain_test::write_bytes;

namespace {

// The Debian package dataset-fashion-mnist; `make deps` installs it (or
// $CUTRAIN_FASHION_MNIST_DIR names a folder holding its files). Missing files fail the tests
// (they are the demo's data, and CI has them), they are not skipped.
std::string real(const std::string& name) {
  const std::string p = cutrain::fashion_mnist_idx_dir() + "/" + name;
  REQUIRE_MESSAGE(std::filesystem::exists(p), p << " is missing: install dataset-fashion-mnist");
  return p;
}

std::vector<uint8_t> iota_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i++) v[i] = uint8_t(i * 7 + 3);
  return v;
}

}  // namespace

TEST_CASE("idx: the real Fashion-MNIST files: counts, sizes, labels, known first samples") {
  // Facts checked against the files independently (Python's gzip module):
  // the first twelve labels, 6,000 / 1,000 images per class, the first image's pixel sum.
  const IdxDataset train =
      read_idx_dataset(real("train-images-idx3-ubyte.gz"), real("train-labels-idx1-ubyte.gz"));
  REQUIRE(train.images.N == 60000);
  REQUIRE(train.images.H == 28);
  REQUIRE(train.images.W == 28);
  REQUIRE(train.images.pixels.size() == size_t(60000) * 28 * 28);
  REQUIRE(train.labels.size() == 60000);
  const std::vector<uint8_t> first_train = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5, 0, 9};
  REQUIRE(std::vector<uint8_t>(train.labels.begin(), train.labels.begin() + 12) == first_train);

  const IdxDataset test =
      read_idx_dataset(real("t10k-images-idx3-ubyte.gz"), real("t10k-labels-idx1-ubyte.gz"));
  REQUIRE(test.images.N == 10000);
  REQUIRE(test.images.H == 28);
  REQUIRE(test.images.W == 28);
  REQUIRE(test.labels.size() == 10000);
  const std::vector<uint8_t> first_test = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7, 4, 5};
  REQUIRE(std::vector<uint8_t>(test.labels.begin(), test.labels.begin() + 12) == first_test);

  for (const IdxDataset* d : {&train, &test}) {
    std::vector<int64_t> per_class(10, 0);
    for (uint8_t l : d->labels) {
      REQUIRE(l < 10);
      per_class[l]++;
    }
    for (int64_t c : per_class) REQUIRE(c == d->images.N / 10);
  }
  // Image 0 of the training set is an ankle boot: pixel sum 76247, and its middle row.
  int64_t sum = 0;
  for (int i = 0; i < 28 * 28; i++) sum += train.images.image(0)[i];
  REQUIRE(sum == 76247);
  const std::vector<uint8_t> row14 = {0,   0,   1,   4,   6,   7,   2,   0,   0,   0,
                                      0,   0,   237, 226, 217, 223, 222, 219, 222, 221,
                                      216, 223, 229, 215, 218, 255, 77,  0};
  REQUIRE(std::vector<uint8_t>(train.images.image(0) + 14 * 28,
                               train.images.image(0) + 15 * 28) == row14);
}

TEST_CASE("idx: plain and gzip-compressed files read the same") {
  TempDir dir;
  const std::vector<uint8_t> px = iota_bytes(3 * 4 * 5), lb = {1, 2, 0};
  write_idx(dir / "img", kIdxImagesMagic, {3, 4, 5}, px, false);
  write_idx(dir / "img.gz", kIdxImagesMagic, {3, 4, 5}, px, true);
  write_idx(dir / "lab", kIdxLabelsMagic, {3}, lb, false);
  write_idx(dir / "lab.gz", kIdxLabelsMagic, {3}, lb, true);
  REQUIRE(read_bytes(dir / "img.gz")[0] == 0x1f);  // really compressed
  for (const char* suffix : {"", ".gz"}) {
    const IdxDataset d = read_idx_dataset(dir / ("img" + std::string(suffix)),
                                          dir / ("lab" + std::string(suffix)));
    REQUIRE(d.images.N == 3);
    REQUIRE(d.images.H == 4);
    REQUIRE(d.images.W == 5);
    REQUIRE(d.images.pixels == px);
    REQUIRE(d.images.image(2)[0] == px[40]);
    REQUIRE(d.labels == lb);
  }
}

TEST_CASE("idx: truncated files are refused, naming the file") {
  TempDir dir;
  // A cut copy of a real gzip file: zlib reports the early end, the sizes do not add up.
  std::vector<uint8_t> gz = read_bytes(real("t10k-images-idx3-ubyte.gz"));
  gz.resize(gz.size() / 4);
  write_bytes(dir / "cut-images.gz", gz);
  REQUIRE_ERROR(read_idx_images(dir / "cut-images.gz"), "cut-images.gz: truncated: the header "
                "declares 10000 images x 28 x 28 = 7840000 bytes of data, the file holds only");
  REQUIRE_ERROR(read_idx_images(dir / "cut-images.gz"), "unexpected end of file");

  std::vector<uint8_t> labels = read_bytes(real("t10k-labels-idx1-ubyte.gz"));
  labels.resize(labels.size() - 100);
  write_bytes(dir / "cut-labels.gz", labels);
  REQUIRE_ERROR(read_idx_labels(dir / "cut-labels.gz"), "cut-labels.gz: truncated");

  // plain: one pixel short
  write_idx(dir / "short", kIdxImagesMagic, {2, 3, 3}, iota_bytes(17), false);
  REQUIRE_ERROR(read_idx_images(dir / "short"),
                "short: truncated: the header declares 2 images x 3 x 3 = 18 bytes of data, "
                "the file holds only 17");
  // a header cut short, and an empty file
  write_bytes(dir / "header", {0, 0, 8, 3, 0, 0, 0, 2, 0});
  REQUIRE_ERROR(read_idx_images(dir / "header"), "header: truncated header: 9 of 16 bytes");
  write_bytes(dir / "empty", {});
  REQUIRE_ERROR(read_idx_labels(dir / "empty"), "empty: truncated header: 0 bytes");
}

TEST_CASE("idx: a wrong magic number is refused, saying what the file looks like") {
  TempDir dir;
  // labels read as images, and images read as labels (the real files)
  REQUIRE_ERROR(read_idx_images(real("t10k-labels-idx1-ubyte.gz")),
                "t10k-labels-idx1-ubyte.gz: bad magic 0x00000801 (an IDX label file), "
                "expected 0x00000803 (IDX uint8 images, 3 dimensions)");
  REQUIRE_ERROR(read_idx_labels(real("t10k-images-idx3-ubyte.gz")),
                "bad magic 0x00000803 (an IDX image file), expected 0x00000801");
  // float data (type byte 0x0d), and something that is not IDX at all
  write_idx(dir / "float.gz", 0x00000d03, {1, 2, 2}, iota_bytes(16), true);
  REQUIRE_ERROR(read_idx_images(dir / "float.gz"), "float.gz: bad magic 0x00000d03");
  write_bytes(dir / "text", std::vector<uint8_t>(40, 'x'));
  REQUIRE_ERROR(read_idx_labels(dir / "text"), "bad magic 0x78787878 (not an IDX uint8 file)");
}

TEST_CASE("idx: sizes that do not match the data, and counts that disagree") {
  TempDir dir;
  // more data than declared
  write_idx(dir / "long.gz", kIdxLabelsMagic, {4}, {1, 2, 3, 4, 5, 6}, true);
  REQUIRE_ERROR(read_idx_labels(dir / "long.gz"), "long.gz: the header declares 4 labels = 4 "
                "bytes of data, but 2 more bytes follow them: sizes do not match the data");
  // zero-sized images, and a header claiming petabytes: refused before reading anything
  write_idx(dir / "zero", kIdxImagesMagic, {5, 0, 28}, {}, false);
  REQUIRE_ERROR(read_idx_images(dir / "zero"), "zero: bad image size 0x28");
  write_idx(dir / "huge", kIdxImagesMagic, {0xffffffffu, 65536, 65536}, iota_bytes(64), false);
  REQUIRE_ERROR(read_idx_images(dir / "huge"), "too large to be real");
  // 3 images, 2 labels
  write_idx(dir / "img", kIdxImagesMagic, {3, 2, 2}, iota_bytes(12), false);
  write_idx(dir / "lab", kIdxLabelsMagic, {2}, {0, 1}, false);
  REQUIRE_ERROR(read_idx_dataset(dir / "img", dir / "lab"),
                "img holds 3 images but " + (dir / "lab") + " holds 2 labels: the counts must "
                "agree");
  // the real training images with the real test labels
  REQUIRE_ERROR(read_idx_dataset(real("train-images-idx3-ubyte.gz"),
                                 real("t10k-labels-idx1-ubyte.gz")),
                "holds 60000 images but");
}

TEST_CASE("idx: missing files and corrupt gzip data") {
  TempDir dir;
  REQUIRE_ERROR(read_idx_labels(dir / "nope.gz"), "nope.gz: cannot open: No such file");
  // A flipped CRC in the gzip trailer: every byte arrives, then zlib's check fails.
  write_idx(dir / "crc.gz", kIdxLabelsMagic, {8}, iota_bytes(8), true);
  std::vector<uint8_t> gz = read_bytes(dir / "crc.gz");
  gz[gz.size() - 8] ^= 0xff;
  write_bytes(dir / "crc.gz", gz);
  REQUIRE_ERROR(read_idx_labels(dir / "crc.gz"), "crc.gz: corrupt gzip data");
  REQUIRE_ERROR(read_idx_labels(dir / "crc.gz"), "incorrect data check");
}
