// defines: Pool2dShape, max pooling and global average pooling, forward and backward, CPU
// reference and GPU.
//
// Math:
//   max pooling, x (N,H,W,C) -> y (N,P,Q,C), window R x S, channels never mix:
//   y[n][p][q][c] = max over (r,s) in window(p,q) of x[n][p*Sh - Ph + r][q*Sw - Pw + s][c]
//   where positions outside the image are left out (-inf padding, not zero padding: a window
//   of negative values must not report 0).
//   P = (H + 2*Ph - R) / Sh + 1,  Q = (W + 2*Pw - S) / Sw + 1
//   dx[n][h][w][c] += sum over the windows (p,q) whose argmax is (h,w) of dy[n][p][q][c]
//   The argmax is the first maximum in row-major window order (r outer, s inner), so a tie
//   sends the whole gradient to one input, never splits it. A NaN counts as the maximum, so
//   an upstream overflow reaches the loss (and the loss scaler) instead of vanishing here.
//
//   global average pooling, x (N,H,W,C) -> y (N,C):
//   y[n][c]        = (1 / (H*W)) * sum_{h,w} x[n][h][w][c]
//   dx[n][h][w][c] += dy[n][c] / (H*W)
//   Backward functions accumulate into dx (+=), as everywhere in kernels/.
// Launch: pool.cu launches them, one kernel each, 256 threads a block, grid-stride:
//   maxpool forward: one thread per output element.
//   maxpool backward: one thread per *input* element, gathering dy from the windows that
//     contain it whose argmax (recomputed with the forward's rule) it is, in the CPU's window
//     order, summed in fp32 and rounded once: deterministic, no atomics.
//   global average pool: one thread per (n, c) summing the H*W pixels in order (forward), one
//     thread per element of dx (backward).
// Bytes: memory bound, each tensor moved once:
//   maxpool2d_forward_gpu_cost        x read, y written (windows overlapping in L2 ignored)
//   maxpool2d_backward_gpu_cost       x and dy read, dx read and written
//   global_avgpool_forward_gpu_cost   x read, y (N,C) written
//   global_avgpool_backward_gpu_cost  dy (N,C) read, dx read and written
// Flops:
//   maxpool2d_forward_gpu_cost        N*P*Q*C*R*S compares
//   maxpool2d_backward_gpu_cost       each input redoes the argmax (R*S compares) of about
//                                     ceil(R/Sh) * ceil(S/Sw) windows that contain it
//   global_avgpool_forward_gpu_cost   N*H*W*C adds
//   global_avgpool_backward_gpu_cost  2*N*H*W*C (a division and an add per element)
// Precision: max is exact in any type. Sums (the average, and the gradient of an input that
//   is the argmax of several overlapping windows) run in acc_t<T> and are rounded to T once;
//   the GPU sums in the CPU's order, so its results equal the CPU's bit for bit.
#pragma once
#include <cstdint>

#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/launch_plan.h"

namespace cutrain {

struct Pool2dShape {
  int N = 0, H = 0, W = 0, C = 0;  // input (N,H,W,C); the output keeps N and C
  int R = 0, S = 0;                // window height and width
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;

  int P() const { return (H + 2 * pad_h - R) / stride_h + 1; }
  int Q() const { return (W + 2 * pad_w - S) / stride_w + 1; }
  int64_t input_numel() const { return int64_t(N) * H * W * C; }
  int64_t output_numel() const { return int64_t(N) * P() * Q() * C; }
};

// Throws cutrain::Error, naming `op` and the problem, when the shape is impossible:
// non-positive sizes, stride < 1, padding < 0, a window larger than the padded input, or
// padding >= the window (then a window could hold padding only, and its max would be -inf).
// pad < window is also enough to make every window overlap the image.
void pool2d_check_shape(const Pool2dShape& s, const char* op = "maxpool2d");

template <typename T> void maxpool2d_forward_cpu(const Pool2dShape& s, const T* x, T* y);

// dx += (see above). Takes x, not saved argmax indices: the argmax is recomputed from x with
// the forward's own rule. Storing indices would cost an int32 per output (twice the size of
// an fp16 y) that must be kept from forward to backward; x is kept alive anyway, and R*S
// compares per output are cheap next to the memory traffic. It also leaves no second source
// of truth for tie-breaking that a GPU kernel could disagree with.
template <typename T>
void maxpool2d_backward_cpu(const Pool2dShape& s, const T* x, const T* dy, T* dx);

template <typename T>
void global_avgpool_forward_cpu(int N, int H, int W, int C, const T* x, T* y);
// dx += dy / (H*W), broadcast over h, w
template <typename T>
void global_avgpool_backward_cpu(int N, int H, int W, int C, const T* dy, T* dx);

// --- GPU (CUDA builds only; device pointers; queued on `stream`, never synchronising) ---
// kernels/pool.cu. T = float or half_t; the same math, tie and NaN rules and accumulate rule as
// the CPU functions above, and the same order of every sum, so the results are equal to the
// CPU's bit for bit. The max-pool shape must pass pool2d_check_shape (the launchers call it).
// Launch, bytes and flops: the opening comment.
template <typename T>
void maxpool2d_forward_gpu(const Pool2dShape& s, const T* x, T* y, cudaStream_t stream);
inline LaunchCost maxpool2d_forward_gpu_cost(const Pool2dShape& s, size_t elem) {
  return {"maxpool2d_forward", 1, nbytes(s.input_numel() + s.output_numel(), elem),
          double(s.output_numel()) * s.R * s.S};
}
template <typename T>
void maxpool2d_backward_gpu(const Pool2dShape& s, const T* x, const T* dy, T* dx,
                            cudaStream_t stream);
inline LaunchCost maxpool2d_backward_gpu_cost(const Pool2dShape& s, size_t elem) {
  const double windows = double((s.R + s.stride_h - 1) / s.stride_h) *
                         double((s.S + s.stride_w - 1) / s.stride_w);
  return {"maxpool2d_backward", 1, nbytes(3 * s.input_numel() + s.output_numel(), elem),
          double(s.input_numel()) * windows * s.R * s.S};
}
template <typename T>
void global_avgpool_forward_gpu(int N, int H, int W, int C, const T* x, T* y,
                                cudaStream_t stream);
inline LaunchCost global_avgpool_forward_gpu_cost(int N, int H, int W, int C, size_t elem) {
  const int64_t x = int64_t(N) * H * W * C;
  return {"global_avgpool_forward", 1, nbytes(x + int64_t(N) * C, elem), double(x)};
}
template <typename T>
void global_avgpool_backward_gpu(int N, int H, int W, int C, const T* dy, T* dx,
                                 cudaStream_t stream);
inline LaunchCost global_avgpool_backward_gpu_cost(int N, int H, int W, int C, size_t elem) {
  const int64_t x = int64_t(N) * H * W * C;  // dx read and written, dy (N,C) read
  return {"global_avgpool_backward", 1, nbytes(2 * x + int64_t(N) * C, elem), 2.0 * double(x)};
}

}  // namespace cutrain
