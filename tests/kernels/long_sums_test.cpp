// The long fp32 sums of the CPU kernels -- BN's batch mean and variance and its parameter
// gradients, the weight and bias gradients of conv2d and linear -- against the same kernels
// run in double, on ~10^6 terms with a large mean: where a running fp32 sum loses digits
// (kernels/blocked_sum.h). Each bound is 2 u = 2^-23 relative to sum |terms| (kLongSumBound).
//
// Measured on these inputs, relative error (to sum |terms|), before = the running sums of
// commit c3f0ac8, after = blocked pairwise:
//   BN mean            before 3.0e-5   after 3.1e-8
//   BN variance        before 3.2e-4   after 4.0e-8
//   BN dbeta           before 1.3e-5   after 3.9e-8
//   BN dgamma          before 9.6e-9   after 3.3e-10  (terms of both signs: the sum stays small)
//   conv2d dw          before 5.4e-5   after 6.5e-8
//   conv2d db          before 7.9e-6   after 6.4e-8
//   linear dw          before 4.9e-5   after 7.0e-8
//   linear db          before 5.8e-6   after 2.3e-8
// Every bound holds after and all but dgamma's fail before.
#include <cmath>
#include <vector>

#include "kernels/batchnorm.h"
#include "kernels/conv2d.h"
#include "kernels/linear.h"
#include "tests/kernels/long_sums.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::doubles;
using cutrain_test::kLongSumBound;
using cutrain_test::max_rel_error;
using cutrain_test::values;

namespace {

// BN's training forward in T over x (M,C): the batch mean, and the running variance after one
// update with momentum 1, which is the batch variance * M/(M-1).
template <typename T>
void bn_statistics(int64_t M, int C, const std::vector<T>& x, std::vector<T>& mean,
                   std::vector<T>& var) {
  const size_t Cs = static_cast<size_t>(C);
  std::vector<T> gamma(Cs, 1), beta(Cs, 0), invstd(Cs), running_mean(Cs, 0), y(x.size());
  mean.assign(Cs, 0);
  var.assign(Cs, 1);
  batchnorm_forward_train_cpu<T>(M, C, x.data(), gamma.data(), beta.data(), 1e-5, 1.0, false,
                                 y.data(), mean.data(), invstd.data(), running_mean.data(),
                                 var.data());
}

}  // namespace

TEST_CASE("long sums: BN batch mean and variance over 2^20 values of mean 100, sd 1") {
  const int64_t M = int64_t(1) << 20;
  const int C = 2;
  const std::vector<float> x = values(size_t(M) * C, 11, 100, 1);
  const std::vector<double> xd = doubles(x);
  std::vector<float> mean, var;
  std::vector<double> mean_d, var_d;
  bn_statistics<float>(M, C, x, mean, var);
  bn_statistics<double>(M, C, xd, mean_d, var_d);
  const double mean_err = max_rel_error(mean, mean_d, mean_d);
  const double var_err = max_rel_error(var, var_d, var_d);
  INFO("BN mean " << mean_err << ", variance " << var_err);
  REQUIRE(mean_err <= kLongSumBound);
  REQUIRE(var_err <= kLongSumBound);
}

TEST_CASE("long sums: BN dbeta and dgamma over 2^20 values") {
  const int64_t M = int64_t(1) << 20;
  const int C = 2;
  const std::vector<float> x = values(size_t(M) * C, 12, 100, 1);
  const std::vector<float> dy = values(size_t(M) * C, 13, 1, 0.1);
  const std::vector<double> xd = doubles(x), dyd = doubles(dy);
  const std::vector<float> mean = {100, 100}, invstd = {1, 1}, gamma = {1, 1};
  const std::vector<double> meand = {100, 100}, invstdd = {1, 1}, gammad = {1, 1};
  std::vector<float> dg(C, 0), db(C, 0);
  std::vector<double> dgd(C, 0), dbd(C, 0), scale_g(C, 0), scale_b(C, 0);
  batchnorm_backward_train_cpu<float>(M, C, x.data(), nullptr, dy.data(), gamma.data(), mean.data(),
                                      invstd.data(), false, nullptr, dg.data(), db.data());
  batchnorm_backward_train_cpu<double>(M, C, xd.data(), nullptr, dyd.data(), gammad.data(),
                                       meand.data(), invstdd.data(), false, nullptr, dgd.data(),
                                       dbd.data());
  for (size_t i = 0; i < x.size(); i++) {  // sum |terms|: dgamma's terms cancel
    scale_g[i % C] += std::fabs(dyd[i] * (xd[i] - 100));
    scale_b[i % C] += std::fabs(dyd[i]);
  }
  const double dg_err = max_rel_error(dg, dgd, scale_g), db_err = max_rel_error(db, dbd, scale_b);
  INFO("BN dgamma " << dg_err << ", dbeta " << db_err);
  REQUIRE(dg_err <= kLongSumBound);
  REQUIRE(db_err <= kLongSumBound);
}

TEST_CASE("long sums: conv2d dw and db over 2^20 pixels") {
  Conv2dShape s;  // 16 images of 256x256, one channel, 3x3 'same': each dw sums ~2^20 terms
  s.N = 16, s.H = 256, s.W = 256, s.C = 1, s.K = 2, s.R = 3, s.S = 3, s.pad_h = 1, s.pad_w = 1;
  const size_t nx = size_t(s.N) * s.H * s.W * s.C, ny = size_t(s.N) * s.P() * s.Q() * s.K;
  const size_t nw = size_t(s.K) * s.R * s.S * s.C;
  const std::vector<float> x = values(nx, 14, 100, 1), dy = values(ny, 15, 1, 0.1);
  std::vector<float> dw(nw, 0), db(size_t(s.K), 0);
  std::vector<double> dwd(nw, 0), dbd(size_t(s.K), 0);
  conv2d_backward_filter_cpu<float>(s, x.data(), dy.data(), dw.data(), db.data());
  conv2d_backward_filter_cpu<double>(s, doubles(x).data(), doubles(dy).data(), dwd.data(),
                                     dbd.data());
  // every term is positive: sum |terms| = the sum
  const double dw_err = max_rel_error(dw, dwd, dwd), db_err = max_rel_error(db, dbd, dbd);
  INFO("conv2d dw " << dw_err << ", db " << db_err);
  REQUIRE(dw_err <= kLongSumBound);
  REQUIRE(db_err <= kLongSumBound);
}

TEST_CASE("long sums: linear dw and db over a batch of 2^20") {
  const int N = 1 << 20, C = 3, K = 2;
  const std::vector<float> x = values(size_t(N) * C, 16, 100, 1);
  const std::vector<float> dy = values(size_t(N) * K, 17, 1, 0.1);
  const std::vector<float> w(size_t(K) * C, 0);
  std::vector<float> dw(size_t(K) * C, 0), db(K, 0);
  std::vector<double> dwd(size_t(K) * C, 0), dbd(K, 0);
  linear_backward_cpu<float>(N, C, K, x.data(), w.data(), dy.data(), nullptr, dw.data(),
                             db.data());
  linear_backward_cpu<double>(N, C, K, doubles(x).data(), doubles(w).data(),
                              doubles(dy).data(), nullptr, dwd.data(), dbd.data());
  const double dw_err = max_rel_error(dw, dwd, dwd), db_err = max_rel_error(db, dbd, dbd);
  INFO("linear dw " << dw_err << ", db " << db_err);
  REQUIRE(dw_err <= kLongSumBound);
  REQUIRE(db_err <= kLongSumBound);
}
