// kernels/blocked_sum.h: exact sums by hand, the order of the additions (the pairwise tree of
// block sums), the error bound it documents, and BlockedSums against BlockedSum lane by lane.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/blocked_sum.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {

// The pairwise tree written out recursively: blocks of B in order, then halves. n / B must be
// a power of two, where the binary counter builds exactly this tree.
template <int B> float tree_sum(const float* x, int64_t n) {
  if (n == B) {
    float s = 0;
    for (int i = 0; i < B; i++) s += x[i];
    return s;
  }
  return tree_sum<B>(x, n / 2) + tree_sum<B>(x + n / 2, n / 2);
}

// d of the documented bound: b + floor(log2(ceil(n / b))).
int64_t depth(int64_t n, int b) {
  int64_t d = b, blocks = (n + b - 1) / b;
  while (blocks > 1) blocks >>= 1, d++;
  return d;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE_TEMPLATE("blocked_sum: exact sums of small integers, any n", A, float, double) {
  for (int64_t n : {0, 1, 2, 63, 64, 65, 127, 128, 129, 1000, 4097}) {
    INFO("n = " << n);
    const A want = A(n * (n - 1) / 2);  // 0 + 1 + ... + (n-1): exact in float for n <= 4097
    REQUIRE(blocked_sum<A>(n, [](int64_t i) { return A(i); }) == want);
    REQUIRE(blocked_sum<A, 1>(n, [](int64_t i) { return A(i); }) == want);
  }
}

TEST_CASE("blocked_sum: the block sums are added as a pairwise tree") {
  std::vector<float> x(4096);
  for (size_t i = 0; i < x.size(); i++) x[i] = rng_uniform(5, i) * 1000;
  const auto at = [&](int64_t i) { return x[size_t(i)]; };
  // 4096 = 64 blocks of 64, 512 of 8, 4096 of 1: the same bits as the recursive tree.
  REQUIRE(same_bits(blocked_sum<float, 64>(4096, at), tree_sum<64>(x.data(), 4096)));
  REQUIRE(same_bits(blocked_sum<float, 8>(4096, at), tree_sum<8>(x.data(), 4096)));
  REQUIRE(same_bits(blocked_sum<float, 1>(4096, at), tree_sum<1>(x.data(), 4096)));
  // Three blocks: (b0 + b1) + b2, the last (short) block added to the finished pair.
  float b[3] = {0, 0, 0};
  for (int i = 0; i < 150; i++) b[i / 64] += x[size_t(i)];
  REQUIRE(same_bits(blocked_sum<float>(150, at), (b[0] + b[1]) + b[2]));
}

TEST_CASE("blocked_sum: within its documented bound, and far more accurate than a running sum") {
  // 2^20 terms of one sign with a large mean (100, spread 1): the hard case for a running sum.
  // The guarantee: |error| <= gamma_d * sum|x|, gamma_d = d u / (1 - d u), d = b +
  // floor(log2(n / b)) = 78, i.e. 4.6e-6 relative. Typical errors are far below: measured on
  // these values, relative errors 1.5e-8 blocked pairwise (b = 64) and 1.4e-5 for the running
  // sum (its errors are a random walk here, ~sqrt(n) u; other seeds gave 6.6e-7 to 1.9e-5).
  // The second bound below, 2 u = 1.2e-7, sits between them.
  const int64_t n = int64_t(1) << 20;
  std::vector<float> x(static_cast<size_t>(n));
  double exact = 0;  // every float is exact in double and 2^20 of them near 100 sum exactly
  for (size_t i = 0; i < x.size(); i++) {
    x[i] = float(100 + std::sqrt(12.0) * (double(rng_uniform(2, i)) - 0.5));
    exact += double(x[i]);
  }
  const auto at = [&](int64_t i) { return x[size_t(i)]; };
  const auto gamma = [](int64_t d) { return double(d) * 0x1p-24 / (1 - double(d) * 0x1p-24); };
  const double err = std::fabs(double(blocked_sum<float>(n, at)) - exact) / exact;
  float running = 0;
  for (float v : x) running += v;
  const double running_err = std::fabs(double(running) - exact) / exact;
  INFO("relative error of the sum of 2^20 values near 100 in fp32: blocked pairwise " << err
          << ", running sum " << running_err);
  REQUIRE(err <= gamma(depth(n, kSumBlock)));
  REQUIRE(err <= 0x1p-23);
  REQUIRE(running_err > 0x1p-23);
  // pure pairwise (b = 1): d = 21
  REQUIRE(std::fabs(double(blocked_sum<float, 1>(n, at)) - exact) / exact <= gamma(depth(n, 1)));
}

TEST_CASE("BlockedSums: every lane gets the bits of a BlockedSum of its terms") {
  const size_t lanes = 5;
  BlockedSums<float> sums(lanes, 1000);
  for (int64_t steps : {1, 64, 200, 1000}) {  // a short block, one block, 3 blocks + a tail, ...
    INFO("steps = " << steps);
    sums.reset();  // reused: the second and later rounds start again from 0
    std::vector<BlockedSum<float>> one(lanes);
    std::vector<float> row(lanes), total(lanes);
    for (int64_t m0 = 0; m0 < steps; m0 += kSumBlock) {  // the caller's loop over blocks
      for (int64_t m = m0; m < std::min(steps, m0 + kSumBlock); m++)
        for (size_t l = 0; l < lanes; l++) {
          const float v = rng_uniform(7, uint64_t(m), l) * float(1 + l * 100);
          row[l] += v;
          one[l].add(v);
        }
      sums.add(row.data());
      for (float v : row) REQUIRE(v == 0.0f);  // handed over: zeroed for the next block
    }
    sums.total(total.data());
    for (size_t l = 0; l < lanes; l++) {
      INFO("lane " << l);
      REQUIRE(same_bits(total[l], one[l].total()));
    }
  }
}
