// softmax cross-entropy with label smoothing, CPU reference: closed forms, stability with
// huge logits, the gradient's row sums, top-1 ties, bad labels; class weights against a
// double-precision reference written here.
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/softmax_xent.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::doubles;
using cutrain_test::require_equal;
using cutrain_test::require_near;
using cutrain_test::to;

namespace {

// Tolerance of a value stored in T (gradients) and of one kept in acc_t<T> (the loss). The
// gradients are compared with atol = rtol = tol: |got-want| <= tol*(1 + |want|).
template <typename T> double stored_tol() { return 2e-6; }
template <> double stored_tol<double>() { return 1e-13; }
template <> double stored_tol<half_t>() { return 1e-3; }
template <typename T> double acc_tol() { return std::is_same<T, double>::value ? 1e-13 : 2e-6; }

}  // namespace

TEST_CASE_TEMPLATE("softmax_xent: equal logits give loss log K, whatever the smoothing", T,
                   float, double, half_t) {
  using A = acc_t<T>;
  const int N = 3, K = 10;
  const std::vector<T> z(N * K, T(3.75));
  const std::vector<int32_t> labels = {0, 9, 4};
  for (double eps : {0.0, 0.1}) {
    INFO("smoothing " << eps);
    A loss = -1;
    softmax_xent_forward_cpu<T>(N, K, z.data(), labels.data(), A(eps), &loss);
    REQUIRE(std::fabs(double(loss) - std::log(10.0)) <= acc_tol<T>());
    // p = 1/K everywhere, so p - q = (1 - eps) (1/K - onehot), divided by N
    std::vector<T> dz(N * K, T(0.0));
    softmax_xent_backward_cpu<T>(N, K, z.data(), labels.data(), A(eps), A(1), dz.data());
    std::vector<double> want;
    for (int n = 0; n < N; n++)
      for (int k = 0; k < K; k++) want.push_back((1 - eps) * (0.1 - (k == labels[n])) / N);
    require_near(doubles(dz), want, stored_tol<T>(), stored_tol<T>());
  }
}

TEST_CASE_TEMPLATE("softmax_xent: two classes against the closed form", T, float, double,
                   half_t) {
  // Two classes, logits (a, b), d = b - a: p = (1, e^d) / (1 + e^d), so
  //   -log p0 = softplus(d) = log(1 + e^d),   -log p1 = softplus(d) - d.
  // With smoothing eps, q = (1 - eps/2, eps/2) for label 0, and the row's loss is
  //   (1 - eps/2) softplus(d) + (eps/2) (softplus(d) - d) = softplus(d) - (eps/2) d.
  // Row 0: logits (0, ln 3), label 0: d = ln 3, softplus = ln 4, p = (1/4, 3/4).
  // Row 1: logits (0, 0), label 1: p = (1/2, 1/2), loss ln 2 whatever eps.
  // loss = (ln 4 - (eps/2) ln 3 + ln 2) / 2; dz = (p - q) / 2.
  using A = acc_t<T>;
  const std::vector<T> z = to<T>({0, std::log(3.0), 0, 0});
  const double d = double(A(z[1]));  // ln 3 as stored in T, so only the arithmetic is tested
  const double p1 = std::exp(d) / (1 + std::exp(d));
  const std::vector<int32_t> labels = {0, 1};
  for (double eps : {0.0, 0.2}) {
    INFO("smoothing " << eps);
    A loss = -1;
    softmax_xent_forward_cpu<T>(2, 2, z.data(), labels.data(), A(eps), &loss);
    const double want = (std::log1p(std::exp(d)) - eps / 2 * d + std::log(2.0)) / 2;
    REQUIRE(std::fabs(double(loss) - want) <= acc_tol<T>());
    std::vector<T> dz(4, T(0.0));
    softmax_xent_backward_cpu<T>(2, 2, z.data(), labels.data(), A(eps), A(1), dz.data());
    const double q0 = 1 - eps / 2;
    require_near(doubles(dz), {(1 - p1 - q0) / 2, (p1 - (1 - q0)) / 2,  // row 0
                               (0.5 - (1 - q0)) / 2, (0.5 - q0) / 2},   // row 1
                 stored_tol<T>(), stored_tol<T>());
  }
  if (std::is_same<T, double>::value) {  // the numbers themselves, for the reader
    A loss = -1;
    softmax_xent_forward_cpu<T>(2, 2, z.data(), labels.data(), A(0), &loss);
    REQUIRE(std::fabs(double(loss) - 1.5 * std::log(2.0)) < 1e-15);
  }
}

TEST_CASE("softmax_xent: logits of 1e4 in f32 give the exact finite loss and gradient") {
  // exp(1e4) overflows float; subtracting the row max keeps every exp in [0, 1].
  const std::vector<float> z = {1e4f, 0, -1e4f,  //
                                1e4f, 0, -1e4f};
  const std::vector<int32_t> labels = {0, 1};
  float loss = -1;
  softmax_xent_forward_cpu<float>(2, 3, z.data(), labels.data(), 0.f, &loss);
  REQUIRE(loss == 5000.f);  // row 0: log 1 + 0 = 0; row 1: 0 + (1e4 - 0) = 1e4
  std::vector<float> dz(6, 0.f);
  softmax_xent_backward_cpu<float>(2, 3, z.data(), labels.data(), 0.f, 1.f, dz.data());
  REQUIRE(dz == std::vector<float>{0, 0, 0, 0.5f, -0.5f, 0});  // p = (1,0,0) exactly
  // with smoothing 0.1: each row adds (0.1/3) * sum_k (m - z_k) = (0.1/3) * 3e4 = 1000, and the
  // label's term is scaled by 0.9: (0 + 1000 + 9000 + 1000) / 2
  softmax_xent_forward_cpu<float>(2, 3, z.data(), labels.data(), 0.1f, &loss);
  REQUIRE(std::fabs(loss - 5500.f) <= 5500.f * 1e-6f);
}

TEST_CASE("softmax_xent: logits of 60000 in f16 give a finite loss and gradient") {
  // 60000 and -60000 are exact halves; their difference, 120000, is not a finite half, but
  // the loss is computed in float.
  const std::vector<half_t> z = to<half_t>({60000, -60000, 0,  //
                                            60000, -60000, 0});
  const std::vector<int32_t> labels = {0, 1};
  float loss = -1;
  softmax_xent_forward_cpu<half_t>(2, 3, z.data(), labels.data(), 0.f, &loss);
  REQUIRE(loss == 60000.f);  // (0 + 120000) / 2
  // dloss = 1024, a loss scale: dz = 1024 * (p - q) / 2
  std::vector<half_t> dz(6, half_t(0.0f));
  softmax_xent_backward_cpu<half_t>(2, 3, z.data(), labels.data(), 0.f, 1024.f, dz.data());
  require_equal(doubles(dz), {0, 0, 0, 512, -512, 0});
  softmax_xent_forward_cpu<half_t>(2, 3, z.data(), labels.data(), 0.1f, &loss);
  REQUIRE(std::isfinite(loss));
}

TEST_CASE_TEMPLATE("softmax_xent: the gradient of each row sums to zero", T, float, double) {
  // sum_k p_k = sum_k q_k = 1, so sum_k (p_k - q_k) = 0: a wrong eps/K would break it.
  using A = acc_t<T>;
  const int N = 5, K = 7;
  const std::vector<double> zd = cutrain_test::uniform({N, K}, DType::f64, 7, -5, 5).to_doubles();
  const std::vector<T> z = to<T>(zd);
  const std::vector<int32_t> labels = {0, 6, 3, 3, 1};
  for (double eps : {0.0, 0.1}) {
    INFO("smoothing " << eps);
    std::vector<T> dz(N * K, T(0.0));
    softmax_xent_backward_cpu<T>(N, K, z.data(), labels.data(), A(eps), A(1), dz.data());
    for (int n = 0; n < N; n++) {
      double sum = 0, abs_sum = 0;
      for (int k = 0; k < K; k++) {
        sum += double(dz[size_t(n * K + k)]);
        abs_sum += std::fabs(double(dz[size_t(n * K + k)]));
      }
      INFO("row " << n << " sums to " << sum);
      REQUIRE(std::fabs(sum) <= (std::is_same<T, double>::value ? 1e-15 : 1e-7));
      REQUIRE(abs_sum > 0.01);  // not trivially zero
      REQUIRE(double(dz[size_t(n * K + labels[size_t(n)])]) < 0);  // the label is pushed up
    }
  }
}

TEST_CASE("softmax_xent: backward accumulates and scales with dloss") {
  const int N = 3, K = 4;
  const std::vector<float> z = cutrain_test::uniform({N, K}, DType::f32, 3).to_floats();
  const std::vector<int32_t> labels = {2, 0, 3};
  std::vector<float> once(N * K, 0.f), scaled(N * K, 1.f);
  softmax_xent_backward_cpu<float>(N, K, z.data(), labels.data(), 0.1f, 1.f, once.data());
  softmax_xent_backward_cpu<float>(N, K, z.data(), labels.data(), 0.1f, 8.f, scaled.data());
  for (size_t i = 0; i < once.size(); i++) {
    INFO("element " << i);
    REQUIRE(std::fabs(scaled[i] - (1 + 8 * once[i])) <= 1e-6f);
  }
}

TEST_CASE_TEMPLATE("top1_correct: counts rows whose first largest logit is the label", T, float,
                   double, half_t) {
  const std::vector<T> z = to<T>({1, 3, 2,    // argmax 1, label 1: right
                                  5, 5, 1,    // tie: first largest is 0, label 1: wrong
                                  5, 5, 1,    // same tie, label 0: right
                                  0, 1, 2,    // argmax 2, label 0: wrong
                                  7, 7, 7});  // all equal, label 0: right
  const std::vector<int32_t> labels = {1, 1, 0, 0, 0};
  REQUIRE(top1_correct_cpu<T>(5, 3, z.data(), labels.data()) == 3);
  REQUIRE(top1_correct_cpu<T>(1, 3, z.data(), labels.data()) == 1);
  REQUIRE(top1_correct_cpu<T>(2, 3, z.data(), labels.data()) == 1);
}

TEST_CASE("softmax_xent: labels out of range and bad smoothing are rejected") {
  const std::vector<float> z(15, 0.f);  // (3,5)
  float loss = 0;
  std::vector<float> dz(15, 0.f);
  const std::vector<int32_t> high = {0, 4, 5}, low = {-1, 0, 0}, ok = {0, 1, 2};
  REQUIRE_ERROR(softmax_xent_forward_cpu<float>(3, 5, z.data(), high.data(), 0.f, &loss),
                "label 5 at row 2 is outside [0,5)");
  REQUIRE_ERROR(softmax_xent_backward_cpu<float>(3, 5, z.data(), low.data(), 0.f, 1.f,
                                                 dz.data()),
                "label -1 at row 0");
  REQUIRE_ERROR(top1_correct_cpu<float>(3, 5, z.data(), high.data()), "top1_correct: label 5");
  REQUIRE_ERROR(softmax_xent_forward_cpu<float>(3, 5, z.data(), ok.data(), 1.f, &loss),
                "smoothing must be in [0,1)");
  REQUIRE_ERROR(softmax_xent_forward_cpu<float>(3, 5, z.data(), ok.data(), -0.1f, &loss),
                "smoothing must be in [0,1)");
  softmax_xent_forward_cpu<float>(3, 5, z.data(), ok.data(), 0.f, &loss);
  REQUIRE(std::fabs(loss - std::log(5.f)) < 1e-6f);
}

namespace {

// The weighted loss and gradient, straight from the definitions in kernels/softmax_xent.h, in
// double: log p_k = z_k - m - log sum_j exp(z_j - m); l_n = -sum_k q_k log p_k;
// loss = (1/N) sum_n w[y_n] l_n; dz = dz0 + dloss w[y_n] (p_k - q_k) / N.
struct WeightedRef {
  double loss = 0;
  std::vector<double> dz;
};
WeightedRef weighted_reference(int N, int K, const std::vector<double>& z,
                               const std::vector<int32_t>& y, const std::vector<double>& w,
                               double eps, double dloss, const std::vector<double>& dz0) {
  WeightedRef r;
  r.dz = dz0;
  for (int n = 0; n < N; n++) {
    const double* row = z.data() + size_t(n) * K;
    double m = row[0];
    for (int k = 1; k < K; k++) m = std::max(m, row[k]);
    double s = 0;
    for (int k = 0; k < K; k++) s += std::exp(row[k] - m);
    const double wy = w[size_t(y[size_t(n)])];
    double l = 0;
    for (int k = 0; k < K; k++) {
      const double log_p = row[k] - m - std::log(s);
      const double q = (1 - eps) * (k == y[size_t(n)]) + eps / K;
      l -= q * log_p;
      r.dz[size_t(n) * K + size_t(k)] += dloss * wy * (std::exp(log_p) - q) / N;
    }
    r.loss += wy * l / N;
  }
  return r;
}

}  // namespace

TEST_CASE_TEMPLATE("softmax_xent: class weights against a double reference, odd N and K", T,
                   float, double, half_t) {
  using A = acc_t<T>;
  const int N = 13, K = 7;
  const std::vector<T> z =
      to<T>(cutrain_test::uniform({N, K}, DType::f64, 61, -4, 4).to_doubles());
  const std::vector<double> zd = doubles(z);  // the logits as stored in T
  std::vector<int32_t> y(static_cast<size_t>(N));
  for (int n = 0; n < N; n++) y[size_t(n)] = int32_t((n * 5) % K);
  // Inverse-frequency-like weights, one of them 0 (a class without samples), none equal.
  const std::vector<double> wd = {0.25, 3.5, 0.0, 1.0, 0.6, 2.0, 1.75};
  std::vector<A> w(wd.begin(), wd.end());
  const std::vector<T> dz0 =
      to<T>(cutrain_test::uniform({N, K}, DType::f64, 62, -1, 1).to_doubles());
  for (double eps : {0.0, 0.1}) {
    INFO("smoothing " << eps);
    const double dloss = std::is_same<T, half_t>::value ? 1024 : 1;
    const WeightedRef ref = weighted_reference(N, K, zd, y, wd, eps, dloss, doubles(dz0));
    A loss = -1;
    softmax_xent_forward_cpu<T>(N, K, z.data(), y.data(), A(eps), &loss, w.data());
    REQUIRE(std::fabs(double(loss) - ref.loss) <= acc_tol<T>() * 4 * (1 + ref.loss));
    std::vector<T> dz = dz0;
    softmax_xent_backward_cpu<T>(N, K, z.data(), y.data(), A(eps), A(dloss), dz.data(),
                                 w.data());
    const double tol = stored_tol<T>() * dloss;
    require_near(doubles(dz), ref.dz, tol, stored_tol<T>());
    // Rows of class 2 (weight 0) leave their gradient as it was, exactly.
    for (int n = 0; n < N; n++)
      if (y[size_t(n)] == 2)
        for (int k = 0; k < K; k++)
          REQUIRE(double(dz[size_t(n * K + k)]) == double(dz0[size_t(n * K + k)]));
    // The weights matter: the unweighted loss is another number.
    A plain = -1;
    softmax_xent_forward_cpu<T>(N, K, z.data(), y.data(), A(eps), &plain);
    REQUIRE(std::fabs(double(plain) - double(loss)) > 0.05);
  }
}

TEST_CASE_TEMPLATE("softmax_xent: weights of 1 give the unweighted bits; the mean divides by N",
                   T, float, double, half_t) {
  using A = acc_t<T>;
  const int N = 6, K = 5;
  const std::vector<T> z =
      to<T>(cutrain_test::uniform({N, K}, DType::f64, 63, -3, 3).to_doubles());
  const std::vector<int32_t> y = {0, 1, 1, 4, 4, 4};
  const std::vector<A> ones(size_t(K), A(1));
  A plain = -1, weighted = -2;
  softmax_xent_forward_cpu<T>(N, K, z.data(), y.data(), A(0.1), &plain);
  softmax_xent_forward_cpu<T>(N, K, z.data(), y.data(), A(0.1), &weighted, ones.data());
  REQUIRE(plain == weighted);
  std::vector<T> d1(size_t(N) * K, T(0.5)), d2 = d1;
  softmax_xent_backward_cpu<T>(N, K, z.data(), y.data(), A(0.1), A(2), d1.data());
  softmax_xent_backward_cpu<T>(N, K, z.data(), y.data(), A(0.1), A(2), d2.data(), ones.data());
  require_equal(doubles(d1), doubles(d2));
  // Only class 4 weighted (3 of the 6 rows): the loss is the sum of those rows' losses / 6,
  // not / 3 (PyTorch's reduction='mean' would divide by the weights' sum, 3).
  const std::vector<A> only4 = {0, 0, 0, 0, 1};
  A part = -1, rows = -1;
  softmax_xent_forward_cpu<T>(N, K, z.data(), y.data(), A(0.1), &part, only4.data());
  softmax_xent_forward_cpu<T>(3, K, z.data() + 3 * K, y.data() + 3, A(0.1), &rows);  // mean of 3
  REQUIRE(std::fabs(double(part) - double(rows) * 3 / 6) <= acc_tol<T>() * 4);
}
