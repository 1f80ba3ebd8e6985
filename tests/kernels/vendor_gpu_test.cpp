// cuDNN and cuBLAS (kernels/vendor.h) against the CPU references, in f32 and f16, on odd
// shapes: stride 2, padding, rectangular filters, sizes that are multiples of nothing.
// Forward outputs are poisoned (0xff bytes: NaN in f32 and f16) so a library that read them
// instead of writing (beta = 0) fails; backward targets are prefilled with random values and
// the CPU reference accumulates onto the same prefill (beta = 1 is +=). Skipped without a GPU;
// the cuDNN cases also skip, saying why, in a build without cuDNN.
#include <cmath>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/batchnorm.h"
#include "kernels/conv2d.h"
#include "kernels/linear.h"
#include "kernels/rng.h"
#include "kernels/vendor.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::doubles;
using cutrain_test::require_near;

namespace {

template <typename T>
std::vector<T> random_values(size_t n, uint64_t seed, float lo = -1, float hi = 1) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; i++) v[i] = T(lo + (hi - lo) * rng_uniform(seed, i));
  return v;
}

// Uploads and downloads ordered on the test's stream (the library calls run on it too).
template <typename T> DeviceBuffer upload(const std::vector<T>& v, const Stream& s) {
  DeviceBuffer d(v.size() * sizeof(T), 0, s.get());
  copy_async(d.data(), v.data(), v.size() * sizeof(T), s.get());
  return d;
}
template <typename T> std::vector<T> download(const DeviceBuffer& d, size_t n, const Stream& s) {
  std::vector<T> v(n);
  copy_async(v.data(), d.data(), n * sizeof(T), s.get());
  s.synchronize();
  return v;
}
template <typename T> DeviceBuffer poisoned(size_t n, const Stream& s) {
  DeviceBuffer d(n * sizeof(T), 0, s.get());
  memset_async(d.data(), 0xff, n * sizeof(T), s.get());  // NaN in f32 and f16
  return d;
}
template <typename T> T* ptr(const DeviceBuffer& d) { return static_cast<T*>(d.data()); }

void require_finite(const std::vector<double>& v) {
  for (size_t i = 0; i < v.size(); i++) {
    INFO("element " << i << " = " << v[i]);
    REQUIRE(std::isfinite(v[i]));
  }
}

// Tolerances for the matrix products (conv2d, linear), |got - want| <= atol + rtol * |want|.
//  f32: both sides sum the same fp32 products, in different orders (and cuDNN may use Winograd
//       or FFT, whose transforms round too). For n <= ~250 products of values in [-1, 1] the
//       order moves a sum by ~sqrt(n) * 2^-24 * |terms| ~ 1e-6 typically; 5e-4 leaves room for
//       the transforms and is still far below a wrong or missing term (~0.1 .. 1) or TF32
//       (10-bit mantissa: ~2e-3 on these sums, which the tolerance would catch).
//  f16: both are fp32 sums rounded to half once (cuDNN's separate bias add, or its fp16
//       workspace in some algorithms, a second time): a few ulp, 2^-11 relative each, so
//       rtol 4e-3; atol covers sums near 0, where an ulp is small but the fp32 noise is not.
struct Tol {
  double atol, rtol;
};
template <typename T> Tol matmul_tol() {
  return std::is_same<T, half_t>::value ? Tol{1e-2, 4e-3} : Tol{5e-4, 1e-4};
}

// ---- conv2d through cuDNN ----

// Conv2dShape{N, H, W, C, K, R, S, stride_h, stride_w, pad_h, pad_w}
const Conv2dShape kConvShapes[] = {
    {3, 11, 9, 5, 7, 3, 2, 2, 1, 1, 0},   // stride 2x1, pad 1x0, 3x2 filter
    {5, 7, 13, 3, 6, 5, 3, 1, 2, 2, 1},   // 5x3 filter, stride 1x2, C = 3 (a first layer)
    {7, 10, 9, 24, 40, 3, 3, 2, 2, 1, 1}, // channels a multiple of 8: tensor-core algorithms
    {2, 6, 5, 16, 8, 1, 1, 1, 1, 0, 0},   // 1x1: a plain GEMM
};

// x, w and dy are drawn uniformly from [-r, r) with these r.
struct Ranges {
  float x = 1, w = 1, dy = 1;
};

template <typename T>
void check_conv_cudnn(const Conv2dShape& s, uint64_t seed, Ranges r = {},
                      Tol tol = matmul_tol<T>()) {
  INFO("N=" << s.N << " H=" << s.H << " W=" << s.W << " C=" << s.C << " K=" << s.K
            << " R=" << s.R << " S=" << s.S << " stride " << s.stride_h << "x" << s.stride_w
            << " pad " << s.pad_h << "x" << s.pad_w);
  const size_t nx = size_t(s.N) * s.H * s.W * s.C, nw = size_t(s.K) * s.R * s.S * s.C,
               ny = size_t(s.N) * s.P() * s.Q() * s.K, nb = size_t(s.K);
  const std::vector<T> x = random_values<T>(nx, seed, -r.x, r.x),
                       w = random_values<T>(nw, seed + 1, -r.w, r.w),
                       b = random_values<T>(nb, seed + 2),
                       dy = random_values<T>(ny, seed + 3, -r.dy, r.dy),
                       dx0 = random_values<T>(nx, seed + 4), dw0 = random_values<T>(nw, seed + 5),
                       db0 = random_values<T>(nb, seed + 6);
  std::vector<T> y_ref(ny), y_nobias_ref(ny), dx_ref = dx0, dw_ref = dw0, db_ref = db0;
  conv2d_forward_cpu(s, x.data(), w.data(), b.data(), y_ref.data());
  conv2d_forward_cpu<T>(s, x.data(), w.data(), nullptr, y_nobias_ref.data());
  conv2d_backward_data_cpu(s, dy.data(), w.data(), dx_ref.data());
  conv2d_backward_filter_cpu(s, x.data(), dy.data(), dw_ref.data(), db_ref.data());

  Stream st;
  const DeviceBuffer xd = upload(x, st), wd = upload(w, st), bd = upload(b, st),
                     dyd = upload(dy, st), dxd = upload(dx0, st), dwd = upload(dw0, st),
                     dbd = upload(db0, st);
  const DeviceBuffer yd = poisoned<T>(ny, st), y2d = poisoned<T>(ny, st);
  conv2d_forward_cudnn(s, ptr<T>(xd), ptr<T>(wd), ptr<T>(bd), ptr<T>(yd), st.get());
  conv2d_forward_cudnn<T>(s, ptr<T>(xd), ptr<T>(wd), nullptr, ptr<T>(y2d), st.get());
  conv2d_backward_data_cudnn(s, ptr<T>(dyd), ptr<T>(wd), ptr<T>(dxd), st.get());
  conv2d_backward_filter_cudnn(s, ptr<T>(xd), ptr<T>(dyd), ptr<T>(dwd), ptr<T>(dbd), st.get());

  const std::vector<double> y = doubles(download<T>(yd, ny, st)),
                            dx = doubles(download<T>(dxd, nx, st)),
                            dw = doubles(download<T>(dwd, nw, st));
  for (const std::vector<double>* v : {&y, &dx, &dw}) require_finite(*v);
  require_near(y, doubles(y_ref), tol.atol, tol.rtol);
  require_near(doubles(download<T>(y2d, ny, st)), doubles(y_nobias_ref), tol.atol, tol.rtol);
  require_near(dx, doubles(dx_ref), tol.atol, tol.rtol);
  require_near(dw, doubles(dw_ref), tol.atol, tol.rtol);
  require_near(doubles(download<T>(dbd, nb, st)), doubles(db_ref), tol.atol, tol.rtol);
}

}  // namespace

TEST_CASE_TEMPLATE("vendor [gpu]: cuDNN conv2d forward, backward-data, backward-filter match "
                   "the CPU", T, float, half_t) {
  REQUIRE_CUDNN();
  uint64_t seed = 100;
  for (const Conv2dShape& s : kConvShapes) {
    check_conv_cudnn<T>(s, seed);
    seed += 10;
  }
  // The same shape again: the remembered algorithm, a fresh workspace, the same results.
  check_conv_cudnn<T>(kConvShapes[0], 500);
}

TEST_CASE("vendor [gpu]: cuDNN conv2d f16 near the fp16 limits stays finite") {
  REQUIRE_CUDNN();
  const Conv2dShape s{3, 9, 7, 6, 5, 3, 3, 2, 1, 1, 1};
  // Large: |x| up to 65504 (the largest half); |w|, |dy| < 1e-3 keep every true result finite
  // in fp16 (y: 54 terms, < ~3600; dw: 105 terms, < ~7000), which the GPU's must be too.
  check_conv_cudnn<half_t>(s, 900, Ranges{65504, 1e-3f, 1e-3f});
  // Tiny: |x| < 4e-6, fp16 subnormals (below 2^-14, in steps of 2^-24 ~ 6e-8); y ~ 1e-5 is
  // rounded in steps of ~1e-8 .. 6e-8 on both sides: atol a few of those.
  check_conv_cudnn<half_t>(s, 910, Ranges{4e-6f, 1, 1}, Tol{5e-7, 4e-3});
}

// ---- batchnorm through cuDNN ----

namespace {

// Per-channel fp32 values (statistics, dgamma, dbeta): both sides sum the same fp32 values in
// different orders over M <= ~70,000 values, ~sqrt(M) * 2^-24 relative (2e-5 at most): rtol
// 1e-4 with room.
// y and dx are stored as T: f32 as above; f16 rounds once on each side, 2^-11 relative.
template <typename T> Tol bn_tol() {
  return std::is_same<T, half_t>::value ? Tol{4e-3, 2e-3} : Tol{1e-4, 1e-4};
}
constexpr Tol kStatTol{1e-5, 1e-4};
constexpr Tol kParamGradTol{1e-3, 1e-4};

template <typename T>
void check_bn_cudnn(int64_t M, int C, uint64_t seed, float xlo, float xhi) {
  INFO("M=" << M << " C=" << C << " x in [" << xlo << ", " << xhi << ")");
  const size_t n = size_t(M) * size_t(C), nc = size_t(C);
  const double eps = 1e-5, momentum = 0.1;
  const std::vector<T> x = random_values<T>(n, seed, xlo, xhi),
                       dy = random_values<T>(n, seed + 1), dx0 = random_values<T>(n, seed + 2);
  const std::vector<float> gamma = random_values<float>(nc, seed + 3, 0.5f, 1.5f),
                           beta = random_values<float>(nc, seed + 4, -0.5f, 0.5f),
                           rmean0 = random_values<float>(nc, seed + 5),
                           rvar0 = random_values<float>(nc, seed + 6, 0.5f, 2.0f),
                           dgamma0 = random_values<float>(nc, seed + 7),
                           dbeta0 = random_values<float>(nc, seed + 8);
  // CPU reference: train forward, eval forward (with the running statistics before the
  // update), train backward on the saved statistics.
  std::vector<T> y_ref(n), ye_ref(n), dx_ref = dx0;
  std::vector<float> mean_ref(nc), invstd_ref(nc), rmean_ref = rmean0, rvar_ref = rvar0,
                     dgamma_ref = dgamma0, dbeta_ref = dbeta0;
  batchnorm_forward_train_cpu(M, C, x.data(), gamma.data(), beta.data(), eps, momentum, false,
                              y_ref.data(), mean_ref.data(), invstd_ref.data(), rmean_ref.data(),
                              rvar_ref.data());
  batchnorm_forward_eval_cpu(M, C, x.data(), gamma.data(), beta.data(), rmean0.data(),
                             rvar0.data(), eps, false, ye_ref.data());
  batchnorm_backward_train_cpu<T>(M, C, x.data(), nullptr, dy.data(), gamma.data(),
                                  mean_ref.data(), invstd_ref.data(), false, dx_ref.data(),
                                  dgamma_ref.data(), dbeta_ref.data());

  Stream st;
  const DeviceBuffer xd = upload(x, st), dyd = upload(dy, st), dxd = upload(dx0, st),
                     gd = upload(gamma, st), bd = upload(beta, st), rmd = upload(rmean0, st),
                     rvd = upload(rvar0, st), rm0d = upload(rmean0, st), rv0d = upload(rvar0, st),
                     dgd = upload(dgamma0, st), dbd = upload(dbeta0, st),
                     // the backward gets the CPU's saved statistics: it is tested on its own
                     smd = upload(mean_ref, st), sid = upload(invstd_ref, st);
  const DeviceBuffer yd = poisoned<T>(n, st), yed = poisoned<T>(n, st),
                     meand = poisoned<float>(nc, st), invstdd = poisoned<float>(nc, st);
  batchnorm_forward_train_cudnn(M, C, ptr<T>(xd), ptr<float>(gd), ptr<float>(bd), eps, momentum,
                                ptr<T>(yd), ptr<float>(meand), ptr<float>(invstdd),
                                ptr<float>(rmd), ptr<float>(rvd), st.get());
  batchnorm_forward_eval_cudnn(M, C, ptr<T>(xd), ptr<float>(gd), ptr<float>(bd),
                               ptr<float>(rm0d), ptr<float>(rv0d), eps, ptr<T>(yed), st.get());
  batchnorm_backward_train_cudnn(M, C, ptr<T>(xd), ptr<T>(dyd), ptr<float>(gd), ptr<float>(smd),
                                 ptr<float>(sid), eps, ptr<T>(dxd), ptr<float>(dgd),
                                 ptr<float>(dbd), st.get());

  const Tol t = bn_tol<T>();
  const std::vector<double> y = doubles(download<T>(yd, n, st));
  require_finite(y);
  require_near(y, doubles(y_ref), t.atol, t.rtol);
  require_near(doubles(download<T>(yed, n, st)), doubles(ye_ref), t.atol, t.rtol);
  require_near(doubles(download<float>(meand, nc, st)), doubles(mean_ref),
               kStatTol.atol * (1 + std::fabs(xhi)), kStatTol.rtol);
  // save_invstd is 1/sqrt(biased var + eps), running_var takes the unbiased var * M/(M-1):
  // cuDNN's convention must be cutrain's (kernels/cudnn_batchnorm.cpp).
  require_near(doubles(download<float>(invstdd, nc, st)), doubles(invstd_ref), 0, kStatTol.rtol);
  require_near(doubles(download<float>(rmd, nc, st)), doubles(rmean_ref),
               kStatTol.atol * (1 + std::fabs(xhi)), kStatTol.rtol);
  require_near(doubles(download<float>(rvd, nc, st)), doubles(rvar_ref), 0, kStatTol.rtol);
  const std::vector<double> dx = doubles(download<T>(dxd, n, st));
  require_finite(dx);
  require_near(dx, doubles(dx_ref), t.atol, t.rtol);
  require_near(doubles(download<float>(dgd, nc, st)), doubles(dgamma_ref), kParamGradTol.atol,
               kParamGradTol.rtol);
  require_near(doubles(download<float>(dbd, nc, st)), doubles(dbeta_ref), kParamGradTol.atol,
               kParamGradTol.rtol);
}

}  // namespace

TEST_CASE_TEMPLATE("vendor [gpu]: cuDNN batchnorm train, eval and backward match the CPU, "
                   "running statistics included", T, float, half_t) {
  REQUIRE_CUDNN();
  check_bn_cudnn<T>(105, 6, 10, -1, 3);        // M = 3*5*7: a small odd batch, mean 1
  check_bn_cudnn<T>(3 * 17 * 19, 13, 20, -2, 2);
  check_bn_cudnn<T>(2 * 9 * 11, 64, 30, 0, 4);  // C a multiple of 8: the vectorised NHWC path
  check_bn_cudnn<T>(4099, 37, 40, -1, 1);
  check_bn_cudnn<T>(70001, 3, 50, -1, 1);  // M past cuDNN's limits on a batch dimension
}

TEST_CASE("vendor [gpu]: cuDNN batchnorm f16 near the fp16 limits stays finite") {
  REQUIRE_CUDNN();
  // |x| up to 65504: sums of squares ~1e12 are fine in fp32, y is normalised back to ~1.
  check_bn_cudnn<half_t>(2 * 7 * 9, 5, 50, -65504, 65504);
}

// ---- linear and GEMM through cuBLAS ----

namespace {

template <typename T> void check_linear_cublas(int N, int C, int K, uint64_t seed) {
  INFO("N=" << N << " C=" << C << " K=" << K);
  const size_t nx = size_t(N) * C, nw = size_t(K) * C, ny = size_t(N) * K, nb = size_t(K);
  const std::vector<T> x = random_values<T>(nx, seed), w = random_values<T>(nw, seed + 1),
                       b = random_values<T>(nb, seed + 2), dy = random_values<T>(ny, seed + 3),
                       dx0 = random_values<T>(nx, seed + 4), dw0 = random_values<T>(nw, seed + 5),
                       db0 = random_values<T>(nb, seed + 6);
  std::vector<T> y_ref(ny), y_nobias_ref(ny), dx_ref = dx0, dw_ref = dw0, db_ref = db0,
                            dw_only_ref = dw0;
  linear_forward_cpu(N, C, K, x.data(), w.data(), b.data(), y_ref.data());
  linear_forward_cpu<T>(N, C, K, x.data(), w.data(), nullptr, y_nobias_ref.data());
  linear_backward_cpu(N, C, K, x.data(), w.data(), dy.data(), dx_ref.data(), dw_ref.data(),
                      db_ref.data());
  linear_backward_cpu<T>(N, C, K, x.data(), w.data(), dy.data(), nullptr, dw_only_ref.data(),
                         nullptr);

  Stream st;
  const DeviceBuffer xd = upload(x, st), wd = upload(w, st), bd = upload(b, st),
                     dyd = upload(dy, st), dxd = upload(dx0, st), dwd = upload(dw0, st),
                     dbd = upload(db0, st), dw2d = upload(dw0, st);
  const DeviceBuffer yd = poisoned<T>(ny, st), y2d = poisoned<T>(ny, st);
  linear_forward_cublas(N, C, K, ptr<T>(xd), ptr<T>(wd), ptr<T>(bd), ptr<T>(yd), st.get());
  linear_forward_cublas<T>(N, C, K, ptr<T>(xd), ptr<T>(wd), nullptr, ptr<T>(y2d), st.get());
  linear_backward_cublas(N, C, K, ptr<T>(xd), ptr<T>(wd), ptr<T>(dyd), ptr<T>(dxd), ptr<T>(dwd),
                         ptr<T>(dbd), st.get());
  linear_backward_cublas<T>(N, C, K, ptr<T>(xd), ptr<T>(wd), ptr<T>(dyd), nullptr, ptr<T>(dw2d),
                            nullptr, st.get());

  const Tol t = matmul_tol<T>();
  require_near(doubles(download<T>(yd, ny, st)), doubles(y_ref), t.atol, t.rtol);
  require_near(doubles(download<T>(y2d, ny, st)), doubles(y_nobias_ref), t.atol, t.rtol);
  require_near(doubles(download<T>(dxd, nx, st)), doubles(dx_ref), t.atol, t.rtol);
  require_near(doubles(download<T>(dwd, nw, st)), doubles(dw_ref), t.atol, t.rtol);
  require_near(doubles(download<T>(dbd, nb, st)), doubles(db_ref), t.atol, t.rtol);
  require_near(doubles(download<T>(dw2d, nw, st)), doubles(dw_only_ref), t.atol, t.rtol);
}

}  // namespace

TEST_CASE_TEMPLATE("vendor [gpu]: cuBLAS linear forward and backward match the CPU", T, float,
                   half_t) {
  REQUIRE_GPU();
  check_linear_cublas<T>(37, 53, 29, 200);
  check_linear_cublas<T>(130, 200, 70, 210);
  check_linear_cublas<T>(1, 7, 3, 220);      // one sample
  check_linear_cublas<T>(1500, 9, 10, 230);  // N past 1024: the ones vector grows
}

TEST_CASE("vendor [gpu]: cuBLAS f16 GEMM matches a double-precision product") {
  REQUIRE_GPU();
  const int M = 65, N = 47, K = 91;
  const std::vector<half_t> A = random_values<half_t>(size_t(M) * K, 300),
                            B = random_values<half_t>(size_t(K) * N, 301);
  std::vector<double> want(size_t(M) * N);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double acc = 0;
      for (int k = 0; k < K; k++) acc += double(A[size_t(i) * K + k]) * double(B[size_t(k) * N + j]);
      want[size_t(i) * N + j] = double(float(half_t(acc)));  // rounded to half, as stored
    }
  Stream st;
  const DeviceBuffer Ad = upload(A, st), Bd = upload(B, st), Cd = poisoned<half_t>(want.size(), st);
  gemm_f16_cublas(M, N, K, ptr<half_t>(Ad), ptr<half_t>(Bd), ptr<half_t>(Cd), st.get());
  const Tol t = matmul_tol<half_t>();
  require_near(doubles(download<half_t>(Cd, want.size(), st)), want, t.atol, t.rtol);
}

TEST_CASE("vendor [gpu]: library handles are per thread: two threads, two streams, one answer") {
  REQUIRE_GPU();
  const int N = 33, C = 45, K = 27;
  const std::vector<half_t> x = random_values<half_t>(size_t(N) * C, 400),
                            w = random_values<half_t>(size_t(K) * C, 401);
  std::vector<half_t> want(size_t(N) * K);
  linear_forward_cpu<half_t>(N, C, K, x.data(), w.data(), nullptr, want.data());
  std::vector<std::vector<half_t>> got(2);
  auto run = [&](int t) {
    Stream st;
    const DeviceBuffer xd = upload(x, st), wd = upload(w, st), yd = poisoned<half_t>(want.size(), st);
    for (int rep = 0; rep < 20; rep++)
      linear_forward_cublas<half_t>(N, C, K, ptr<half_t>(xd), ptr<half_t>(wd), nullptr,
                                    ptr<half_t>(yd), st.get());
    got[size_t(t)] = download<half_t>(yd, want.size(), st);
  };
  std::thread a(run, 0), b(run, 1);
  a.join();
  b.join();
  const Tol t = matmul_tol<half_t>();
  for (int i = 0; i < 2; i++) require_near(doubles(got[size_t(i)]), doubles(want), t.atol, t.rtol);
}
