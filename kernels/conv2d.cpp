// conv2d CPU reference: forward, backward-data, backward-filter (math in conv2d.h).
//
// Loop order: NHWC activations and KRSC filters both keep C contiguous, so every inner loop
// runs over c, reading one contiguous row of x (or dx, dy) and one of w (or dw). Each function
// is a "gather": it sums everything that lands on one output element in an acc_t<T> buffer and
// rounds to T once, so fp16 storage gives the fp32 sum rounded to half, as the GPU does.
#include "kernels/conv2d.h"

#include <string>
#include <vector>

#include "kernels/check.h"

namespace cutrain {

namespace {
// "3x3", or "2" when both are the same: used in messages.
std::string pair_str(int a, int b) {
  std::ostringstream os;
  os << a;
  if (a != b) os << "x" << b;
  return os.str();
}
}  // namespace

void conv2d_check_shape(const Conv2dShape& s) {
  const struct { const char* name; int value; } sizes[] = {
      {"N (batch)", s.N}, {"H (input height)", s.H}, {"W (input width)", s.W},
      {"C (input channels)", s.C}, {"K (output channels)", s.K}, {"R (filter height)", s.R},
      {"S (filter width)", s.S}};
  for (const auto& d : sizes)
    CHECK(d.value > 0, "conv2d: " << d.name << " must be positive, got " << d.value);
  CHECK(s.stride_h >= 1 && s.stride_w >= 1,
        "conv2d: stride must be at least 1, got " << s.stride_h << "x" << s.stride_w);
  CHECK(s.pad_h >= 0 && s.pad_w >= 0,
        "conv2d: padding must not be negative, got " << s.pad_h << "x" << s.pad_w);
  const int64_t Hp = int64_t(s.H) + 2 * int64_t(s.pad_h), Wp = int64_t(s.W) + 2 * int64_t(s.pad_w);
  CHECK(s.R <= Hp && s.S <= Wp, "conv2d: filter " << s.R << "x" << s.S
                                                  << " is larger than the padded input " << Hp
                                                  << "x" << Wp << " (pad "
                                                  << pair_str(s.pad_h, s.pad_w) << ")");
  CHECK(Hp <= (1 << 30) && Wp <= (1 << 30),
        "conv2d: padded input " << Hp << "x" << Wp << " is too large");
}

// One output pixel y[n][p][q][:] at a time: acc[k] starts at the bias, then every tap (r,s)
// that falls inside the image adds dot(x[n][h][w][:], w[k][r][s][:]) for each k. The x row
// (C values) stays in cache while it meets all K filter rows.
template <typename T>
void conv2d_forward_cpu(const Conv2dShape& s, const T* x, const T* w, const T* b, T* y) {
  using A = acc_t<T>;
  const int P = s.P(), Q = s.Q(), C = s.C, K = s.K;
  std::vector<A> acc(static_cast<size_t>(K));
  for (int n = 0; n < s.N; n++)
    for (int p = 0; p < P; p++)
      for (int q = 0; q < Q; q++) {
        for (int k = 0; k < K; k++) acc[size_t(k)] = b ? A(b[k]) : A(0);
        for (int r = 0; r < s.R; r++) {
          const int h = p * s.stride_h - s.pad_h + r;
          if (h < 0 || h >= s.H) continue;  // zero padding contributes nothing
          for (int t = 0; t < s.S; t++) {
            const int wi = q * s.stride_w - s.pad_w + t;
            if (wi < 0 || wi >= s.W) continue;
            const T* xr = x + ((size_t(n) * s.H + h) * s.W + wi) * C;  // x[n][h][wi][:]
            for (int k = 0; k < K; k++) {
              const T* wr = w + ((size_t(k) * s.R + r) * s.S + t) * C;  // w[k][r][t][:]
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

// One input pixel dx[n][h][wi][:] at a time: the taps that read it are the (p, r) with
// h = p*Sh - Ph + r (and likewise (q, s) for the column); each adds dy[n][p][q][k] * w[k][r][s][:].
template <typename T>
void conv2d_backward_data_cpu(const Conv2dShape& s, const T* dy, const T* w, T* dx) {
  using A = acc_t<T>;
  const int P = s.P(), Q = s.Q(), C = s.C, K = s.K;
  std::vector<A> acc(static_cast<size_t>(C));
  for (int n = 0; n < s.N; n++)
    for (int h = 0; h < s.H; h++)
      for (int wi = 0; wi < s.W; wi++) {
        T* dxr = dx + ((size_t(n) * s.H + h) * s.W + wi) * C;  // dx[n][h][wi][:]
        for (int c = 0; c < C; c++) acc[size_t(c)] = A(dxr[c]);
        for (int r = 0; r < s.R; r++) {
          const int ph = h + s.pad_h - r;  // = p * stride_h for the output row p that uses it
          if (ph < 0 || ph % s.stride_h != 0 || ph / s.stride_h >= P) continue;
          const int p = ph / s.stride_h;
          for (int t = 0; t < s.S; t++) {
            const int qw = wi + s.pad_w - t;
            if (qw < 0 || qw % s.stride_w != 0 || qw / s.stride_w >= Q) continue;
            const int q = qw / s.stride_w;
            const T* dyr = dy + ((size_t(n) * P + p) * Q + q) * K;  // dy[n][p][q][:]
            for (int k = 0; k < K; k++) {
              const A g = A(dyr[k]);
              const T* wr = w + ((size_t(k) * s.R + r) * s.S + t) * C;  // w[k][r][t][:]
              for (int c = 0; c < C; c++) acc[size_t(c)] += g * A(wr[c]);
            }
          }
        }
        for (int c = 0; c < C; c++) dxr[c] = T(acc[size_t(c)]);
      }
}

// dw is small (K*R*S*C), so it is summed whole in an acc_t buffer: one pass over the output
// pixels, each adding dy[n][p][q][k] * x[n][h][wi][:] to the rows dw[k][r][t][:]. The x row is
// read once per tap and reused for all K. db sums dy over the same pass. Written back once.
template <typename T>
void conv2d_backward_filter_cpu(const Conv2dShape& s, const T* x, const T* dy, T* dw, T* db) {
  using A = acc_t<T>;
  const int P = s.P(), Q = s.Q(), C = s.C, K = s.K;
  const size_t wsize = size_t(K) * s.R * s.S * C;
  std::vector<A> dw_acc(dw ? wsize : 0), db_acc(db ? size_t(K) : 0);
  for (size_t i = 0; i < dw_acc.size(); i++) dw_acc[i] = A(dw[i]);
  for (size_t k = 0; k < db_acc.size(); k++) db_acc[k] = A(db[k]);
  for (int n = 0; n < s.N; n++)
    for (int p = 0; p < P; p++)
      for (int q = 0; q < Q; q++) {
        const T* dyr = dy + ((size_t(n) * P + p) * Q + q) * K;  // dy[n][p][q][:]
        if (db)
          for (int k = 0; k < K; k++) db_acc[size_t(k)] += A(dyr[k]);
        if (!dw) continue;
        for (int r = 0; r < s.R; r++) {
          const int h = p * s.stride_h - s.pad_h + r;
          if (h < 0 || h >= s.H) continue;
          for (int t = 0; t < s.S; t++) {
            const int wi = q * s.stride_w - s.pad_w + t;
            if (wi < 0 || wi >= s.W) continue;
            const T* xr = x + ((size_t(n) * s.H + h) * s.W + wi) * C;  // x[n][h][wi][:]
            for (int k = 0; k < K; k++) {
              const A g = A(dyr[k]);
              A* dwr = dw_acc.data() + ((size_t(k) * s.R + r) * s.S + t) * C;  // dw[k][r][t][:]
              for (int c = 0; c < C; c++) dwr[c] += g * A(xr[c]);
            }
          }
        }
      }
  for (size_t i = 0; i < dw_acc.size(); i++) dw[i] = T(dw_acc[i]);
  for (size_t k = 0; k < db_acc.size(); k++) db[k] = T(db_acc[k]);
}

#define CUTRAIN_INSTANTIATE(T)                                                                \
  template void conv2d_forward_cpu<T>(const Conv2dShape&, const T*, const T*, const T*, T*); \
  template void conv2d_backward_data_cpu<T>(const Conv2dShape&, const T*, const T*, T*);     \
  template void conv2d_backward_filter_cpu<T>(const Conv2dShape&, const T*, const T*, T*, T*);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(double)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
