#include "kernels/cast.h"

#include "kernels/check.h"

namespace cutrain {

template <typename Src, typename Dst>
void cast_cpu(int64_t n, const Src* src, Dst* dst) {
  for (int64_t i = 0; i < n; i++) dst[i] = Dst(acc_t<Src>(src[i]));
}

#define CUTRAIN_CAST(S, D) template void cast_cpu<S, D>(int64_t, const S*, D*);
CUTRAIN_CAST(float, float)
CUTRAIN_CAST(float, half_t)
CUTRAIN_CAST(float, double)
CUTRAIN_CAST(half_t, float)
CUTRAIN_CAST(half_t, half_t)
CUTRAIN_CAST(half_t, double)
CUTRAIN_CAST(double, float)
CUTRAIN_CAST(double, half_t)
CUTRAIN_CAST(double, double)
#undef CUTRAIN_CAST

#if !defined(CUTRAIN_CUDA)
void cast_f32_to_f16_gpu(int64_t, const float*, half_t*, cudaStream_t) {
  throw Error("cast_f32_to_f16_gpu: " + gpu_unavailable_reason());
}
void cast_f16_to_f32_gpu(int64_t, const half_t*, float*, cudaStream_t) {
  throw Error("cast_f16_to_f32_gpu: " + gpu_unavailable_reason());
}
#endif

}  // namespace cutrain
