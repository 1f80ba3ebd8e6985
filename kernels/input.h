// defines: input_normalize_crop_cpu and input_normalize_gpu, the conversion train, eval and
// predict run on every batch (through model_input, train/engine/batch_input.h): the loader's uint8
// images to the network's normalised input, with each sample's crop window and horizontal
// flip applied on the way; input_normalize_cpu, the same without crop or flip; InputCrop, one
// sample's window; input_check_norm and input_check_crops, the argument checks.
//
// The loader delivers each image uncut (data/image.h: the crop window with a margin of --pad
// pixels, Hin = Win = P) and an InputCrop per image (Batch::crops, and on a GPU Batch::d_crops,
// copied with the images on the loader's copy stream), so the crop and the flip happen here,
// in the same pass as the normalisation, on either device.
//
// Math: y[n][i][j][c] = (x[n][top+i][jj][c] / 255 - mean[c]) / stddev[c],
//       jj = flip ? left + S-1-j : left + j, with (top, left) = crop[n] and
//       flip = crop[n].flip XOR mirror (mirror: every sample mirrored once more, as test-time
//       flips want the mirror of what evaluation sees: train/engine/evaluate.h)
//   x (N,Hin,Win,C) uint8 NHWC, as the loader delivers it (uncut)
//   crop (N) InputCrop: the S x S window of sample n starts at (top, left); flip mirrors it
//   mean, stddev (C) float: per-channel statistics of the data on the [0,1] scale
//   y (N,S,S,C) in T (float, double or half_t; the GPU takes float or half_t)
// Launch: input.cu launches it: one kernel, grid (gx, S) of 256 threads (input_gpu_grid below).
// Bytes: input_normalize_gpu_cost: 1 byte read and sizeof(T) bytes written per element of y:
//   N*S*S*C*(1 + sizeof(T)). Memory bound.
// Flops: input_normalize_gpu_cost: 3 per entry of each block's 256 x C table (two divisions,
//   a subtraction), none per element; the CPU: 3 per element.
// Precision: computed in acc_t<T> (fp32 for f16 and f32 output, f64 for f64), both divisions
//   true divisions (correctly rounded, not multiplications by a reciprocal), rounded to T once.
//   input_value() below is that formula, shared by the CPU loop and the GPU kernel, so the GPU
//   gives the CPU's bits exactly (tests/kernels/input_gpu_test.cpp asserts it).
//   Threads: OpenMP over whole images; the same bits on any thread count.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/hd.h"
#include "kernels/launch_plan.h"

namespace cutrain {

// One sample's crop window and flip. Plain data (no constructor), so an array of them can be
// copied to the device as it is.
struct InputCrop {
  int32_t top = 0, left = 0;  // the window's first row and column in the input image
  int32_t flip = 0;           // nonzero: mirror the window left to right
};

// (x / 255 - mean) / stddev in A, rounded once per operation: the one formula of this file.
template <typename A>
CUTRAIN_HD inline A input_value(uint8_t x, A mean, A stddev) {
  return div_rn(sub_rn(div_rn(A(x), A(255)), mean), stddev);
}

// Throws cutrain::Error with a clear message unless mean and stddev each hold C finite values
// and every stddev is > 0 (a zero would divide by zero, a negative one flip the image).
void input_check_norm(int C, const std::vector<float>& mean, const std::vector<float>& stddev);

// Throws cutrain::Error naming the first sample whose S x S window does not lie inside the
// Hin x Win image (top, left >= 0, top + S <= Hin, left + S <= Win). crop (N), host memory;
// null means no crop for every sample (then S must not exceed the image).
void input_check_crops(int N, int Hin, int Win, int S, const InputCrop* crop);

// y = the formula above on the host. crop may be null (every window at (0,0), no flip).
// Checks its arguments first: sizes positive, S <= Hin and Win, input_check_norm,
// input_check_crops.
template <typename T>
void input_normalize_crop_cpu(int N, int Hin, int Win, int C, int S, const uint8_t* x,
                              const InputCrop* crop, const std::vector<float>& mean,
                              const std::vector<float>& stddev, T* y, bool mirror = false);

// The images already have the network's size (S = Hin = Win): no crop, no flip.
// Equal to input_normalize_crop_cpu with zero crops (it calls it).
template <typename T>
void input_normalize_cpu(int N, int S, int C, const uint8_t* x, const std::vector<float>& mean,
                         const std::vector<float>& stddev, T* y);

// --- GPU (CUDA builds only; device pointers; queued on stream) ---

// input_normalize_crop_cpu on the device, bit for bit. x (N,Hin,Win,C), crop (N) or null,
// mean (C), stddev (C) and y (N,S,S,C) are all device pointers. The kernel cannot check the
// crop windows (they are in device memory): the caller validates them on the host with
// input_check_crops before copying them over (the loader checks each window as it is loaded,
// model_input the batch's host copy again before the launch); a window outside the image
// reads out of bounds. The sizes are checked here (C <= 16: the kernel keeps a 256 x C table).
template <typename T>
void input_normalize_gpu(int N, int Hin, int Win, int C, int S, const uint8_t* x,
                         const InputCrop* crop, const float* mean, const float* stddev, T* y,
                         cudaStream_t stream, bool mirror = false);

// The kernel's grid (input.cu), here so that its cost counts the same blocks: blocks of
// kInputBlock threads, each covering rpi output rows of rpi samples (kInputBlock / (S*C) when a
// row is short, else 1); grid (gx, S): gx blocks across the samples, ~8192 blocks in all.
constexpr int kInputBlock = 256;
struct InputGrid {
  int rpi, gx;
};
inline InputGrid input_gpu_grid(int N, int C, int S) {
  const int L = S * C;
  const int rpi = L >= kInputBlock ? 1 : kInputBlock / L;
  const int groups = (N + rpi - 1) / rpi;
  return {rpi, std::max(1, std::min(groups, 8192 / S))};
}

// 1 launch. bytes: the crop windows' bytes read (1 an element), y written. flops: every block
// first fills its 256 x C table (3 an entry: two divisions, a subtraction); none per element.
inline LaunchCost input_normalize_gpu_cost(int N, int /*Hin*/, int /*Win*/, int C, int S,
                                           size_t out_elem) {
  const int64_t n = int64_t(N) * S * S * C;
  const double blocks = double(input_gpu_grid(N, C, S).gx) * S;
  return {"input_normalize", 1, nbytes(n, 1 + out_elem), 3.0 * 256 * C * blocks};
}

}  // namespace cutrain
