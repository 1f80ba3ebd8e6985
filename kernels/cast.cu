// fp32 <-> fp16 casts on the GPU.
//
// Math: cast.h.
// Launch: one thread per element, grid-stride loop, 256 threads a block.
// Bytes: cast_gpu_cost (cast.h): 6 per element (read 4 + write 2, or read 2 + write 4). Memory
//   bound: the target is the device-to-device copy bandwidth.
// Flops: cast_gpu_cost: none.
// Precision: __float2half_rn rounds to nearest even like float_to_half_bits; must equal
//   cast_cpu<float, half_t> and cast_cpu<half_t, float> bit for bit.
#include <cuda_fp16.h>

#include "kernels/cast.h"
#include "kernels/check.h"

namespace cutrain {

__global__ void cast_f32_to_f16_kernel(int64_t n, const float* src, __half* dst) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2half_rn(src[i]);
}

__global__ void cast_f16_to_f32_kernel(int64_t n, const __half* src, float* dst) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __half2float(src[i]);
}

static int grid_for(int64_t n, int block) {
  const int64_t blocks = (n + block - 1) / block;
  return int(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1) : 65535 * 8);
}

void cast_f32_to_f16_gpu(int64_t n, const float* src, half_t* dst, cudaStream_t stream) {
  cast_f32_to_f16_kernel<<<grid_for(n, 256), 256, 0, stream>>>(n, src,
                                                               reinterpret_cast<__half*>(dst));
  LAUNCH_CHECK();
}

void cast_f16_to_f32_gpu(int64_t n, const half_t* src, float* dst, cudaStream_t stream) {
  cast_f16_to_f32_kernel<<<grid_for(n, 256), 256, 0, stream>>>(
      n, reinterpret_cast<const __half*>(src), dst);
  LAUNCH_CHECK();
}

}  // namespace cutrain
