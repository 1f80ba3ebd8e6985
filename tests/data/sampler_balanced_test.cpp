// Class-balanced epochs (--balance sampler, data/sampler.h): the draws per class, exact in every
// epoch; every draw a member of its class; small classes repeated evenly, large ones
// subsampled; a pure function of (labels, seed, epoch); batches, shards and the resume cursor
// as without balancing; an augmentation key per draw.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "data/sampler.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::interleaved_labels;

namespace {

SamplerConfig balanced(const std::vector<int32_t>& labels, int64_t B, int R = 1, int rank = 0,
                       uint64_t seed = 42) {
  SamplerConfig c;
  c.num_samples = int64_t(labels.size());
  c.batch_size = B;
  c.seed = seed;
  c.replicas = R;
  c.rank = rank;
  c.labels = labels;
  return c;
}

std::vector<int64_t> per_class(const std::vector<int32_t>& labels,
                               const std::vector<int64_t>& draws, size_t K) {
  std::vector<int64_t> n(K, 0);
  for (int64_t i : draws) n[size_t(labels[size_t(i)])]++;
  return n;
}

// Classes of 50, 3, 0, 10 and 7 samples: N = 70 over K = 4 classes with samples, so 17 draws
// each and 2 extra.
const std::vector<int> kCounts = {50, 3, 0, 10, 7};

}  // namespace

TEST_CASE("balanced sampler: floor(N/K) draws per class, the N mod K extras taken in turn") {
  const std::vector<int64_t> sizes = {50, 3, 0, 10, 7};
  // The j-th class with samples (classes 0, 1, 3, 4) gets an extra when (j - e) mod 4 < 2.
  REQUIRE(balanced_class_draws(sizes, 0) == std::vector<int64_t>{18, 18, 0, 17, 17});
  REQUIRE(balanced_class_draws(sizes, 1) == std::vector<int64_t>{17, 18, 0, 18, 17});
  REQUIRE(balanced_class_draws(sizes, 2) == std::vector<int64_t>{17, 17, 0, 18, 18});
  REQUIRE(balanced_class_draws(sizes, 3) == std::vector<int64_t>{18, 17, 0, 17, 18});
  REQUIRE(balanced_class_draws(sizes, 4) == balanced_class_draws(sizes, 0));
  REQUIRE(balanced_class_draws(sizes, 1000000000003) == balanced_class_draws(sizes, 3));
  // Balanced data: each class its own size.
  REQUIRE(balanced_class_draws({6, 6, 6}, 5) == std::vector<int64_t>{6, 6, 6});
  REQUIRE(balanced_class_draws({0, 0}, 0) == std::vector<int64_t>{0, 0});
}

TEST_CASE("balanced sampler: each epoch's class counts exact; repeats even; subsampling varies") {
  const std::vector<int32_t> labels = interleaved_labels(kCounts);
  const std::vector<int64_t> sizes(kCounts.begin(), kCounts.end());
  std::set<int64_t> class0_seen;
  for (int64_t e = 0; e < 6; e++) {
    INFO("epoch " << e);
    const std::vector<int64_t> order = balanced_epoch(labels, 42, e);
    REQUIRE(order.size() == labels.size());
    for (int64_t i : order) REQUIRE((i >= 0 && i < int64_t(labels.size())));
    // Exactly balanced_class_draws of each class (a draw's class is its sample's label).
    REQUIRE(per_class(labels, order, 5) == balanced_class_draws(sizes, e));
    std::map<int64_t, int> times;
    for (int64_t i : order) times[i]++;
    // Class 1 (3 samples, 17 or 18 draws): each sample 5 or 6 times, floor or ceil of d/n.
    // Class 4 (7 samples, 17 or 18 draws): each 2 or 3 times. Class 3 (10): 1 or 2 times.
    for (size_t i = 0; i < labels.size(); i++) {
      const int32_t k = labels[i];
      const int64_t d = balanced_class_draws(sizes, e)[size_t(k)], n = sizes[size_t(k)];
      const int t = times.count(int64_t(i)) ? times[int64_t(i)] : 0;
      INFO("sample " << i << " of class " << k << " drawn " << t << " times");
      REQUIRE(t >= d / n);
      REQUIRE(t <= (d + n - 1) / n);
      if (k == 0) {
        REQUIRE(t <= 1);  // subsampled: 17 or 18 of 50, none twice
        if (t) class0_seen.insert(int64_t(i));
      }
    }
  }
  // Each epoch subsamples class 0 afresh: six epochs reach well past 18 of its 50.
  REQUIRE(class0_seen.size() > 40);
}

TEST_CASE("balanced sampler: a pure function of (labels, seed, epoch), mixed across classes") {
  const std::vector<int32_t> labels = interleaved_labels(kCounts);
  const std::vector<int64_t> a = balanced_epoch(labels, 42, 3);
  REQUIRE(balanced_epoch(labels, 42, 3) == a);
  REQUIRE(balanced_epoch(labels, 42, 4) != a);
  REQUIRE(balanced_epoch(labels, 43, 3) != a);
  // Not class by class: the draws are mixed by the epoch's permutation (a class's 17 draws in
  // one run would be a 1 in C(70, 17) accident).
  std::vector<int32_t> classes;
  for (int64_t i : a) classes.push_back(labels[size_t(i)]);
  int runs = 1;
  for (size_t i = 1; i < classes.size(); i++) runs += classes[i] != classes[i - 1];
  REQUIRE(runs > 30);
  // The Sampler gives the same order: its batches of 7 (10 per epoch) concatenated.
  Sampler s(balanced(labels, 7));
  REQUIRE(s.batches_per_epoch() == 10);
  std::vector<int64_t> all;
  for (int64_t b = 0; b < 10; b++) {
    const std::vector<int64_t> batch = s.batch(3, b);
    all.insert(all.end(), batch.begin(), batch.end());
  }
  REQUIRE(all == a);
}

TEST_CASE("balanced sampler: replicas' shards partition each batch; resume from a cursor") {
  const std::vector<int32_t> labels = interleaved_labels(kCounts);
  const int64_t B = 9;  // 7 batches of 9 per epoch, 7 draws dropped
  Sampler one(balanced(labels, B));
  std::vector<std::unique_ptr<Sampler>> three;
  for (int r = 0; r < 3; r++) three.push_back(std::make_unique<Sampler>(balanced(labels, B, 3, r)));
  for (int64_t e = 0; e < 3; e++)
    for (int64_t b = 0; b < one.batches_per_epoch(); b++) {
      INFO("epoch " << e << " batch " << b);
      std::vector<int64_t> joined;
      for (const auto& s : three) {
        const std::vector<int64_t> shard = s->batch(e, b);
        REQUIRE(shard.size() == 3);
        joined.insert(joined.end(), shard.begin(), shard.end());
      }
      REQUIRE(joined == one.batch(e, b));  // in rank order: the global batch
    }

  // A run of 17 batches (into the third epoch), and the same run stopped mid-epoch after 10,
  // its cursor saved as text, resumed by a fresh sampler.
  std::vector<std::vector<int64_t>> straight, resumed;
  SamplerCursor c;
  for (int i = 0; i < 17; i++, c = one.next(c)) straight.push_back(one.batch(c.epoch, c.batch));
  c = {};
  for (int i = 0; i < 10; i++, c = one.next(c)) resumed.push_back(one.batch(c.epoch, c.batch));
  REQUIRE(cursor_to_string(c) == "epoch=1 batch=3");
  Sampler fresh(balanced(labels, B));
  c = parse_cursor(cursor_to_string(c));
  for (int i = 10; i < 17; i++, c = fresh.next(c)) resumed.push_back(fresh.batch(c.epoch, c.batch));
  REQUIRE(resumed == straight);
}

TEST_CASE("balanced sampler: each draw its own augmentation key; unbalanced keys unchanged") {
  const std::vector<int32_t> labels = interleaved_labels(kCounts);
  Sampler s(balanced(labels, 10, 2, 1));  // replica 1 of 2: positions 5..9 of each batch
  std::set<uint64_t> keys;
  for (int64_t b = 0; b < s.batches_per_epoch(); b++) {
    const std::vector<int64_t> shard = s.batch(2, b);
    for (size_t pos = 0; pos < shard.size(); pos++) {
      const uint64_t k = s.draw_augment_key(2, b, int64_t(pos), shard[pos]);
      REQUIRE(k == augment_key(42, 2, b * 10 + 5 + int64_t(pos)));  // its place in the epoch
      keys.insert(k);
    }
  }
  REQUIRE(keys.size() == 35);  // distinct, though samples of class 1 repeat
  REQUIRE_ERROR(s.draw_augment_key(2, 0, 5, 0), "position 5 is outside the shard of 5 samples");

  SamplerConfig plain = balanced(labels, 10, 2, 1);
  plain.labels.clear();
  Sampler p(plain);
  const std::vector<int64_t> shard = p.batch(2, 3);
  for (size_t pos = 0; pos < shard.size(); pos++)
    REQUIRE(p.draw_augment_key(2, 3, int64_t(pos), shard[pos]) == augment_key(42, 2, shard[pos]));
}

TEST_CASE("balanced sampler: bad configurations are refused clearly") {
  SamplerConfig c = balanced(interleaved_labels(kCounts), 10);
  c.labels.pop_back();
  REQUIRE_ERROR(Sampler{c}, "sampler: 69 labels for 70 samples");
  c = balanced(interleaved_labels(kCounts), 10);
  c.shuffle = false;
  REQUIRE_ERROR(Sampler{c}, "class-balanced epochs need shuffle");
  REQUIRE_ERROR(balanced_epoch({0, 1, -1}, 1, 0), "sample 2 has the negative label -1");
  REQUIRE_ERROR(balanced_epoch({}, 1, 0), "balanced_epoch: no samples");
}
