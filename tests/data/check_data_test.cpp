// check-data on real files: bad files counted by kind, the class histogram of the good ones.
#include <cmath>

#include "data/check_data.h"
#include "tests/data/test_images.h"
#include "tests/test_util.h"

using namespace cutrain;

TEST_CASE("check_data: bad files by kind and the histogram of the good ones") {
  cutrain_test::TempDir dir;
  const auto files = cutrain_test::write_test_images(dir.path());
  ImageList list;
  std::map<ImageError, int64_t> want_bad;
  std::vector<int64_t> want_hist(3, 0);
  for (size_t i = 0; i < files.size(); i++) {
    const int32_t label = int32_t(i % 3);
    list.samples.push_back(Sample{files[i].path, label});
    if (files[i].error == ImageError::none)
      want_hist[size_t(label)]++;
    else
      want_bad[files[i].error]++;
  }
  ImageSpec spec;
  spec.size = 12;
  spec.channels = 3;
  spec.max_pixels = 4 << 20;
  int64_t last_done = -1, calls = 0;
  const CheckReport r = check_data(list, spec, 3, [&](int64_t done, int64_t total) {
    REQUIRE(done > last_done);
    REQUIRE(total == int64_t(files.size()));
    last_done = done;
    calls++;
  });
  REQUIRE(calls >= 1);
  REQUIRE(last_done == int64_t(files.size()));
  REQUIRE(r.images == int64_t(files.size()));
  REQUIRE(r.bad_by_kind == want_bad);
  REQUIRE(r.histogram == want_hist);
  REQUIRE(r.good + int64_t(r.bad.size()) == r.images);
  for (size_t i = 1; i < r.bad.size(); i++) REQUIRE(r.bad[i - 1].index < r.bad[i].index);
}

TEST_CASE("check_data: class imbalance") {
  REQUIRE(class_imbalance({10, 20, 5}) == 4.0);
  REQUIRE(class_imbalance({7, 7}) == 1.0);
  REQUIRE(std::isinf(class_imbalance({3, 0, 1})));
}
