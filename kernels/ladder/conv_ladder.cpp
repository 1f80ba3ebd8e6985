// The conv ladder's host side (conv_ladder.h): the rungs' names, in every build. The kernels
// are conv_ladder.cu; the CPU reference every rung is tested against is conv2d_*_cpu
// (kernels/conv2d.h), the math they all compute.
#include "kernels/ladder/conv_ladder.h"

namespace cutrain {

const char* conv_rung_name(ConvRung r) {
  switch (r) {
    case ConvRung::direct: return "v1 direct";
    case ConvRung::gemm: return "v2 gemm";
    case ConvRung::fma: return "v3 fma";
    case ConvRung::tc: return "v4 tc";
    case ConvRung::async: return "v5 async";
  }
  return "?";
}

}  // namespace cutrain
