// defines: BnRung and batchnorm_{forward,backward}_train_rung_gpu, the BatchNorm+ReLU ladder
// (kernels/ladder/README.md): the training forward and backward of kernels/batchnorm.h three
// ways, for the ladder's tests and benchmark rows. Training runs v2 (the production kernels)
// until a GPU has measured v3 ahead of it.
//
//   v1 naive    a thread per channel sums its M values (the mean, then the variance, in plain
//               fp32 loops); then a thread per element normalises. Two passes over x plus
//               one over y, but the sums use C threads: a GPU of 100,000 threads runs 32.
//   v2 blocked  kernels/batchnorm.cu: 32 channels x 8 row lanes a block, blocked pairwise sums
//               in every thread, the row groups' partials added by the last block to arrive.
//               x read three times (mean, variance, y), one element a thread at a time.
//   v3 vector   one pass for both statistics (Welford's update in each thread, Chan's merge of
//               the lanes and of the row groups, kernels/ladder/welford.h), so x is read twice,
//               not three times; 16-byte loads and stores (8 halves or 4 floats a thread), the
//               ReLU fused as before. Backward: v2's two passes, vectorised the same way.
//               Needs C a multiple of the vector (8 for fp16, 4 for fp32), 16-byte aligned
//               tensors and M < 2^24 (the counts are fp32); otherwise it runs v2, and
//               bn_rung_runs says so.
//
// Math, shapes, the running averages and the accumulate rule (dx, dgamma, dbeta +=) as
// batchnorm.h, whose batchnorm_*_cpu is every rung's CPU reference; fp32 sums; T = float or
// half_t. The kernels: CUDA builds only, queued on `stream`; the names and bn_rung_runs
// (batchnorm_ladder.cpp): every build.
#pragma once
#include <cstdint>

#include "kernels/batchnorm.h"

namespace cutrain {

enum class BnRung { naive, blocked, vector };
constexpr int kBnVectorBlock = 256;  // v3's threads a block: at most that many vectors a row
constexpr BnRung kBnRungs[] = {BnRung::naive, BnRung::blocked, BnRung::vector};
const char* bn_rung_name(BnRung r);  // "v1 naive", "v2 blocked", "v3 vector"

// The rung that runs for these arguments: r, or v2 where v3 cannot (see above).
BnRung bn_rung_runs(BnRung r, int64_t M, int C, size_t elem, const void* const* tensors,
                    int count);

template <typename T>
void batchnorm_forward_train_rung_gpu(BnRung r, int64_t M, int C, const T* x, const float* gamma,
                                      const float* beta, double eps, double momentum, bool relu,
                                      T* y, float* save_mean, float* save_invstd,
                                      float* running_mean, float* running_var,
                                      cudaStream_t stream);
template <typename T>
void batchnorm_backward_train_rung_gpu(BnRung r, int64_t M, int C, const T* x, const T* y,
                                       const T* dy, const float* gamma, const float* save_mean,
                                       const float* save_invstd, bool relu, T* dx, float* dgamma,
                                       float* dbeta, cudaStream_t stream);

}  // namespace cutrain
