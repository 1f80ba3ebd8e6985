// The epoch sampler: exactly-once coverage with replicas and both last-batch policies, the
// permutation's determinism and uniformity, the same batches from any number of threads in any
// order, the cursor, and every refused configuration.
#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "data/sampler.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {
SamplerConfig config(int64_t N, int64_t B, int R = 1, int rank = 0,
                     LastBatch last = LastBatch::drop, uint64_t seed = 42) {
  SamplerConfig c;
  c.num_samples = N;
  c.batch_size = B;
  c.seed = seed;
  c.replicas = R;
  c.rank = rank;
  c.last_batch = last;
  return c;
}
using Batches = std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>>;  // (epoch, b)
}  // namespace

TEST_CASE("sampler: every sample exactly once per epoch, 1 and 3 replicas, both policies") {
  const int64_t N = 103, B = 10;  // 10 full batches and 3 left over
  for (int R : {1, 3}) {
    for (LastBatch last : {LastBatch::drop, LastBatch::partial}) {
      const bool drop = last == LastBatch::drop;
      INFO("replicas " << R << (drop ? ", drop" : ", partial"));
      std::vector<std::unique_ptr<Sampler>> ranks;
      for (int r = 0; r < R; r++)
        ranks.push_back(std::make_unique<Sampler>(config(N, B, R, r, last)));
      REQUIRE(ranks[0]->batches_per_epoch() == (drop ? 10 : 11));
      for (int64_t epoch : {0, 1, 7}) {
        const std::vector<int64_t> perm = epoch_permutation(N, 42, epoch, true);
        std::vector<int> seen(N, 0);
        for (int64_t b = 0; b < ranks[0]->batches_per_epoch(); b++) {
          const int64_t G = ranks[0]->global_batch_size(b);
          REQUIRE(G == (b == 10 ? 3 : 10));
          std::vector<int64_t> all;  // the shards of all ranks, in rank order
          std::vector<size_t> sizes;
          for (int r = 0; r < R; r++) {
            const std::vector<int64_t> shard = ranks[size_t(r)]->batch(epoch, b);
            sizes.push_back(shard.size());
            all.insert(all.end(), shard.begin(), shard.end());
          }
          // sizes differ by at most one, the larger ones first
          REQUIRE(sizes.front() - sizes.back() <= 1);
          REQUIRE(std::is_sorted(sizes.rbegin(), sizes.rend()));
          // together the shards are positions [b*B, b*B + G) of the epoch's permutation
          REQUIRE(all == std::vector<int64_t>(perm.begin() + b * B, perm.begin() + b * B + G));
          for (int64_t i : all) seen[size_t(i)]++;
        }
        for (int64_t p = 0; p < N; p++) {
          INFO("epoch " << epoch << ", position " << p << ", sample " << perm[size_t(p)]);
          REQUIRE(seen[size_t(perm[size_t(p)])] == (drop && p >= 100 ? 0 : 1));
        }
      }
    }
  }
}

TEST_CASE("sampler: batches per epoch and the size of the last batch, both policies") {
  struct Case { int64_t N, B; LastBatch last; int64_t batches, last_size; };
  const LastBatch drop = LastBatch::drop, partial = LastBatch::partial;
  for (const Case& c : {Case{103, 10, drop, 10, 10}, {103, 10, partial, 11, 3},
                        {100, 10, drop, 10, 10}, {100, 10, partial, 10, 10},
                        {10, 10, drop, 1, 10}, {9, 10, partial, 1, 9}, {1, 1, drop, 1, 1}}) {
    INFO("N " << c.N << ", B " << c.B << (c.last == LastBatch::drop ? ", drop" : ", partial"));
    Sampler s(config(c.N, c.B, 1, 0, c.last));
    REQUIRE(s.batches_per_epoch() == c.batches);
    REQUIRE(s.global_batch_size(c.batches - 1) == c.last_size);
    REQUIRE(int64_t(s.batch(0, c.batches - 1).size()) == c.last_size);
  }
}

TEST_CASE("sampler: shard sizes, and a last batch smaller than the replica count") {
  const int R = 3;
  std::vector<std::unique_ptr<Sampler>> ranks;
  for (int r = 0; r < R; r++)
    ranks.push_back(std::make_unique<Sampler>(config(21, 10, R, r, LastBatch::partial)));
  REQUIRE(ranks[0]->batches_per_epoch() == 3);
  const std::vector<size_t> full = {4, 3, 3}, last = {1, 0, 0};  // the first G mod R get one more
  for (int r = 0; r < R; r++) {
    REQUIRE(ranks[size_t(r)]->batch(0, 0).size() == full[size_t(r)]);
    REQUIRE(ranks[size_t(r)]->batch(0, 2).size() == last[size_t(r)]);
  }
}

TEST_CASE("sampler: the permutation is a pure function of (seed, epoch)") {
  for (int64_t N : {1, 2, 7, 1000}) {
    std::vector<int64_t> p = epoch_permutation(N, 5, 3, true), sorted = p;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> iota(static_cast<size_t>(N));
    std::iota(iota.begin(), iota.end(), int64_t(0));
    REQUIRE(sorted == iota);
    REQUIRE(epoch_permutation(N, 5, 3, false) == iota);
  }
  const auto p = epoch_permutation(1000, 5, 3, true);
  REQUIRE(epoch_permutation(1000, 5, 3, true) == p);
  REQUIRE(epoch_permutation(1000, 5, 4, true) != p);
  REQUIRE(epoch_permutation(1000, 6, 3, true) != p);
  REQUIRE(epoch_permutation(0, 5, 3, true).empty());
  REQUIRE_ERROR(epoch_permutation(10, 5, -1, true), "negative epoch -1");
  REQUIRE_ERROR(epoch_permutation(-1, 5, 0, true), "negative sample count -1");
  // the Sampler visits the same order; without shuffle, in index order
  Sampler s(config(1000, 10, 1, 0, LastBatch::drop, 5));
  REQUIRE(s.batch(3, 2) == std::vector<int64_t>(p.begin() + 20, p.begin() + 30));
  SamplerConfig c = config(1000, 10);
  c.shuffle = false;
  REQUIRE(Sampler(c).batch(3, 2) == std::vector<int64_t>{20, 21, 22, 23, 24, 25, 26, 27, 28, 29});
}

TEST_CASE("sampler: every sample is equally likely at every position") {
  // 4 samples, 24000 epochs: each (position, sample) pair expects 6000 hits, sd ~67.
  // A biased shuffle (Sattolo's, j < i, never leaves a sample in place) fails at once.
  const int N = 4, epochs = 24000;
  std::vector<std::vector<int>> hits(N, std::vector<int>(N, 0));
  for (int e = 0; e < epochs; e++) {
    const auto p = epoch_permutation(N, 9, e, true);
    for (int pos = 0; pos < N; pos++) hits[size_t(pos)][size_t(p[size_t(pos)])]++;
  }
  for (int pos = 0; pos < N; pos++)
    for (int k = 0; k < N; k++) {
      INFO("sample " << k << " at position " << pos << ": " << hits[size_t(pos)][size_t(k)]);
      REQUIRE(std::abs(hits[size_t(pos)][size_t(k)] - epochs / N) < 400);
    }
}

TEST_CASE("sampler: the same batches in any call order and from 4 and 16 threads at once") {
  const SamplerConfig c = config(1003, 32, 3, 1, LastBatch::partial, 7);
  const int64_t epochs = 3;
  Batches want;
  {
    Sampler s(c);
    for (int64_t e = 0; e < epochs; e++)
      for (int64_t b = 0; b < s.batches_per_epoch(); b++) want[{e, b}] = s.batch(e, b);
  }
  std::vector<std::pair<int64_t, int64_t>> keys;
  for (const auto& kv : want) keys.push_back(kv.first);
  {
    Sampler s(c);  // backwards, epochs interleaved: every call a different epoch than the last
    for (auto it = keys.rbegin(); it != keys.rend(); ++it) {
      const int64_t b = it->second, e = (it->first + b) % epochs;
      REQUIRE(s.batch(e, b) == want[{e, b}]);
    }
  }
  for (int T : {4, 16}) {
    Sampler s(c);
    std::vector<Batches> got(static_cast<size_t>(T));
    std::vector<std::thread> threads;
    for (int t = 0; t < T; t++)
      threads.emplace_back([&, t] {
        std::vector<std::pair<int64_t, int64_t>> order = keys;
        std::shuffle(order.begin(), order.end(), std::mt19937(unsigned(t)));
        for (const auto& k : order) got[size_t(t)][k] = s.batch(k.first, k.second);
      });
    for (auto& th : threads) th.join();
    for (int t = 0; t < T; t++) {
      INFO(T << " threads, thread " << t);
      REQUIRE(got[size_t(t)] == want);
    }
  }
}

TEST_CASE("sampler: augmentation keys are a pure function of (seed, epoch, sample)") {
  REQUIRE(augment_key(1, 2, 3) == augment_key(1, 2, 3));
  std::set<uint64_t> keys;
  for (uint64_t seed : {1, 2})
    for (int64_t e = 0; e < 10; e++)
      for (int64_t i = 0; i < 1000; i++) keys.insert(augment_key(seed, e, i));
  REQUIRE(keys.size() == 2 * 10 * 1000);  // all distinct
  REQUIRE(augment_key(1, 2, 3) != rng_u64(1, 2, 3));
}

TEST_CASE("sampler: the cursor advances, rolls over, and saves and restores exactly") {
  Sampler s(config(25, 10));  // drop: 2 batches per epoch
  REQUIRE(s.next({0, 0}) == SamplerCursor{0, 1});
  REQUIRE(s.next({0, 1}) == SamplerCursor{1, 0});
  REQUIRE(s.next({4, 1}) == SamplerCursor{5, 0});
  REQUIRE_ERROR(s.next({0, 2}), "cursor epoch=0 batch=2 is outside an epoch of 2 batches");
  REQUIRE_ERROR(s.next({-1, 0}), "is outside an epoch");

  // a run of 7 batches, and the same run stopped after 3, saved as text, resumed elsewhere
  std::vector<std::vector<int64_t>> straight, resumed;
  SamplerCursor c;
  for (int i = 0; i < 7; i++, c = s.next(c)) straight.push_back(s.batch(c.epoch, c.batch));
  c = {};
  for (int i = 0; i < 3; i++, c = s.next(c)) resumed.push_back(s.batch(c.epoch, c.batch));
  const std::string saved = cursor_to_string(c);
  REQUIRE(saved == "epoch=1 batch=1");
  Sampler fresh(config(25, 10));
  c = parse_cursor(saved);
  for (int i = 3; i < 7; i++, c = fresh.next(c)) resumed.push_back(fresh.batch(c.epoch, c.batch));
  REQUIRE(resumed == straight);

  const SamplerCursor big{123456789012345, 7};
  REQUIRE(parse_cursor(cursor_to_string(big)) == big);
  for (const char* bad : {"", "epoch=1", "epoch=1 batch=", "epoch=-1 batch=2", "epoch=1  batch=2",
                          "epoch=1 batch=2x", "batch=1 epoch=2", "epoch=+1 batch=0",
                          "epoch=99999999999999999999 batch=0"}) {
    INFO("'" << bad << "'");
    REQUIRE_ERROR(parse_cursor(bad), "is not of the form 'epoch=E batch=B'");
  }
}

TEST_CASE("sampler: bad configurations and requests are refused clearly") {
  REQUIRE_ERROR(Sampler(config(0, 10)), "no samples (N = 0)");
  REQUIRE_ERROR(Sampler(config(10, 0)), "batch size must be positive, got 0");
  REQUIRE_ERROR(Sampler(config(10, 2, 0, 0)), "replicas must be at least 1, got 0");
  REQUIRE_ERROR(Sampler(config(10, 6, 3, 3)), "rank 3 is outside [0, 3)");
  REQUIRE_ERROR(Sampler(config(10, 6, 3, -1)), "rank -1 is outside [0, 3)");
  REQUIRE_ERROR(Sampler(config(10, 2, 4, 0)), "global batch size 2 is smaller than the 4 replicas");
  REQUIRE_ERROR(Sampler(config(10, 11)), "batch size 11 is larger than the 10 samples");
  Sampler partial(config(10, 11, 1, 0, LastBatch::partial));  // one batch of all 10
  REQUIRE(partial.batches_per_epoch() == 1);
  REQUIRE(partial.batch(0, 0).size() == 10);

  Sampler s(config(30, 10));
  REQUIRE_ERROR(s.batch(0, 3), "batch 3 is outside [0, 3) of an epoch");
  REQUIRE_ERROR(s.batch(0, -1), "batch -1 is outside [0, 3)");
  REQUIRE_ERROR(s.batch(-1, 0), "negative epoch -1");
  REQUIRE_ERROR(s.global_batch_size(3), "batch 3 is outside");
}
