// The data fingerprint a checkpoint keeps (data/fingerprint.h): the same samples give the same
// fingerprint, any change a different one, and data_difference says where the first is.
#include "data/fingerprint.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {
// n samples "img/<i>.jpg" with label i % 10, as a list source (no file is opened).
ImageList samples(int n) {
  ImageList l;
  l.source = "test";
  for (int i = 0; i < n; i++) l.samples.push_back(Sample{"img/" + std::to_string(i) + ".jpg", i % 10});
  return l;
}
DataFingerprint of(const ImageList& l) { return fingerprint_of(ListSource(l, ImageSpec{})); }
}  // namespace

TEST_CASE("data fingerprint: equal for the same samples, different for any change") {
  const ImageList base = samples(1000);
  const DataFingerprint f = of(base);
  REQUIRE(f.count == 1000);
  REQUIRE(f.block == 4);  // a power of two: at most 256 blocks
  REQUIRE(f.block_hashes.size() == 250);
  REQUIRE(f.block_first[1] == "img/4.jpg");
  REQUIRE(of(samples(1000)) == f);
  REQUIRE(data_difference(f, of(samples(1000))) == "");
  // JSON round trip, as a checkpoint keeps it.
  const DataFingerprint back = DataFingerprint::from_json(f.to_json(), "test");
  REQUIRE(back == f);
  REQUIRE(back.block_hashes == f.block_hashes);
  REQUIRE(back.block_first == f.block_first);
  REQUIRE_USER_ERROR(DataFingerprint::from_json("{\"count\": 3}", "ckpt.h5"),
                     "ckpt.h5: the data fingerprint is unreadable");

  ImageList relabelled = base;
  relabelled.samples[517].label = 3;
  REQUIRE(of(relabelled) != f);
  REQUIRE(data_difference(f, of(relabelled)) == "the first difference is in samples 516-519");

  ImageList renamed = base;
  renamed.samples[8].path = "other/8.jpg";
  REQUIRE(data_difference(f, of(renamed)) ==
          "the first difference is in samples 8-11: sample 8 was 'img/8.jpg', now 'other/8.jpg'");

  ImageList latin1 = base;  // a name that is not UTF-8 still makes a fingerprint
  latin1.samples[4].path = "img/caf\xe9.jpg";  // the first of block 1: in the JSON
  const DataFingerprint l1 = of(latin1);
  REQUIRE(DataFingerprint::from_json(l1.to_json(), "test") == l1);

  ImageList swapped = base;
  std::swap(swapped.samples[0], swapped.samples[1]);
  REQUIRE(of(swapped) != f);

  ImageList fewer = base;
  fewer.samples.erase(fewer.samples.begin() + 600);
  REQUIRE(data_difference(f, of(fewer)) ==
          "1000 samples then, 999 now; the first difference is in samples 600-603: sample 600 "
          "was 'img/600.jpg', now 'img/601.jpg'");
  REQUIRE(data_difference(f, of(samples(1010))) == "1000 samples then, 1010 now; the first "
                                                   "difference is in samples 1000-1003");
}
