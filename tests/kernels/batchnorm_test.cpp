// BatchNorm CPU kernels: a hand-computed example, the normalisation property, the running
// statistics (unbiased variance), eval against train, backward accumulation, and fp16
// storage with fp32 statistics (including inputs near 30000, where a one-pass variance fails).
#include <cmath>
#include <random>
#include <vector>

#include "kernels/batchnorm.h"
#include "tests/kernels/batch_parts.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::doubles;
using cutrain_test::require_near;
using cutrain_test::to;

namespace {

// The hand example: M = 4 pixels (one 2x2 image), C = 2 channels, stored NHWC (interleaved).
//   channel 0: 7, 9, 9, 15   mean 10, deviations -3,-1,-1, 5, biased var (9+1+1+25)/4 = 9
//   channel 1: 1,-1,-3,-1    mean -1, deviations  2, 0,-2, 0, biased var (4+0+4+0)/4 = 2
// With eps = 7 both invstd are simple: 1/sqrt(9+7) = 1/4 and 1/sqrt(2+7) = 1/3.
// Every value here, and every expected output below, is exact in fp16 as well.
const std::vector<double> kX = {7, 1, 9, -1, 9, -3, 15, -1};
const int kM = 4, kC = 2;

// Per-channel mean and biased variance of a (M,C) array, in double.
void channel_moments(const std::vector<double>& v, int C, std::vector<double>& mean,
                     std::vector<double>& var) {
  const size_t M = v.size() / size_t(C);
  mean.assign(size_t(C), 0);
  var.assign(size_t(C), 0);
  for (size_t i = 0; i < v.size(); i++) mean[i % size_t(C)] += v[i] / double(M);
  for (size_t i = 0; i < v.size(); i++) {
    const double d = v[i] - mean[i % size_t(C)];
    var[i % size_t(C)] += d * d / double(M);
  }
}

// Runs the training forward on doubles converted to T; returns y as doubles.
template <typename T>
std::vector<double> train_forward(const std::vector<double>& x, int C,
                                  const std::vector<double>& gamma,
                                  const std::vector<double>& beta, double eps,
                                  std::vector<acc_t<T>>* mean = nullptr,
                                  std::vector<acc_t<T>>* invstd = nullptr) {
  using A = acc_t<T>;
  const int64_t M = int64_t(x.size()) / C;
  std::vector<T> xt = to<T>(x), y(x.size());
  const size_t Cs = static_cast<size_t>(C);
  std::vector<A> g = to<A>(gamma), b = to<A>(beta), sm(Cs), si(Cs);
  std::vector<A> rm(Cs, A(0)), rv(Cs, A(1));
  batchnorm_forward_train_cpu<T>(M, C, xt.data(), g.data(), b.data(), eps, 0.1, false, y.data(),
                                 sm.data(), si.data(), rm.data(), rv.data());
  if (mean) *mean = sm;
  if (invstd) *invstd = si;
  return doubles(y);
}

}  // namespace

TEST_CASE_TEMPLATE("batchnorm: training forward on a hand-computed example", T, float, double,
                   half_t) {
  using A = acc_t<T>;
  std::vector<A> mean, invstd;
  // gamma = (2, 3), beta = (0.5, 0.25):
  //   channel 0: xhat = (-3,-1,-1,5)/4  -> y = 2*xhat + 0.5  = -1, 0, 0, 3
  //   channel 1: xhat = (2,0,-2,0)/3    -> y = 3*xhat + 0.25 = 2.25, 0.25, -1.75, 0.25
  const std::vector<double> y = train_forward<T>(kX, kC, {2, 3}, {0.5, 0.25}, 7.0, &mean, &invstd);
  require_near(y, {-1, 2.25, 0, 0.25, 0, -1.75, 3, 0.25}, 1e-6);
  require_near(doubles(mean), {10, -1}, 1e-6);
  require_near(doubles(invstd), {0.25, 1.0 / 3}, 1e-6);
}

TEST_CASE("batchnorm: training output has mean 0 and variance 1 per channel") {
  // Channels with very different offsets and scales; eps = 0 so the variance is exactly 1
  // up to rounding (with eps it would be var / (var + eps)).
  const int M = 3 * 5 * 7, C = 3;
  const double offset[C] = {5, -3, 0.5}, scale[C] = {3, 0.1, 1};
  std::vector<double> x = cutrain_test::uniform({M, C}, DType::f64, 7).to_doubles();
  for (size_t i = 0; i < x.size(); i++) x[i] = offset[i % C] + scale[i % C] * x[i];
  const std::vector<double> y = train_forward<float>(x, C, {1, 1, 1}, {0, 0, 0}, 0.0);
  std::vector<double> ymean, yvar;
  channel_moments(y, C, ymean, yvar);
  require_near(ymean, {0, 0, 0}, 1e-5);
  require_near(yvar, {1, 1, 1}, 1e-5);
}

TEST_CASE("batchnorm: running statistics after one and two updates") {
  std::vector<float> x = to<float>(kX), y(kX.size()), g = {1, 1}, b = {0, 0};
  std::vector<float> sm(kC), si(kC), rm = {0, 0}, rv = {1, 1};
  // The running variance takes the unbiased batch variance var * M/(M-1):
  // channel 0: 9 * 4/3 = 12, channel 1: 2 * 4/3 = 8/3. Momentum 0.1.
  batchnorm_forward_train_cpu<float>(kM, kC, x.data(), g.data(), b.data(), 1e-5, 0.1, false,
                                     y.data(), sm.data(), si.data(), rm.data(), rv.data());
  // mean: 0.9*0 + 0.1*10 = 1,  0.9*0 + 0.1*(-1) = -0.1
  // var:  0.9*1 + 0.1*12 = 2.1, 0.9*1 + 0.1*8/3 = 1.1666...   (biased would give 1.8 and 1.1)
  require_near(doubles(rm), {1.0, -0.1}, 1e-6);
  require_near(doubles(rv), {2.1, 0.9 + 0.8 / 3}, 1e-6);

  // A second batch: the first shifted by 10, so mean (20, 9), same variances.
  for (float& v : x) v += 10;
  batchnorm_forward_train_cpu<float>(kM, kC, x.data(), g.data(), b.data(), 1e-5, 0.1, false,
                                     y.data(), sm.data(), si.data(), rm.data(), rv.data());
  // mean: 0.9*1 + 0.1*20 = 2.9,   0.9*(-0.1) + 0.1*9 = 0.81
  // var:  0.9*2.1 + 0.1*12 = 3.09, 0.9*1.1666... + 0.1*8/3 = 1.31666...
  require_near(doubles(rm), {2.9, 0.81}, 1e-6);
  require_near(doubles(rv), {3.09, 0.9 * (0.9 + 0.8 / 3) + 0.8 / 3}, 1e-6);
}

TEST_CASE("batchnorm: eval uses the running statistics, not the batch ones") {
  std::vector<float> x = to<float>(kX), y(kX.size()), g = {2, 3}, b = {0.5, 0.25};
  const std::vector<float> rm = {1, -2}, rv = {4, 0.25};
  const double eps = 1e-5;
  batchnorm_forward_eval_cpu<float>(kM, kC, x.data(), g.data(), b.data(), rm.data(), rv.data(),
                                    eps, false, y.data());
  std::vector<double> want(kX.size());
  for (size_t i = 0; i < kX.size(); i++) {
    const size_t c = i % kC;
    want[i] = g[c] * (kX[i] - rm[c]) / std::sqrt(rv[c] + eps) + b[c];
  }
  require_near(doubles(y), want, 1e-6, 1e-6);

  // The same input in training mode normalises with its own statistics, giving other values.
  const std::vector<double> y_train = train_forward<float>(kX, kC, {2, 3}, {0.5, 0.25}, eps);
  double max_diff = 0;
  for (size_t i = 0; i < kX.size(); i++)
    max_diff = std::fmax(max_diff, std::fabs(want[i] - y_train[i]));
  REQUIRE(max_diff > 1.0);
}

TEST_CASE("batchnorm: backward accumulates and skips null gradients") {
  const int M = 5 * 3, C = 3;
  using cutrain_test::uniform;
  const std::vector<float> x = to<float>(uniform({M, C}, DType::f64, 1).to_doubles());
  const std::vector<float> dy = to<float>(uniform({M, C}, DType::f64, 2).to_doubles());
  const std::vector<float> g = {0.5, 2, -1}, mean = {0.1f, -0.2f, 0}, inv = {1.5, 0.7f, 2};
  const std::vector<float> var = {0.4f, 2, 0.25};  // eval's running variance
  for (bool training : {true, false}) {
    INFO("training = " << training);
    auto run = [&](float* dx, float* dg, float* db) {
      if (training)
        batchnorm_backward_train_cpu<float>(M, C, x.data(), nullptr, dy.data(), g.data(),
                                            mean.data(), inv.data(), false, dx, dg, db);
      else
        batchnorm_backward_eval_cpu<float>(M, C, x.data(), nullptr, dy.data(), g.data(),
                                           mean.data(), var.data(), 1e-5, false, dx, dg, db);
    };
    std::vector<float> dx0(size_t(M * C), 0), dg0(C, 0), db0(C, 0);
    run(dx0.data(), dg0.data(), db0.data());
    // Pre-filled buffers end up as fill + gradient.
    std::vector<float> dx1(size_t(M * C), 1), dg1(C, 2), db1(C, -3);
    run(dx1.data(), dg1.data(), db1.data());
    for (size_t i = 0; i < dx0.size(); i++) REQUIRE(std::fabs(dx1[i] - (dx0[i] + 1)) <= 1e-6);
    for (int c = 0; c < C; c++) {
      REQUIRE(std::fabs(dg1[size_t(c)] - (dg0[size_t(c)] + 2)) <= 1e-5);
      REQUIRE(std::fabs(db1[size_t(c)] - (db0[size_t(c)] - 3)) <= 1e-5);
    }
    // Only dgamma wanted: the same dgamma, nothing else touched (null must not crash).
    std::vector<float> dg2(C, 0);
    run(nullptr, dg2.data(), nullptr);
    require_near(doubles(dg2), doubles(dg0), 1e-6);
    // dbeta is sum(dy) whatever the mode.
    for (int c = 0; c < C; c++) {
      double s = 0;
      for (int m = 0; m < M; m++) s += dy[size_t(m * C + c)];
      REQUIRE(std::fabs(db0[size_t(c)] - s) <= 1e-5);
    }
  }
}

TEST_CASE("batchnorm: fp16 storage matches fp32 up to one rounding of the output") {
  const int M = 4 * 5 * 7, C = 3;
  // The input is rounded to fp16 first and both runs see those same values, so the only
  // difference left is in storage: the fp16 kernel widens x to fp32 and computes the same
  // fp32 statistics, then rounds y to fp16 once. Rounding to nearest moves a value by at
  // most half an fp16 ulp, i.e. 2^-11 relative; the small atol covers fp32 noise near 0.
  std::vector<double> x = cutrain_test::uniform({M, C}, DType::f64, 3, -2, 3).to_doubles();
  for (double& v : x) v = double(float(half_t(v)));
  const std::vector<double> gamma = {1.5, 0.5, -1}, beta = {0.1, -2, 0};
  std::vector<float> mean32, inv32, mean16, inv16;
  const std::vector<double> y32 = train_forward<float>(x, C, gamma, beta, 1e-5, &mean32, &inv32);
  const std::vector<double> y16 = train_forward<half_t>(x, C, gamma, beta, 1e-5, &mean16, &inv16);
  require_near(y16, y32, 1e-6, std::ldexp(1.0, -11));
  require_near(doubles(mean16), doubles(mean32), 1e-6);
  require_near(doubles(inv16), doubles(inv32), 1e-6);
}

TEST_CASE("batchnorm: fp16 inputs near 30000 normalise without inf or NaN") {
  // Values 29984, 30000, 30016 (fp16 numbers are 16 apart there): a sum of 64 of them
  // overflows fp16 (max 65504), and their variance (~170) is far below the fp32 spacing of
  // E[x^2] ~ 9e8. Statistics in fp32 with two passes get it right.
  const int M = 64, C = 2;
  std::vector<double> x(size_t(M * C));
  for (int m = 0; m < M; m++)
    for (int c = 0; c < C; c++) x[size_t(m * C + c)] = 30000 + 16 * ((m * 5 + c * 2) % 3 - 1);
  const std::vector<double> y = train_forward<half_t>(x, C, {1, 1}, {0, 0}, 1e-5);
  for (double v : y) REQUIRE(std::isfinite(v));
  std::vector<double> mean, var, ymean, yvar;
  channel_moments(x, C, mean, var);
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); i++)
    want[i] = (x[i] - mean[i % C]) / std::sqrt(var[i % C] + 1e-5);
  require_near(y, want, 1e-6, std::ldexp(1.0, -11));  // one fp16 rounding, as above
  channel_moments(y, C, ymean, yvar);
  require_near(ymean, {0, 0}, 1e-3);
  require_near(yvar, {1, 1}, 1e-3);

  // The input is hard: the one-pass formula E[x^2] - E[x]^2 in fp32 is off by over 10%
  // (it gives 320 and 384 here, for a true variance of 171.9).
  for (int c = 0; c < C; c++) {
    float s = 0, s2 = 0;
    for (int m = 0; m < M; m++) {
      const float v = float(x[size_t(m * C + c)]);
      s += v;
      s2 += v * v;
    }
    const float naive = s2 / M - (s / M) * (s / M);
    INFO("channel " << c << ": one-pass variance " << naive << ", true " << var[size_t(c)]);
    REQUIRE(std::fabs(naive - var[size_t(c)]) > 0.1 * var[size_t(c)]);
  }
}

TEST_CASE("batchnorm: synchronised over R parts of the batch (BatchNormSync) equals the whole "
          "batch") {
  // The batch's M rows in R parts of unequal sizes, each part's forward and backward on a
  // thread of its own whose sums meet in a ThreadSum: every part's y and dx equal the whole
  // batch's rows, the statistics and running averages equal, and the parts' dgamma and dbeta
  // add up to the whole batch's. In double: the same computation but for the order of the sums.
  using cutrain_test::BatchParts;
  const int C = 5;
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-2, 3);
  for (const BatchParts& parts : {BatchParts{{25, 25}}, BatchParts{{17, 20, 13}}}) {
    const int R = parts.count();
    INFO(R << " parts");
    const int64_t M = parts.total();
    const size_t n = size_t(M) * C;
    std::vector<double> x(n), dy(n), g(C), b(C);
    for (double& v : x) v = u(rng);
    for (double& v : dy) v = u(rng) - 0.5;
    for (double& v : g) v = 0.5 + u(rng) / 5;
    for (double& v : b) v = u(rng) / 5;
    const double eps = 1e-5, mom = 0.1;
    // The whole batch.
    std::vector<double> y(n), sm(C), si(C), rm(C, 0.2), rv(C, 1.5), dx(n, 0), dg(C, 0), db(C, 0);
    batchnorm_forward_train_cpu<double>(M, C, x.data(), g.data(), b.data(), eps, mom, false,
                                        y.data(), sm.data(), si.data(), rm.data(), rv.data());
    batchnorm_backward_train_cpu<double>(M, C, x.data(), nullptr, dy.data(), g.data(), sm.data(),
                                         si.data(), false, dx.data(), dg.data(), db.data());
    // The parts, side by side; each part's results, checked after.
    struct Part {
      std::vector<double> y, dx, sm, si, rm, rv, dg, db;
    };
    std::vector<Part> got(parts.rows.size());
    cutrain_test::ThreadSum<double> all(R);
    parts.run([&](int r) {
      const std::vector<double> xr = parts.of(x, C, r), dyr = parts.of(dy, C, r);
      const int64_t Mr = parts.rows[size_t(r)];
      Part& p = got[size_t(r)];
      p.y.assign(xr.size(), 0), p.dx.assign(xr.size(), 0);
      p.sm.assign(C, 0), p.si = p.sm, p.dg = p.sm, p.db = p.sm;
      p.rm.assign(C, 0.2), p.rv.assign(C, 1.5);
      BatchNormSync sync;
      sync.count = M;
      sync.sum = [&, r](void* v, int k) { all.sum(r, static_cast<double*>(v), k); };
      batchnorm_forward_train_cpu<double>(Mr, C, xr.data(), g.data(), b.data(), eps, mom, false,
                                          p.y.data(), p.sm.data(), p.si.data(), p.rm.data(),
                                          p.rv.data(), &sync);
      batchnorm_backward_train_cpu<double>(Mr, C, xr.data(), nullptr, dyr.data(), g.data(),
                                           p.sm.data(), p.si.data(), false, p.dx.data(),
                                           p.dg.data(), p.db.data(), &sync);
    });
    std::vector<double> dg_sum(C, 0), db_sum(C, 0);
    for (int r = 0; r < R; r++) {
      INFO("part " << r);
      const Part& p = got[size_t(r)];
      require_near(p.y, parts.of(y, C, r), 1e-13);
      require_near(p.dx, parts.of(dx, C, r), 1e-13);
      require_near(p.sm, sm, 1e-13);
      require_near(p.si, si, 1e-13);
      require_near(p.rm, rm, 1e-13);
      require_near(p.rv, rv, 1e-13);
      for (size_t c = 0; c < size_t(C); c++) dg_sum[c] += p.dg[c], db_sum[c] += p.db[c];
    }
    require_near(dg_sum, dg, 1e-12);
    require_near(db_sum, db, 1e-12);
    // One part alone (no sync) normalises with its own statistics: far from the whole batch's.
    std::vector<double> alone(size_t(parts.rows[0] * C)), am(C), ai(C), arm(C, 0.2), arv(C, 1.5);
    batchnorm_forward_train_cpu<double>(parts.rows[0], C, x.data(), g.data(), b.data(), eps, mom,
                                        false, alone.data(), am.data(), ai.data(), arm.data(),
                                        arv.data());
    double far = 0;
    for (int c = 0; c < C; c++) far = std::max(far, std::abs(am[size_t(c)] - sm[size_t(c)]));
    REQUIRE(far > 1e-3);
  }
}
