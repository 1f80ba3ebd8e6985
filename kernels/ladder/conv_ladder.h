// defines: ConvRung and conv2d_{forward,backward_data,backward_filter}_rung_gpu, every rung of
// the conv ladder (kernels/ladder/README.md) behind one switch, for the ladder's tests and its
// benchmark rows (bench/gpu_gemm_layers.h), and each rung's cost. Training runs none of them
// directly: the production kernels (conv2d.h's direct and tc, `--conv`) take a rung only once
// a GPU has measured it ahead.
//
//   v1 direct     conv2d.cu's direct kernels: a thread per output, plain loops (f16 here)
//   v2 gemm       the passes as one implicit GEMM over gathered operands, each element read
//                 from global memory as needed, on tc_gemm's grid and split-K (gemm_plain.cuh)
//   v3 fma        v2 from shared-memory tiles, a 4 x 8 piece a thread, CUDA cores (gemm_fma.cuh)
//   v4 tc         the same tiles on tensor cores, WMMA (tc_gemm.cuh: the production tc path)
//   v5 async      v4 with the tiles' loads pipelined through cp.async (tc_gemm_async.cuh)
// Each rung's header says what changed from the rung below and why it should be faster.
//
// Math: conv2d.h's, with its shapes, layouts and accumulate rule (+=); its conv2d_*_cpu is
//   every rung's CPU reference.
// Launch: conv_ladder.cu switches to the rung: v1 conv2d.cu's direct kernels (a thread per
//   output, 1 launch a pass); v2 to v5 tc_gemm's tile grid (tc_plan.h: 1 launch, 2 under
//   split-K), the main loop each rung's own. The bias gradient: bias_grad_gpu (1 launch).
// Bytes: fp16 storage; each rung reads the operands and moves the outputs as conv2d.h counts:
//   conv2d_forward_rung_gpu_cost          v1 as conv2d_forward_gpu_cost's direct, v2 to v5 as
//                                         its tc (the same GEMM, tiles and split-K)
//   conv2d_backward_data_rung_gpu_cost    likewise (conv2d_backward_data_gpu_cost)
//   conv2d_backward_filter_rung_gpu_cost  likewise (conv2d_backward_filter_gpu_cost)
// Flops: 2*N*P*Q*K*R*S*C a pass, the same cost functions (conv2d_forward_rung_gpu_cost, ...;
//   v2 to v5's data gradient with a stride > 1 multiplies the gathered zeros too); on tensor
//   cores for v4 and v5, on CUDA cores (fp32 fma) for v1 to v3.
// Precision: fp16 storage, fp32 sums, rounded to fp16 once; every rung agrees with the CPU
//   within the tc path's tolerance, and v5 gives v4's bits.
// The rungs: CUDA builds only (device pointers, queued on `stream`); conv_rung_name
// (conv_ladder.cpp) and the costs: every build.
#pragma once
#include <string>

#include "kernels/conv2d.h"
#include "kernels/launch_plan.h"

namespace cutrain {

enum class ConvRung { direct, gemm, fma, tc, async };
constexpr ConvRung kConvRungs[] = {ConvRung::direct, ConvRung::gemm, ConvRung::fma, ConvRung::tc,
                                   ConvRung::async};
// "v1 direct", "v2 gemm", "v3 fma", "v4 tc", "v5 async"
const char* conv_rung_name(ConvRung r);

void conv2d_forward_rung_gpu(ConvRung r, const Conv2dShape& s, const half_t* x, const half_t* w,
                             const half_t* b, half_t* y, cudaStream_t stream);
void conv2d_backward_data_rung_gpu(ConvRung r, const Conv2dShape& s, const half_t* dy,
                                   const half_t* w, half_t* dx, cudaStream_t stream);
void conv2d_backward_filter_rung_gpu(ConvRung r, const Conv2dShape& s, const half_t* x,
                                     const half_t* dy, half_t* dw, half_t* db,
                                     cudaStream_t stream);

// Each rung's cost, as a function of the shape (fp16: elem = 2): v1 costs what conv2d.h's direct
// implementation does, v2 to v5 what its tc does (they run v4's GEMMs over the same operands
// with the same tile plan and split-K, and differ only in their main loop), v2's and v3's flops
// on CUDA cores. The kernel is named by pass and rung: "conv2d_forward v3 fma".
inline ConvImpl conv_rung_impl(ConvRung r) {
  return r == ConvRung::direct ? ConvImpl::direct : ConvImpl::tc;
}
inline LaunchCost conv_rung_cost(ConvRung r, const char* pass, LaunchCost c) {
  c.kernel = std::string(pass) + " " + conv_rung_name(r);
  if (r == ConvRung::gemm || r == ConvRung::fma) c.tensor = false;
  return c;
}
inline LaunchCost conv2d_forward_rung_gpu_cost(ConvRung r, const Conv2dShape& s, bool bias) {
  return conv_rung_cost(r, "conv2d_forward",
                        conv2d_forward_gpu_cost(conv_rung_impl(r), s, sizeof(half_t), bias));
}
inline LaunchCost conv2d_backward_data_rung_gpu_cost(ConvRung r, const Conv2dShape& s) {
  return conv_rung_cost(r, "conv2d_backward_data",
                        conv2d_backward_data_gpu_cost(conv_rung_impl(r), s, sizeof(half_t)));
}
inline LaunchCost conv2d_backward_filter_rung_gpu_cost(ConvRung r, const Conv2dShape& s, bool dw,
                                                       bool db) {
  return conv_rung_cost(
      r, "conv2d_backward_filter",
      conv2d_backward_filter_gpu_cost(conv_rung_impl(r), s, sizeof(half_t), dw, db));
}

}  // namespace cutrain
