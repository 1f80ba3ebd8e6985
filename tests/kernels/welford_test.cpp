// The one-pass statistics of the BatchNorm ladder's v3 (kernels/ladder/welford.h), on the CPU
// in the kernel's own structure: each value shifted by the channel's first value (one rounding
// at most; exact for values within a factor 2 of it), then Welford's update over each lane's
// rows, Chan's merge of the lanes pairwise and of the blocks in order. Against the exact (long
// double) mean and variance, beside the two-pass blocked sums of v2 (kernels/batchnorm.h), and
// beside the naive one-pass sum of x and x^2, which shows what the test can catch: on
// activations far from 0 (mean 1000, spread 0.01) that form cancels to nothing. Without the
// shift, fp32 Welford loses three digits on those (measured: 6e-4 of the variance against the
// two passes' 1.4e-6), which the mean-1000 case of the first test catches.
#include <cmath>
#include <vector>

#include "kernels/blocked_sum.h"
#include "kernels/ladder/welford.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {

struct Stats {
  double mean, var;
};

// v3's structure on the host: lane l of block b takes rows b*L + l + k*G*L; lanes merged
// pairwise (stride halving), blocks in order.
Stats welford_like_v3(const std::vector<float>& x, int L, int G) {
  const int64_t M = int64_t(x.size());
  std::vector<Welford<float>> blocks;
  for (int b = 0; b < G; b++) {
    std::vector<Welford<float>> lanes(static_cast<size_t>(L));
    for (int l = 0; l < L; l++)
      for (int64_t m = int64_t(b) * L + l; m < M; m += int64_t(G) * L) {
        Welford<float>& w = lanes[size_t(l)];
        welford_add(w, x[size_t(m)] - x[0], div_rn(1.0f, add_rn(w.n, 1.0f)));
      }
    int p2 = 1;
    while (p2 < L) p2 *= 2;
    for (int stride = p2 / 2; stride >= 1; stride /= 2)
      for (int l = 0; l < stride && l + stride < L; l++)
        lanes[size_t(l)] = welford_merge(lanes[size_t(l)], lanes[size_t(l + stride)]);
    blocks.push_back(lanes[0]);
  }
  Welford<float> all;
  for (const Welford<float>& b : blocks) all = welford_merge(all, b);
  REQUIRE(all.n == float(M));
  return {double(all.mean + x[0]), all.m2 / float(M)};
}

// v2's form: the mean, then the mean squared deviation, each a blocked fp32 sum.
Stats two_pass_blocked(const std::vector<float>& x) {
  BlockedSum<float> s;
  for (float v : x) s.add(v);
  const float mean = s.total() / float(x.size());
  BlockedSum<float> q;
  for (float v : x) q.add((v - mean) * (v - mean));
  return {mean, q.total() / float(x.size())};
}

Stats exact(const std::vector<float>& x) {
  long double s = 0, q = 0;
  for (float v : x) s += v;
  const long double mean = s / x.size();
  for (float v : x) q += (v - mean) * (v - mean);
  return {double(mean), double(q / x.size())};
}

}  // namespace

TEST_CASE("welford: v3's one-pass statistics are as accurate as v2's two passes") {
  // 128 x 28 x 28 values of one channel (the default model's first BatchNorm at batch 128),
  // the kernel's lanes and blocks for C = 32 in fp16 (L = 64 lanes, 98 blocks)
  for (double offset : {0.0, 3.0, 1000.0}) {
    INFO("mean " << offset);
    std::vector<float> x(128 * 28 * 28);
    for (size_t i = 0; i < x.size(); i++)
      x[i] = float(offset + (offset > 100 ? 0.01 : 1.0) * (2 * rng_uniform(7, i) - 1));
    const Stats want = exact(x), w = welford_like_v3(x, 64, 98), b = two_pass_blocked(x);
    const double err_w = std::fabs(w.var - want.var) / want.var;
    const double err_b = std::fabs(b.var - want.var) / want.var;
    MESSAGE("mean " << offset << ": variance relative error, v3 " << err_w << ", v2 " << err_b);
    REQUIRE(std::fabs(w.mean - want.mean) <= 1e-6 * std::max(1.0, std::fabs(want.mean)));
    // as good as the blocked two passes: within a few fp32 ulps of relative error of it
    REQUIRE(err_w <= std::max(4 * err_b, 4e-7));
  }
}

TEST_CASE("welford: the naive one-pass sum of x and x^2 fails where v3 does not") {
  std::vector<float> x(128 * 28 * 28);
  for (size_t i = 0; i < x.size(); i++) x[i] = float(1000 + 0.01 * (2 * rng_uniform(9, i) - 1));
  float s = 0, q = 0;
  for (float v : x) s += v, q += v * v;
  const double n = double(x.size()), naive = (q - s * s / n) / n;
  const Stats want = exact(x), w = welford_like_v3(x, 64, 98);
  REQUIRE(std::fabs(naive - want.var) / want.var > 1);     // no correct digit left
  REQUIRE(std::fabs(w.var - want.var) / want.var < 1e-3);  // v3 keeps them
}

TEST_CASE("welford_merge: merging partial results equals one pass over all values") {
  Welford<double> a, b, all;
  for (int i = 0; i < 10; i++) {
    const double v = std::sin(i) * 3 + 2;
    welford_add(i < 4 ? a : b, v, 1.0 / ((i < 4 ? a.n : b.n) + 1));
    welford_add(all, v, 1.0 / (all.n + 1));
  }
  const Welford<double> m = welford_merge(a, b);
  REQUIRE(m.n == 10);
  REQUIRE(std::fabs(m.mean - all.mean) < 1e-12);
  REQUIRE(std::fabs(m.m2 - all.m2) < 1e-12);
  REQUIRE(welford_merge(Welford<double>{}, a).mean == a.mean);  // an empty side
}
