// pooling on the GPU: max pool and global average pool, NHWC.
//
// Math: pool.h. Each thread does exactly what the CPU loop does for its element, in the same
//   order:
//   maxpool2d_forward_kernel   y[n][p][q][c] = x[window_argmax]        (maxpool2d_forward_cpu)
//   maxpool2d_backward_kernel  dx[n][h][w][c] += the dy of every window containing (h, w)
//                              whose argmax is (h, w), windows in row-major (p, q) order,
//                              summed in fp32 from the old dx, rounded once
//                              (maxpool2d_backward_cpu: the same sum in the same order).
//                              A gather, not a scatter: no atomics, deterministic.
//   global_avgpool_*           as global_avgpool_forward_cpu / _backward_cpu.
// Launch: every kernel is a grid-stride loop, one thread per element, 256 threads a block; the
//   flat index is split into (n, h, w, c) with c fastest, so a warp touches neighbouring
//   channels: coalesced in NHWC.
// Bytes: pool.h's maxpool2d_forward_gpu_cost, maxpool2d_backward_gpu_cost,
//   global_avgpool_forward_gpu_cost, global_avgpool_backward_gpu_cost.
// Flops: the same (pool.h: maxpool2d_backward_gpu_cost). The backward recomputes the argmax of
//   each window containing its input: (about (R/Sh)*(S/Sw) windows) x R*S compares per input,
//   cheap next to the memory traffic for the usual 2x2 and 3x3 windows.
// Precision: every result equals the CPU's bit for bit (max is exact; sums in fp32 in the CPU's
//   order, rounded once).
#include "kernels/check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/pool.h"

namespace cutrain {

namespace {

// The flat index into x of the maximum of window (p, q) of image n, channel c: the first
// maximum in row-major window order; a NaN beats any number and the first NaN stays; padding
// is left out. The same rule as pool.cpp's window_argmax, which forward and backward share.
template <typename S>
__device__ int64_t window_argmax(const Pool2dShape& sh, const S* x, int n, int p, int q,
                                 int c) {
  int64_t best_i = -1;
  float best = 0;
  const int h0 = p * sh.stride_h - sh.pad_h, w0 = q * sh.stride_w - sh.pad_w;
  for (int r = 0; r < sh.R; r++) {
    const int h = h0 + r;
    if (h < 0 || h >= sh.H) continue;
    for (int s = 0; s < sh.S; s++) {
      const int w = w0 + s;
      if (w < 0 || w >= sh.W) continue;
      const int64_t i = ((int64_t(n) * sh.H + h) * sh.W + w) * sh.C + c;
      const float v = to_acc(x[i]);
      if (best_i < 0 || v > best || (isnan(v) && !isnan(best))) {
        best = v;
        best_i = i;
      }
    }
  }
  return best_i;  // >= 0: pool2d_check_shape makes every window overlap the image
}

template <typename S>
__global__ void maxpool2d_forward_kernel(Pool2dShape sh, int P, int Q, const S* x, S* y) {
  const int64_t total = int64_t(sh.N) * P * Q * sh.C;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total;
       o += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(o % sh.C);
    int64_t t = o / sh.C;
    const int q = int(t % Q);
    t /= Q;
    const int p = int(t % P);
    const int n = int(t / P);
    y[o] = x[window_argmax(sh, x, n, p, q, c)];
  }
}

template <typename S>
__global__ void maxpool2d_backward_kernel(Pool2dShape sh, int P, int Q, const S* x,
                                          const S* dy, S* dx) {
  const int64_t total = int64_t(sh.N) * sh.H * sh.W * sh.C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % sh.C);
    int64_t t = i / sh.C;
    const int w = int(t % sh.W);
    t /= sh.W;
    const int h = int(t % sh.H);
    const int n = int(t / sh.H);
    // Window p covers rows p*Sh - Ph .. p*Sh - Ph + R - 1, so it contains row h when
    // h + Ph - R + 1 <= p*Sh <= h + Ph; likewise for columns.
    const int ph = h + sh.pad_h - sh.R + 1, qw = w + sh.pad_w - sh.S + 1;
    const int p_lo = ph <= 0 ? 0 : (ph + sh.stride_h - 1) / sh.stride_h;
    const int q_lo = qw <= 0 ? 0 : (qw + sh.stride_w - 1) / sh.stride_w;
    const int p_hi = min(P - 1, (h + sh.pad_h) / sh.stride_h);
    const int q_hi = min(Q - 1, (w + sh.pad_w) / sh.stride_w);
    float acc = to_acc(dx[i]);
    for (int p = p_lo; p <= p_hi; p++)
      for (int q = q_lo; q <= q_hi; q++)
        if (window_argmax(sh, x, n, p, q, c) == i)
          acc += to_acc(dy[((int64_t(n) * P + p) * Q + q) * sh.C + c]);
    dx[i] = from_acc<S>(acc);
  }
}

// y[n][c] = (sum over the H*W pixels in order of x[n][.][.][c]) / (H*W); one thread per (n, c).
template <typename S>
__global__ void global_avgpool_forward_kernel(int N, int64_t HW, int C, const S* x, S* y) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < int64_t(N) * C;
       o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = o / C;
    const int c = int(o % C);
    const S* xn = x + n * HW * C + c;
    float sum = 0;
    for (int64_t i = 0; i < HW; i++) sum += to_acc(xn[i * C]);
    y[o] = from_acc<S>(sum / float(HW));
  }
}

// dx[n][h][w][c] += dy[n][c] / (H*W); one thread per element of dx.
template <typename S>
__global__ void global_avgpool_backward_kernel(int N, int64_t HW, int C, const S* dy, S* dx) {
  const int64_t total = int64_t(N) * HW * C;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total;
       j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = j / (HW * C);
    const int c = int(j % C);
    dx[j] = from_acc<S>(to_acc(dx[j]) + to_acc(dy[n * C + c]) / float(HW));
  }
}

void check_avgpool(const char* op, int N, int H, int W, int C) {
  CHECK(N > 0 && H > 0 && W > 0 && C > 0, op << ": sizes must be positive, got (N,H,W,C) = ("
                                             << N << "," << H << "," << W << "," << C << ")");
}

}  // namespace

template <typename T>
void maxpool2d_forward_gpu(const Pool2dShape& s, const T* x, T* y, cudaStream_t stream) {
  pool2d_check_shape(s, "maxpool2d_forward_gpu");
  maxpool2d_forward_kernel<<<grid_size(s.output_numel(), 256), 256, 0, stream>>>(
      s, s.P(), s.Q(), dev(x), dev(y));
  LAUNCH_CHECK();
}

template <typename T>
void maxpool2d_backward_gpu(const Pool2dShape& s, const T* x, const T* dy, T* dx,
                            cudaStream_t stream) {
  pool2d_check_shape(s, "maxpool2d_backward_gpu");
  maxpool2d_backward_kernel<<<grid_size(s.input_numel(), 256), 256, 0, stream>>>(
      s, s.P(), s.Q(), dev(x), dev(dy), dev(dx));
  LAUNCH_CHECK();
}

template <typename T>
void global_avgpool_forward_gpu(int N, int H, int W, int C, const T* x, T* y,
                                cudaStream_t stream) {
  check_avgpool("global_avgpool_forward_gpu", N, H, W, C);
  global_avgpool_forward_kernel<<<grid_size(int64_t(N) * C, 256), 256, 0, stream>>>(
      N, int64_t(H) * W, C, dev(x), dev(y));
  LAUNCH_CHECK();
}

template <typename T>
void global_avgpool_backward_gpu(int N, int H, int W, int C, const T* dy, T* dx,
                                 cudaStream_t stream) {
  check_avgpool("global_avgpool_backward_gpu", N, H, W, C);
  global_avgpool_backward_kernel<<<grid_size(int64_t(N) * H * W * C, 256), 256, 0, stream>>>(
      N, int64_t(H) * W, C, dev(dy), dev(dx));
  LAUNCH_CHECK();
}

#define CUTRAIN_INSTANTIATE(T)                                                                 \
  template void maxpool2d_forward_gpu<T>(const Pool2dShape&, const T*, T*, cudaStream_t);      \
  template void maxpool2d_backward_gpu<T>(const Pool2dShape&, const T*, const T*, T*,          \
                                          cudaStream_t);                                       \
  template void global_avgpool_forward_gpu<T>(int, int, int, int, const T*, T*, cudaStream_t); \
  template void global_avgpool_backward_gpu<T>(int, int, int, int, const T*, T*, cudaStream_t);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
