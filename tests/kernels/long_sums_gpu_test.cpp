// The long fp32 sums of the GPU kernels against the CPU kernels run in double, on the inputs
// of long_sums_test.cpp (~10^6 terms with a large mean): BN's statistics and dgamma/dbeta, the
// bias gradient, and the weight gradients of the direct conv2d and linear kernels, all in f32
// (the tc path is f16 in and out: its one rounding to half, 2^-11, hides these errors).
//
// The GPU sums blocked pairwise too (kernels/blocked_sum.h), but in its own order: per thread,
// then across a block's lanes and the partials pairwise. The bound is twice the CPU test's,
// 4 u relative to sum |terms|. Not yet run on a GPU when written (2026-11-26); the same
// additions emulated on the host in float gave, relative error before -> after: BN's channel
// sum 1.1e-6 -> 4.5e-8 (batchnorm.cu's grid), linear dw 4.9e-5 -> 7.0e-8 (one thread's sum).
#include <cmath>
#include <vector>

#include "kernels/batchnorm.h"
#include "kernels/conv2d.h"
#include "kernels/linear.h"
#include "tests/kernels/gpu_compare.h"
#include "tests/kernels/long_sums.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

constexpr double kGpuBound = 2 * kLongSumBound;

std::vector<double> sum_abs_per_column(const std::vector<double>& v, size_t cols) {
  std::vector<double> s(cols, 0);
  for (size_t i = 0; i < v.size(); i++) s[i % cols] += std::fabs(v[i]);
  return s;
}

}  // namespace

TEST_CASE("long sums [gpu]: BN batch mean, variance, dgamma and dbeta over 2^20 values") {
  REQUIRE_GPU();
  const int64_t M = int64_t(1) << 20;
  const int C = 2;
  const size_t Cs = C, n = size_t(M) * Cs;
  const std::vector<float> x = values(n, 11, 100, 1), dy = values(n, 13, 1, 0.1);
  const std::vector<float> gamma(Cs, 1), beta(Cs, 0), zeros(Cs, 0), ones(Cs, 1);
  // The reference: the CPU kernels in double; momentum 1, so the running statistics are the
  // batch's mean and its variance * M/(M-1).
  const std::vector<double> xd = doubles(x), dyd = doubles(dy), gd(Cs, 1), bd(Cs, 0);
  std::vector<double> yd(n), mean_d(Cs), invstd_d(Cs), rm_d(Cs, 0), var_d(Cs, 1);
  batchnorm_forward_train_cpu<double>(M, C, xd.data(), gd.data(), bd.data(), 1e-5, 1.0, false,
                                      yd.data(), mean_d.data(), invstd_d.data(), rm_d.data(),
                                      var_d.data());
  // the backward with the saved statistics rounded to float, as the GPU gets them
  const std::vector<double> mean_f = doubles(std::vector<float>(mean_d.begin(), mean_d.end()));
  const std::vector<double> invstd_f =
      doubles(std::vector<float>(invstd_d.begin(), invstd_d.end()));
  std::vector<double> dg_d(Cs, 0), db_d(Cs, 0), dgamma_terms(n);
  batchnorm_backward_train_cpu<double>(M, C, xd.data(), nullptr, dyd.data(), gd.data(),
                                       mean_f.data(), invstd_f.data(), false, nullptr, dg_d.data(),
                                       db_d.data());
  for (size_t i = 0; i < n; i++)
    dgamma_terms[i] = dyd[i] * (xd[i] - mean_f[i % Cs]) * invstd_f[i % Cs];

  Stream st;
  DeviceBuffer d_x = upload(x), d_dy = upload(dy), d_g = upload(gamma), d_b = upload(beta);
  DeviceBuffer d_rm = upload(zeros), d_rv = upload(ones);
  DeviceBuffer d_dg = upload(zeros), d_db = upload(zeros);
  DeviceBuffer d_y = poisoned<float>(n, st.get()), d_mean = poisoned<float>(Cs, st.get());
  DeviceBuffer d_invstd = poisoned<float>(Cs, st.get());
  batchnorm_forward_train_gpu<float>(M, C, ptr<float>(d_x), ptr<float>(d_g), ptr<float>(d_b),
                                     1e-5, 1.0, false, ptr<float>(d_y), ptr<float>(d_mean),
                                     ptr<float>(d_invstd), ptr<float>(d_rm), ptr<float>(d_rv),
                                     st.get());
  DeviceBuffer d_mean_f = upload(std::vector<float>(mean_d.begin(), mean_d.end()));
  DeviceBuffer d_invstd_f = upload(std::vector<float>(invstd_d.begin(), invstd_d.end()));
  batchnorm_backward_train_gpu<float>(M, C, ptr<float>(d_x), nullptr, ptr<float>(d_dy),
                                      ptr<float>(d_g), ptr<float>(d_mean_f),
                                      ptr<float>(d_invstd_f), false, nullptr, ptr<float>(d_dg),
                                      ptr<float>(d_db), st.get());
  st.synchronize();
  const double mean_err = max_rel_error(download<float>(d_mean, Cs), mean_d, mean_d);
  const double var_err = max_rel_error(download<float>(d_rv, Cs), var_d, var_d);
  const double dg_err =
      max_rel_error(download<float>(d_dg, Cs), dg_d, sum_abs_per_column(dgamma_terms, Cs));
  const double db_err = max_rel_error(download<float>(d_db, Cs), db_d, sum_abs_per_column(dyd, Cs));
  INFO("relative errors: mean " << mean_err << ", variance " << var_err << ", dgamma "
                                << dg_err << ", dbeta " << db_err);
  REQUIRE(mean_err <= kGpuBound);
  REQUIRE(var_err <= kGpuBound);
  REQUIRE(dg_err <= kGpuBound);
  REQUIRE(db_err <= kGpuBound);
}

TEST_CASE("long sums [gpu]: direct conv2d dw and db over 2^20 pixels") {
  REQUIRE_GPU();
  Conv2dShape s;  // as long_sums_test.cpp: each dw element sums ~2^20 terms
  s.N = 16, s.H = 256, s.W = 256, s.C = 1, s.K = 2, s.R = 3, s.S = 3, s.pad_h = 1, s.pad_w = 1;
  const size_t nx = size_t(s.N) * s.H * s.W * s.C, ny = size_t(s.N) * s.P() * s.Q() * s.K;
  const size_t nw = size_t(s.K) * s.R * s.S * s.C, K = size_t(s.K);
  const std::vector<float> x = values(nx, 14, 100, 1), dy = values(ny, 15, 1, 0.1);
  std::vector<double> dwd(nw, 0), dbd(K, 0);
  conv2d_backward_filter_cpu<double>(s, doubles(x).data(), doubles(dy).data(), dwd.data(),
                                     dbd.data());
  Stream st;
  DeviceBuffer d_x = upload(x), d_dy = upload(dy);
  DeviceBuffer d_dw = upload(std::vector<float>(nw, 0)), d_db = upload(std::vector<float>(K, 0));
  conv2d_backward_filter_direct_gpu<float>(s, ptr<float>(d_x), ptr<float>(d_dy), ptr<float>(d_dw),
                                           ptr<float>(d_db), st.get());
  st.synchronize();
  // every term is positive: sum |terms| = the sum
  const double dw_err = max_rel_error(download<float>(d_dw, nw), dwd, dwd);
  const double db_err = max_rel_error(download<float>(d_db, K), dbd, dbd);
  INFO("relative errors: dw " << dw_err << ", db " << db_err);
  REQUIRE(dw_err <= kGpuBound);
  REQUIRE(db_err <= kGpuBound);
}

TEST_CASE("long sums [gpu]: direct linear dw and db over a batch of 2^20") {
  REQUIRE_GPU();
  const int N = 1 << 20, C = 3, K = 2;
  const std::vector<float> x = values(size_t(N) * C, 16, 100, 1);
  const std::vector<float> dy = values(size_t(N) * K, 17, 1, 0.1);
  const std::vector<float> w(size_t(K) * C, 0);
  std::vector<double> dwd(size_t(K) * C, 0), dbd(K, 0);
  linear_backward_cpu<double>(N, C, K, doubles(x).data(), doubles(w).data(), doubles(dy).data(),
                              nullptr, dwd.data(), dbd.data());
  Stream st;
  DeviceBuffer d_x = upload(x), d_w = upload(w), d_dy = upload(dy);
  DeviceBuffer d_dw = upload(std::vector<float>(size_t(K) * C, 0));
  DeviceBuffer d_db = upload(std::vector<float>(K, 0));
  linear_backward_direct_gpu<float>(N, C, K, ptr<float>(d_x), ptr<float>(d_w), ptr<float>(d_dy),
                                    nullptr, ptr<float>(d_dw), ptr<float>(d_db), st.get());
  st.synchronize();
  const double dw_err = max_rel_error(download<float>(d_dw, size_t(K) * C), dwd, dwd);
  const double db_err = max_rel_error(download<float>(d_db, size_t(K)), dbd, dbd);
  INFO("relative errors: dw " << dw_err << ", db " << db_err);
  REQUIRE(dw_err <= kGpuBound);
  REQUIRE(db_err <= kGpuBound);
}
