// defines: BnRung and batchnorm_{forward,backward}_train_rung_gpu, the BatchNorm+ReLU ladder
// (kernels/ladder/README.md): the training forward and backward of kernels/batchnorm.h three
// ways, for the ladder's tests and benchmark rows, and each rung's cost. Training runs v2 (the
// production kernels) until a GPU has measured v3 ahead of it.
//
//   v1 naive    a thread per channel sums its M values (the mean, then the variance, in plain
//               fp32 loops); then a thread per element normalises. Two passes over x plus
//               one over x and y, but the sums use C threads: a GPU of 100,000 threads runs 32.
//   v2 blocked  kernels/batchnorm.cu: 32 channels x 8 row lanes a block, blocked pairwise sums
//               in every thread, the row groups' partials added by the last block to arrive.
//               x read three times (mean, variance, y), one element a thread at a time.
//   v3 vector   one pass for both statistics (Welford's update in each thread, Chan's merge of
//               the lanes and of the row groups, kernels/ladder/welford.h), so x is read twice,
//               not three times; 16-byte loads and stores (8 halves or 4 floats a thread), the
//               ReLU fused as before. Backward: v2's two passes, vectorised the same way.
//               Needs C a multiple of the vector V (8 for fp16, 4 for fp32) with C / V <=
//               kBnVectorBlock (256: a row's vectors fit one block), 16-byte aligned tensors
//               and M < 2^24 (the counts are fp32); otherwise it runs v2, and bn_rung_runs says
//               so.
//
// Math: batchnorm.h's training forward and backward, with its shapes, running averages and
//   accumulate rule (dx, dgamma, dbeta +=); its batchnorm_*_cpu is every rung's CPU reference.
//   T = float or half_t.
// Launch: batchnorm_ladder.cu (v1, v3) and batchnorm.cu (v2). Forward: v1 a thread per
//   channel (stats), then a thread per element (normalise): 2 launches; v2 3; v3 a grid of
//   256-thread blocks of lanes over the rows (stats, finished by the last block), then a
//   thread per vector: 2. Backward: 1 launch for the sums, + 1 for dx, on every rung.
// Bytes: n = M*C elements of sizeof(T), per call:
//   batchnorm_forward_train_rung_gpu_cost   v1 4n (x read by the mean, the variance and the
//                                           normalise pass; y written), v2 4n, v3 3n (x read
//                                           by the one statistics pass and by normalise)
//   batchnorm_backward_train_rung_gpu_cost  every rung 2n for the sums (x, dy; + y when fused),
//                                           + 4n with dx (x, dy, dx read, dx written; + y)
// Flops: per element, + 1 with the fused ReLU:
//   batchnorm_forward_train_rung_gpu_cost   v1 and v2 ~8, v3 ~11 (Welford's update, a division
//                                           among them, where v1 and v2 take 1 + 3)
//   batchnorm_backward_train_rung_gpu_cost  every rung ~6 for the sums, ~8 more for dx
// Precision: fp32 sums and per-channel values, y and dx rounded to T once; v1 sums in one
//   running fp32 sum a channel (M roundings), v2 blocked pairwise, v3 Welford/Chan on shifted
//   values (as accurate as v2: tests/kernels/welford_test.cpp). Each agrees with the CPU within
//   a tolerance; v2 and v3 give the same bits on every run.
// The kernels: CUDA builds only, queued on `stream`; the names, bn_rung_runs and the costs
// (batchnorm_ladder.cpp and below): every build.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/batchnorm.h"
#include "kernels/launch_plan.h"

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

// Each rung's cost for a call that runs it (the shape's conditions of bn_rung_runs applied: v3
// on a shape it cannot take costs v2; aligned tensors assumed). The kernel is named by pass and
// the rung that runs: "batchnorm_forward_train v3 vector".
inline LaunchCost batchnorm_forward_train_rung_gpu_cost(BnRung r, int64_t M, int C, size_t elem,
                                                        bool relu) {
  r = bn_rung_runs(r, M, C, elem, nullptr, 0);
  LaunchCost c = batchnorm_forward_train_gpu_cost(M, C, elem, relu, false);  // v2
  c.kernel += std::string(" ") + bn_rung_name(r);
  const double n = double(M) * C;
  if (r == BnRung::naive) c.launches = 2;  // stats, normalise: x still read three times
  if (r == BnRung::vector) {  // one statistics pass and normalise: x read twice
    c.launches = 2;
    c.bytes = 3 * nbytes(M * C, elem);
    c.flops = (11.0 + relu) * n;
  }
  return c;
}
inline LaunchCost batchnorm_backward_train_rung_gpu_cost(BnRung r, int64_t M, int C, size_t elem,
                                                         bool relu, bool dx) {
  r = bn_rung_runs(r, M, C, elem, nullptr, 0);
  LaunchCost c = batchnorm_backward_train_gpu_cost(M, C, elem, relu, dx, false);  // every rung
  c.kernel += std::string(" ") + bn_rung_name(r);
  return c;
}

}  // namespace cutrain
