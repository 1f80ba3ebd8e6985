// The BatchNorm ladder's host side (batchnorm_ladder.h): its names and which rung runs, in every
// build. The kernels are batchnorm_ladder.cu; the CPU reference every rung is tested against
// is batchnorm_*_cpu (kernels/batchnorm.h), the math they all compute.
#include <cstdint>

#include "kernels/ladder/batchnorm_ladder.h"

namespace cutrain {

const char* bn_rung_name(BnRung r) {
  switch (r) {
    case BnRung::naive: return "v1 naive";
    case BnRung::blocked: return "v2 blocked";
    case BnRung::vector: return "v3 vector";
  }
  return "?";
}

namespace {
bool aligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
}  // namespace

BnRung bn_rung_runs(BnRung r, int64_t M, int C, size_t elem, const void* const* tensors,
                    int count) {
  if (r != BnRung::vector) return r;
  const int V = int(16 / elem);
  bool ok = C % V == 0 && C / V <= kBnVectorBlock && M < (int64_t(1) << 24);
  for (int i = 0; i < count; i++) ok = ok && (!tensors[i] || aligned(tensors[i]));
  return ok ? BnRung::vector : BnRung::blocked;
}

}  // namespace cutrain
