// TEMPORARY (branch `bench` only): declarations of GPU launchers that other branches are adding
// right now (kernels/elementwise.h, batchnorm.h, input.h, reduce.h), copied from the agreed
// signatures so bench_kernels_gpu compiles before they are merged. DELETE THIS FILE AT MERGE
// and include the real headers in bench/gpu_memory_bound.h instead; the real ones win if they
// differ (then adapt the calls there).
//
// Assumptions the bench makes about them (checked by its validation against the CPU):
//   - every pointer is a device pointer (input_normalize_gpu's mean/stddev/crop too);
//   - input_normalize_gpu with crop == nullptr and Hin == Win == S converts the images as they
//     are, like input_normalize_cpu (no crop, no flip);
//   - sum_gpu writes (or adds to) *out the fp32 sum of x; the bench zeroes *out first, which
//     is right either way.
#pragma once
#include <cstdint>

#include "kernels/gpu.h"
#include "kernels/half.h"

namespace cutrain {

struct InputCrop;  // kernels/input.h: per-sample crop and flip

template <typename T> void relu_forward_gpu(int64_t n, const T* x, T* y, cudaStream_t stream);
template <typename T>
void relu_backward_gpu(int64_t n, const T* y, const T* dy, T* dx, cudaStream_t stream);
template <typename T>
void add_forward_gpu(int64_t n, const T* a, const T* b, T* y, cudaStream_t stream);
template <typename T> void accumulate_gpu(int64_t n, const T* dy, T* dx, cudaStream_t stream);

template <typename T>
void batchnorm_forward_train_gpu(int64_t M, int C, const T* x, const float* gamma,
                                 const float* beta, double eps, double momentum, bool relu,
                                 T* y, float* save_mean, float* save_invstd,
                                 float* running_mean, float* running_var, cudaStream_t stream);
template <typename T>
void batchnorm_backward_train_gpu(int64_t M, int C, const T* x, const T* y, const T* dy,
                                  const float* gamma, const float* save_mean,
                                  const float* save_invstd, bool relu, T* dx, float* dgamma,
                                  float* dbeta, cudaStream_t stream);

template <typename T>
void input_normalize_gpu(int N, int Hin, int Win, int C, int S, const uint8_t* x,
                         const InputCrop* crop, const float* mean, const float* stddev, T* y,
                         cudaStream_t stream);

template <typename T> void sum_gpu(int64_t n, const T* x, float* out, cudaStream_t stream);

}  // namespace cutrain
