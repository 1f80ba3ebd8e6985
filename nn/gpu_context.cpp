#include "nn/gpu_context.h"

namespace cutrain {

GpuContext& gpu_context() {
  thread_local GpuContext context;
  return context;
}

}  // namespace cutrain
