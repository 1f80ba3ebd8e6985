// defines: cast_cpu (between float, half_t and double) and the GPU casts between
// fp32 and fp16.
//
// Math: dst[i] = (Dst) src[i]; to half rounds to nearest even, overflow gives inf.
// Launch: cast.cu launches them: one kernel each, a thread per element.
// Bytes: cast_gpu_cost: n*(sizeof(Src) + sizeof(Dst)): 6 per element between fp32 and fp16.
// Flops: cast_gpu_cost: none (a conversion).
// Precision: one rounding to the destination (nearest even), none widening: the GPU casts
//   equal cast_cpu bit for bit.
#pragma once
#include <cstdint>

#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/launch_plan.h"

namespace cutrain {

template <typename Src, typename Dst>
void cast_cpu(int64_t n, const Src* src, Dst* dst);

// GPU versions of cast_cpu<float, half_t> and cast_cpu<half_t, float>; bit-identical to them.
void cast_f32_to_f16_gpu(int64_t n, const float* src, half_t* dst, cudaStream_t stream);
void cast_f16_to_f32_gpu(int64_t n, const half_t* src, float* dst, cudaStream_t stream);
// Either: 1 launch, even for n = 0 (the grid has at least one block); src read, dst written.
inline LaunchCost cast_gpu_cost(int64_t n, size_t from_elem, size_t to_elem) {
  return {"cast", 1, nbytes(n, from_elem + to_elem), 0};
}

}  // namespace cutrain
