// defines: input_normalize_cpu, the conversion the trainer runs on every batch: the loader's
// uint8 images to the network's normalised input; and input_check_norm, its argument check.
//
// math: y[n][h][w][c] = (x[n][h][w][c] / 255 - mean[c]) / stddev[c]
//   x (N,S,S,C) uint8 NHWC, as the loader delivers it (already flipped and cropped per sample)
//   mean, stddev (C) float: per-channel statistics of the data on the [0,1] scale
//   y (N,S,S,C) in T (float, double or half_t)
// precision: computed in acc_t<T> (fp32 for f16 and f32 output, f64 for f64), both divisions
// true divisions (correctly rounded, not multiplications by a reciprocal), rounded to T once.
// The GPU version must use IEEE division (__fdiv_rn) to give the same bits.
// cost: 1 byte read and sizeof(T) bytes written per element, 3 flops: memory bound.
// threads: OpenMP over whole images; the same bits on any thread count.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/half.h"

namespace cutrain {

// Throws cutrain::Error with a clear message unless mean and stddev each hold C finite values
// and every stddev is > 0 (a zero would divide by zero, a negative one flip the image).
void input_check_norm(int C, const std::vector<float>& mean, const std::vector<float>& stddev);

// y = (x / 255 - mean) / stddev as above. Checks its arguments first: N, S, C positive, then
// input_check_norm.
template <typename T>
void input_normalize_cpu(int N, int S, int C, const uint8_t* x, const std::vector<float>& mean,
                         const std::vector<float>& stddev, T* y);

}  // namespace cutrain
