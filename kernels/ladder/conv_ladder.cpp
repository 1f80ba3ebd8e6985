// The conv ladder's host side (conv_ladder.h): the rungs' names, in every build. The kernels
// are conv_ladder.cu; the CPU reference every rung is tested against is conv2d_*_cpu
// (kernels/conv2d.h), the math they all compute.
#include "kernels/ladder/conv_ladder.h"

namespace cutrain {

const char* conv_rung_name(ConvRung r) {
  switch (r) {
    case ConvRung::direct: return "v1 direct";
    case ConvRung::fma: return "v2 fma";
    case ConvRung::tc: return "v3 tc";
    case ConvRung::async: return "v4 async";
  }
  return "?";
}

}  // namespace cutrain
