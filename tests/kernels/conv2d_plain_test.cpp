// The conv2d CPU kernels against the plain loops they were sped up from, bit for bit.
//
// kernels/conv2d.cpp reorders loops (the forward's k loop inside c, the filter gradient one
// filter at a time, taps inside the image worked out once per row) and runs on threads. It
// promises that every output is still the sum of the same terms in the same order, so the
// bits equal those of the plain loops below, which are the first cutrain version verbatim
// (the filter gradient's with the blocked pairwise sums it has had since).
// Random values, odd sizes, strides, padding, accumulation into non-zero gradients; f32, f16
// and f64.
#include <cstring>
#include <vector>

#include "kernels/blocked_sum.h"
#include "kernels/conv2d.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {

template <typename T>
void plain_forward(const Conv2dShape& s, const T* x, const T* w, const T* b, T* y) {
  using A = acc_t<T>;
  const int P = s.P(), Q = s.Q(), C = s.C, K = s.K;
  std::vector<A> acc(static_cast<size_t>(K));
  for (int n = 0; n < s.N; n++)
    for (int p = 0; p < P; p++)
      for (int q = 0; q < Q; q++) {
        for (int k = 0; k < K; k++) acc[size_t(k)] = b ? A(b[k]) : A(0);
        for (int r = 0; r < s.R; r++) {
          const int h = p * s.stride_h - s.pad_h + r;
          if (h < 0 || h >= s.H) continue;
          for (int t = 0; t < s.S; t++) {
            const int wi = q * s.stride_w - s.pad_w + t;
            if (wi < 0 || wi >= s.W) continue;
            const T* xr = x + ((size_t(n) * s.H + h) * s.W + wi) * C;
            for (int k = 0; k < K; k++) {
              const T* wr = w + ((size_t(k) * s.R + r) * s.S + t) * C;
              A d = 0;
              for (int c = 0; c < C; c++) d += A(xr[c]) * A(wr[c]);
              acc[size_t(k)] += d;
            }
          }
        }
        T* yr = y + ((size_t(n) * P + p) * Q + q) * K;
        for (int k = 0; k < K; k++) yr[k] = T(acc[size_t(k)]);
      }
}

template <typename T>
void plain_backward_data(const Conv2dShape& s, const T* dy, const T* w, T* dx) {
  using A = acc_t<T>;
  const int P = s.P(), Q = s.Q(), C = s.C, K = s.K;
  std::vector<A> acc(static_cast<size_t>(C));
  for (int n = 0; n < s.N; n++)
    for (int h = 0; h < s.H; h++)
      for (int wi = 0; wi < s.W; wi++) {
        T* dxr = dx + ((size_t(n) * s.H + h) * s.W + wi) * C;
        for (int c = 0; c < C; c++) acc[size_t(c)] = A(dxr[c]);
        for (int r = 0; r < s.R; r++) {
          const int ph = h + s.pad_h - r;
          if (ph < 0 || ph % s.stride_h != 0 || ph / s.stride_h >= P) continue;
          const int p = ph / s.stride_h;
          for (int t = 0; t < s.S; t++) {
            const int qw = wi + s.pad_w - t;
            if (qw < 0 || qw % s.stride_w != 0 || qw / s.stride_w >= Q) continue;
            const int q = qw / s.stride_w;
            const T* dyr = dy + ((size_t(n) * P + p) * Q + q) * K;
            for (int k = 0; k < K; k++) {
              const A g = A(dyr[k]);
              const T* wr = w + ((size_t(k) * s.R + r) * s.S + t) * C;
              for (int c = 0; c < C; c++) acc[size_t(c)] += g * A(wr[c]);
            }
          }
        }
        for (int c = 0; c < C; c++) dxr[c] = T(acc[size_t(c)]);
      }
}

// The first version's loops, but each dw and db element summed blocked pairwise
// (kernels/blocked_sum.h), as the kernel does since: the pixels (n, p, q) in blocks of
// kSumBlock, in order, every block's sums handed to a BlockedSums, then dw += the total.
template <typename T>
void plain_backward_filter(const Conv2dShape& s, const T* x, const T* dy, T* dw, T* db) {
  using A = acc_t<T>;
  const int P = s.P(), Q = s.Q(), C = s.C, K = s.K;
  const size_t wsize = size_t(K) * s.R * s.S * C;
  std::vector<A> dw_acc(wsize), db_acc(static_cast<size_t>(K));  // one block's sums, then the totals
  const int64_t pixels = int64_t(s.N) * P * Q;
  BlockedSums<A> dw_sums(wsize, pixels), db_sums(static_cast<size_t>(K), pixels);
  int64_t pixel = 0;  // (n, p, q) counted in order
  for (int n = 0; n < s.N; n++)
    for (int p = 0; p < P; p++)
      for (int q = 0; q < Q; q++, pixel++) {
        const T* dyr = dy + ((size_t(n) * P + p) * Q + q) * K;
        for (int k = 0; k < K; k++) db_acc[size_t(k)] += A(dyr[k]);
        for (int r = 0; r < s.R; r++) {
          const int h = p * s.stride_h - s.pad_h + r;
          if (h < 0 || h >= s.H) continue;
          for (int t = 0; t < s.S; t++) {
            const int wi = q * s.stride_w - s.pad_w + t;
            if (wi < 0 || wi >= s.W) continue;
            const T* xr = x + ((size_t(n) * s.H + h) * s.W + wi) * C;
            for (int k = 0; k < K; k++) {
              const A g = A(dyr[k]);
              A* dwr = dw_acc.data() + ((size_t(k) * s.R + r) * s.S + t) * C;
              for (int c = 0; c < C; c++) dwr[c] += g * A(xr[c]);
            }
          }
        }
        const bool last = n == s.N - 1 && p == P - 1 && q == Q - 1;
        if ((pixel + 1) % kSumBlock == 0 || last) {  // the end of a block (add() zeroes it)
          dw_sums.add(dw_acc.data());
          db_sums.add(db_acc.data());
        }
      }
  dw_sums.total(dw_acc.data());
  db_sums.total(db_acc.data());
  for (size_t i = 0; dw && i < wsize; i++) dw[i] = T(A(dw[i]) + dw_acc[i]);
  for (size_t k = 0; db && k < size_t(K); k++) db[k] = T(A(db[k]) + db_acc[k]);
}

template <typename T> std::vector<T> random_values(size_t n, uint64_t seed) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; i++) v[i] = T(rng_uniform(seed, i) * 4 - 2);
  return v;
}

template <typename T>
void require_same_bits(const std::vector<T>& got, const std::vector<T>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); i++) {
    INFO("element " << i << ": got " << double(got[i]) << ", plain loop " << double(want[i]));
    REQUIRE(std::memcmp(&got[i], &want[i], sizeof(T)) == 0);
  }
}

Conv2dShape shape(int N, int H, int W, int C, int K, int R, int S, int sh, int sw, int ph,
                  int pw) {
  Conv2dShape s;
  s.N = N, s.H = H, s.W = W, s.C = C, s.K = K, s.R = R, s.S = S;
  s.stride_h = sh, s.stride_w = sw, s.pad_h = ph, s.pad_w = pw;
  return s;
}

}  // namespace

TEST_CASE_TEMPLATE("conv2d CPU kernels give the bits of the plain loops", T, float, half_t,
                   double) {
  const Conv2dShape shapes[] = {
      shape(3, 9, 7, 5, 7, 3, 3, 1, 1, 1, 1),    // odd sizes, 'same' padding
      shape(2, 11, 8, 3, 5, 3, 2, 2, 1, 1, 0),   // strides, a rectangular filter
      shape(2, 6, 9, 1, 9, 5, 4, 2, 3, 2, 3),    // C = 1, padding wider than a stride
      shape(1, 5, 5, 17, 3, 1, 1, 1, 1, 0, 0),   // a 1x1 convolution
      shape(5, 4, 4, 6, 2, 4, 4, 1, 1, 0, 0),    // the filter covers the whole image
      shape(4, 12, 11, 2, 3, 3, 3, 1, 1, 1, 1),  // 528 pixels: 8 whole pairwise blocks + 16
  };
  for (const Conv2dShape& s : shapes) {
    conv2d_check_shape(s);
    INFO("shape N" << s.N << " H" << s.H << " W" << s.W << " C" << s.C << " K" << s.K << " R"
                   << s.R << " S" << s.S << " stride " << s.stride_h << "x" << s.stride_w
                   << " pad " << s.pad_h << "x" << s.pad_w);
    const size_t nx = size_t(s.N) * s.H * s.W * s.C, nw = size_t(s.K) * s.R * s.S * s.C;
    const size_t ny = size_t(s.N) * s.P() * s.Q() * s.K, K = size_t(s.K);
    const std::vector<T> x = random_values<T>(nx, 1), w = random_values<T>(nw, 2),
                         b = random_values<T>(K, 3), dy = random_values<T>(ny, 4);
    std::vector<T> y(ny), y_plain(ny);
    conv2d_forward_cpu<T>(s, x.data(), w.data(), b.data(), y.data());
    plain_forward<T>(s, x.data(), w.data(), b.data(), y_plain.data());
    require_same_bits(y, y_plain);
    conv2d_forward_cpu<T>(s, x.data(), w.data(), nullptr, y.data());
    plain_forward<T>(s, x.data(), w.data(), nullptr, y_plain.data());
    require_same_bits(y, y_plain);

    // backward: accumulating into gradients that already hold values
    std::vector<T> dx = random_values<T>(nx, 5), dw = random_values<T>(nw, 6),
                   db = random_values<T>(K, 7);
    std::vector<T> dx_plain = dx, dw_plain = dw, db_plain = db;
    conv2d_backward_data_cpu<T>(s, dy.data(), w.data(), dx.data());
    plain_backward_data<T>(s, dy.data(), w.data(), dx_plain.data());
    require_same_bits(dx, dx_plain);
    conv2d_backward_filter_cpu<T>(s, x.data(), dy.data(), dw.data(), db.data());
    plain_backward_filter<T>(s, x.data(), dy.data(), dw_plain.data(), db_plain.data());
    require_same_bits(dw, dw_plain);
    require_same_bits(db, db_plain);
    // dw only, then db only
    conv2d_backward_filter_cpu<T>(s, x.data(), dy.data(), dw.data(), nullptr);
    plain_backward_filter<T>(s, x.data(), dy.data(), dw_plain.data(), nullptr);
    require_same_bits(dw, dw_plain);
    conv2d_backward_filter_cpu<T>(s, x.data(), dy.data(), nullptr, db.data());
    plain_backward_filter<T>(s, x.data(), dy.data(), nullptr, db_plain.data());
    require_same_bits(db, db_plain);
  }
}
