// defines: ConvRung and conv2d_{forward,backward_data,backward_filter}_rung_gpu, every rung of
// the conv ladder (kernels/ladder/README.md) behind one switch, for the ladder's tests and its
// benchmark rows (bench/gpu_gemm_layers.h). Training runs none of them directly: the
// production kernels (conv2d.h's direct and tc, `--conv`) take a rung only once a GPU has
// measured it ahead.
//
//   v1 direct     conv2d.cu's direct kernels: a thread per output, plain loops (f16 here)
//   v2 fma        the implicit GEMM from shared-memory tiles on CUDA cores (gemm_fma.cuh)
//   v3 tc         the same on tensor cores, WMMA (tc_gemm.cuh: the production tc path)
//   v4 async      v3 with the tiles' loads pipelined through cp.async (tc_gemm_async.cuh)
//
// Same math, shapes, layouts and accumulate rule (+=) as conv2d.h, whose conv2d_*_cpu is every
// rung's CPU reference; fp16 storage, fp32 sums. The rungs: CUDA builds only (device pointers,
// queued on `stream`); conv_rung_name (conv_ladder.cpp): every build.
#pragma once
#include <string>

#include "kernels/conv2d.h"

namespace cutrain {

enum class ConvRung { direct, fma, tc, async };
constexpr ConvRung kConvRungs[] = {ConvRung::direct, ConvRung::fma, ConvRung::tc,
                                   ConvRung::async};
// "v1 direct", "v2 fma", "v3 tc", "v4 async"
const char* conv_rung_name(ConvRung r);

void conv2d_forward_rung_gpu(ConvRung r, const Conv2dShape& s, const half_t* x, const half_t* w,
                             const half_t* b, half_t* y, cudaStream_t stream);
void conv2d_backward_data_rung_gpu(ConvRung r, const Conv2dShape& s, const half_t* dy,
                                   const half_t* w, half_t* dx, cudaStream_t stream);
void conv2d_backward_filter_rung_gpu(ConvRung r, const Conv2dShape& s, const half_t* x,
                                     const half_t* dy, half_t* dw, half_t* db,
                                     cudaStream_t stream);

}  // namespace cutrain
