// conv2d CPU reference: forward, backward-data, backward-filter (math in conv2d.h).
//
// Each function is a "gather": it sums everything that lands on one output element in an
// acc_t<T> buffer and rounds to T once, so fp16 storage gives the fp32 sum rounded to half, as
// the GPU does. NHWC activations and KRSC filters both keep C contiguous; every inner loop runs
// over a contiguous row (of c, or of k in the forward) whose lanes are independent sums, so the
// compiler may vectorise it (omp simd) without changing the order of any sum. The backward-
// filter sums run over the whole batch (N*P*Q terms), so they are blocked pairwise
// (kernels/blocked_sum.h); the others are short (R*S*C or R*S*K terms) and run in order.
//
// Threads (kernels/parallel.h): each thread owns whole outputs (rows of y, rows of dx, whole
// filters of dw) and sums each in the 1-thread order, so the bits do not depend on the count.
#include "kernels/conv2d.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/blocked_sum.h"
#include "kernels/check.h"
#include "kernels/linear.h"
#include "kernels/parallel.h"
#include "kernels/tc_plan.h"

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

namespace {
// p[0..n) in the accumulation type A. When T is A already, that is p itself; otherwise
// (half_t -> float) the values are widened once into buf, so the inner loops below read plain
// floats instead of converting the same value again for every output it meets.
template <typename A, typename T>
const A* widen(const T* p, size_t n, std::vector<A>& buf) {
  if constexpr (std::is_same_v<T, A>) {
    (void)n, (void)buf;
    return p;
  } else {
    buf.resize(n);
    for (size_t i = 0; i < n; i++) buf[i] = A(p[i]);
    return buf.data();
  }
}

// The taps r in [begin, end) of output row p that fall inside the image, 0 <= p*stride - pad
// + r < H: the plain loop's "if (h < 0 || h >= H) continue" worked out once per row.
struct Taps {
  int begin, end;
};
inline Taps taps_inside(int p, int stride, int pad, int R, int H) {
  const int h0 = p * stride - pad;  // the input row under tap 0
  return {std::max(0, -h0), std::min(R, H - h0)};
}
}  // namespace

// One output pixel y[n][p][q][:] at a time: acc[k] starts at the bias, then every tap (r,t)
// that falls inside the image adds d[k] = dot(x[n][h][wi][:], w[k][r][t][:]).
// That is the plain loop
//   for k: acc = b[k]; for (r,t) inside: { d = 0; for c: d += x[c] * w[k][r][t][c]; acc += d; }
// with the k loop moved inside: the filter is first copied to wt (R,S,C,K) in A, so for each
// c one x value meets a contiguous row of K weights and all K dot products step together
// (SIMD lanes, no half->float conversions). Every d[k] still sums over c in order from 0 and
// every acc[k] over the taps in (r,t) order, so the bits are those of the plain loop.
template <typename T>
void conv2d_forward_cpu(const Conv2dShape& s, const T* x, const T* w, const T* b, T* y) {
  using A = acc_t<T>;
  const int P = s.P(), Q = s.Q(), C = s.C, K = s.K;
  std::vector<A> wt(size_t(s.R) * s.S * C * K);  // wt[r][t][c][k] = w[k][r][t][c]
  for (int k = 0; k < K; k++)
    for (int rtc = 0; rtc < s.R * s.S * C; rtc++)  // (r,t,c) flattened: the same in both
      wt[size_t(rtc) * K + k] = A(w[size_t(k) * s.R * s.S * C + rtc]);
#pragma omp parallel if (worth_threads(s.forward_flops()))
  {
    const size_t Ks = static_cast<size_t>(K);
    std::vector<A> acc(Ks), d(Ks), xbuf;  // this thread's scratch
    // Each thread owns whole output rows y[n][p][:][:]. dynamic: rows go to threads as they
    // come free (a core taken by other work slows only its rows), and the bits do not depend
    // on which thread computes a row.
#pragma omp for collapse(2) schedule(dynamic)
    for (int n = 0; n < s.N; n++)
      for (int p = 0; p < P; p++) {
        // only taps inside the image: zero padding contributes nothing
        const Taps rs = taps_inside(p, s.stride_h, s.pad_h, s.R, s.H);
        for (int q = 0; q < Q; q++) {
          const Taps ts = taps_inside(q, s.stride_w, s.pad_w, s.S, s.W);
          for (int k = 0; k < K; k++) acc[size_t(k)] = b ? A(b[k]) : A(0);
          for (int r = rs.begin; r < rs.end; r++) {
            const int h = p * s.stride_h - s.pad_h + r;
            for (int t = ts.begin; t < ts.end; t++) {
              const int wi = q * s.stride_w - s.pad_w + t;
              const A* xr = widen(x + ((size_t(n) * s.H + h) * s.W + wi) * C, size_t(C),
                                  xbuf);  // x[n][h][wi][:]
              const A* wrt = wt.data() + (size_t(r) * s.S + t) * C * K;  // wt[r][t][:][:]
              for (int k = 0; k < K; k++) d[size_t(k)] = A(0);
              for (int c = 0; c < C; c++) {
                const A xc = xr[c];
                const A* wc = wrt + size_t(c) * K;  // w[:][r][t][c]
#pragma omp simd
                for (int k = 0; k < K; k++) d[size_t(k)] += xc * wc[k];
              }
              for (int k = 0; k < K; k++) acc[size_t(k)] += d[size_t(k)];
            }
          }
          T* yr = y + ((size_t(n) * P + p) * Q + q) * K;
          for (int k = 0; k < K; k++) yr[k] = T(acc[size_t(k)]);
        }
      }
  }
}

// One input pixel dx[n][h][wi][:] at a time: the taps that read it are the (p, r) with
// h = p*Sh - Ph + r (and likewise (q, s) for the column); each adds dy[n][p][q][k] * w[k][r][s][:].
// The inner loop runs over c: C independent sums (SIMD lanes), each in (r, t, k) order.
template <typename T>
void conv2d_backward_data_cpu(const Conv2dShape& s, const T* dy, const T* w, T* dx) {
  using A = acc_t<T>;
  const int P = s.P(), Q = s.Q(), C = s.C, K = s.K;
  std::vector<A> wbuf;
  const A* wa = widen(w, size_t(K) * s.R * s.S * C, wbuf);  // w in A, widened once
#pragma omp parallel if (worth_threads(s.forward_flops()))
  {
    std::vector<A> acc(static_cast<size_t>(C));  // this thread's scratch
    // Each thread owns whole input rows dx[n][h][:][:] (dynamic, as in the forward).
#pragma omp for collapse(2) schedule(dynamic)
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
                const A* wr = wa + ((size_t(k) * s.R + r) * s.S + t) * C;  // w[k][r][t][:]
#pragma omp simd
                for (int c = 0; c < C; c++) acc[size_t(c)] += g * wr[c];
              }
            }
          }
          for (int c = 0; c < C; c++) dxr[c] = T(acc[size_t(c)]);
        }
  }
}

// One filter k at a time: dw[k][r][t][:] += dy[n][p][q][k] * x[n][h][wi][:] over every
// output pixel and every tap inside the image, and db[k] += dy[n][p][q][k]. Every dw and db
// element sums over the pixels m = (n, p, q) in order, blocked pairwise (kernels/blocked_sum.h):
// the filter is small (R*S*C), so each block of kSumBlock pixels is summed whole into an
// acc_t buffer, the blocks are combined pairwise, and the old value is added to the total and
// rounded to T once. dy is first transposed to dyt (K, N*P*Q) in A, so filter k reads its
// gradients contiguously. The inner loop runs over c: C independent sums.
template <typename T>
void conv2d_backward_filter_cpu(const Conv2dShape& s, const T* x, const T* dy, T* dw, T* db) {
  using A = acc_t<T>;
  const int P = s.P(), Q = s.Q(), C = s.C, K = s.K;
  const int64_t pixels = int64_t(s.N) * P * Q;
  const size_t filter = size_t(s.R) * s.S * C;
  const size_t x_row = size_t(s.W) * C, dw_row = size_t(s.S) * C;  // one r further in x, dw
  std::vector<A> xbuf, dyt(size_t(K) * size_t(pixels));
  const A* xa = widen(x, size_t(s.N) * s.H * s.W * C, xbuf);  // x in A, widened once
#pragma omp parallel if (worth_threads(s.forward_flops()))
  {
    // Each thread owns the pixels m it transposes: dyt[:][m] = dy[m][:].
#pragma omp for schedule(static)
    for (int64_t m = 0; m < pixels; m++)
      for (int k = 0; k < K; k++) dyt[size_t(k) * size_t(pixels) + size_t(m)] = A(dy[m * K + k]);
    std::vector<A> block(filter);  // this thread's scratch: one block's sums, then the total
    BlockedSums<A> sums(filter, pixels);
    // Each thread owns whole filters: dw[k][:][:][:] and db[k]. dynamic: filters go to threads
    // as they come free, and the bits do not depend on which thread sums a filter.
#pragma omp for schedule(dynamic)
    for (int k = 0; k < K; k++) {
      const A* g = dyt.data() + size_t(k) * size_t(pixels);  // dy[:][:][:][k]
      if (db) db[k] = T(A(db[k]) + blocked_sum<A>(pixels, [g](int64_t m) { return g[m]; }));
      if (!dw) continue;
      sums.reset();
      std::fill(block.begin(), block.end(), A(0));
      int in_block = 0;  // pixels summed into block
      for (int n = 0; n < s.N; n++)
        for (int p = 0; p < P; p++) {
          const Taps rs = taps_inside(p, s.stride_h, s.pad_h, s.R, s.H);
          const int h0 = p * s.stride_h - s.pad_h + rs.begin;  // the input row under tap rs.begin
          const A* xp = xa + (size_t(n) * s.H + h0) * x_row;   // x[n][h0][:][:]
          const A* gp = g + (size_t(n) * P + p) * Q;           // dy[n][p][:][k]
          for (int q = 0; q < Q; q++) {
            const Taps ts = taps_inside(q, s.stride_w, s.pad_w, s.S, s.W);
            const A gk = gp[q];  // dy[n][p][q][k]
            // For one r, the taps t and channels c in dw[k][r][t][c] and in the x pixels under
            // them x[n][h][wi0 + t][c] are both contiguous: one loop over (t, c) covers them.
            const int wi0 = q * s.stride_w - s.pad_w, len = (ts.end - ts.begin) * C;
            const A* xr = xp + size_t(wi0 + ts.begin) * C;                    // x[n][h0][..][:]
            A* dwr = block.data() + (size_t(rs.begin) * s.S + ts.begin) * C;  // dw[k][r][t][:]
            for (int r = rs.begin; r < rs.end; r++, xr += x_row, dwr += dw_row) {
#pragma omp simd
              for (int i = 0; i < len; i++) dwr[i] += gk * xr[i];
            }
            if (++in_block == kSumBlock) {  // a whole block: into the pairwise sums, which
              sums.add(block.data());       // zero it for the next one
              in_block = 0;
            }
          }
        }
      if (in_block > 0) sums.add(block.data());  // the last, shorter block
      sums.total(block.data());
      T* dwk = dw + size_t(k) * filter;  // dw[k][:][:][:]
      for (size_t i = 0; i < filter; i++) dwk[i] = T(A(dwk[i]) + block[i]);
    }
  }
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

// --- GPU launch costs (conv2d.h): what conv2d.cu, matmul_gpu.cpp and cudnn.cpp queue -------
// cudnn: launches: estimated until a GPU profile confirms (cuDNN picks the algorithm per shape,
// and some algorithms run more than one kernel).

namespace cutrain {

namespace {

// Element counts of the operands.
struct ConvSizes {
  int64_t x, w, y, npq;
  explicit ConvSizes(const Conv2dShape& s)
      : x(int64_t(s.N) * s.H * s.W * s.C),
        w(int64_t(s.K) * s.R * s.S * s.C),
        y(int64_t(s.N) * s.P() * s.Q() * s.K),
        npq(int64_t(s.N) * s.P() * s.Q()) {}
};

void check_gpu_impl(ConvImpl impl, size_t elem) {
  CHECK(impl != ConvImpl::onednn, "conv2d: onednn is a CPU implementation; a GPU runs direct, "
                                  "tc or cudnn");
  CHECK(impl != ConvImpl::tc || elem == 2,
        "conv2d: the tc implementation takes fp16 tensors, not " << elem << "-byte ones");
}

std::string kernel_name(const char* pass, ConvImpl impl) {
  return std::string(pass) + " " + impl_name(impl);
}

// into += c: one entry point's passes added up.
void add(LaunchCost& into, const LaunchCost& c) {
  into.launches += c.launches;
  into.bytes += c.bytes;
  into.flops += c.flops;
}

}  // namespace

LaunchCost conv2d_forward_gpu_cost(ConvImpl impl, const Conv2dShape& s, size_t elem, bool bias) {
  check_gpu_impl(impl, elem);
  const ConvSizes n(s);
  const std::string name = kernel_name("conv2d_forward", impl);
  const double flops = double(s.forward_flops()) + (bias ? double(n.y) : 0);
  const int64_t b = bias ? s.K : 0;
  switch (impl) {
    case ConvImpl::tc: {  // y = im2col(x) * w^T, the bias added in the epilogue
      LaunchCost c = tc_gemm_cost(name, n.npq, s.K, int64_t(s.R) * s.S * s.C,
                                  nbytes(n.x + n.w + b, elem), nbytes(n.y, elem));
      c.flops += bias ? double(n.y) : 0;
      return c;
    }
    case ConvImpl::cudnn: {
      // cudnnConvolutionForward writes y (beta 0); cudnnAddTensor then reads and writes it.
      LaunchCost c{name, 1, nbytes(n.x + n.w + n.y, elem), flops, elem == 2, true};
      if (bias) c.launches += 1, c.bytes += nbytes(2 * n.y + b, elem);
      return c;
    }
    default:  // direct: one thread per y element
      return {name, 1, nbytes(n.x + n.w + b + n.y, elem), flops};
  }
}

LaunchCost conv2d_backward_data_gpu_cost(ConvImpl impl, const Conv2dShape& s, size_t elem) {
  check_gpu_impl(impl, elem);
  const ConvSizes n(s);
  const std::string name = kernel_name("conv2d_backward_data", impl);
  const double in = nbytes(n.y + n.w, elem), dx = 2 * nbytes(n.x, elem);  // dx read and written
  switch (impl) {
    case ConvImpl::tc:  // dx (NHW x C) += gather(dy) (NHW x RSK) * w': with stride > 1 the GEMM
                        // also multiplies the gathered zeros, so its flops exceed the forward's
      return tc_gemm_cost(name, int64_t(s.N) * s.H * s.W, s.C, int64_t(s.R) * s.S * s.K, in, dx);
    case ConvImpl::cudnn: return {name, 1, in + dx, double(s.forward_flops()), elem == 2, true};
    default: return {name, 1, in + dx, double(s.forward_flops())};
  }
}

LaunchCost conv2d_backward_filter_gpu_cost(ConvImpl impl, const Conv2dShape& s, size_t elem,
                                           bool dw, bool db) {
  check_gpu_impl(impl, elem);
  const ConvSizes n(s);
  LaunchCost c{kernel_name("conv2d_backward_filter", impl), 0, 0, 0};
  const double in = nbytes(n.x + n.y, elem), out = 2 * nbytes(n.w, elem);  // dw read and written
  if (dw) {
    if (impl == ConvImpl::tc)  // dw (K x RSC) += dy^T (K x NPQ) * im2col(x): split-K when the
                               // K x RSC tiles are few and the batch long
      add(c, tc_gemm_cost(c.kernel, s.K, int64_t(s.R) * s.S * s.C, n.npq, in, out));
    else
      add(c, {c.kernel, 1, in + out, double(s.forward_flops())});
    c.tensor = impl == ConvImpl::tc || (impl == ConvImpl::cudnn && elem == 2);
  }
  if (db) {
    if (impl == ConvImpl::cudnn)  // cudnnConvolutionBackwardBias
      add(c, {c.kernel, 1, nbytes(n.y + 2 * int64_t(s.K), elem), double(n.y)});
    else
      add(c, bias_grad_gpu_cost(n.npq, s.K, elem));
  }
  c.estimated = impl == ConvImpl::cudnn && c.launches > 0;
  return c;
}

}  // namespace cutrain
