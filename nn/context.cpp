#include "nn/context.h"

namespace cutrain {

const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

}  // namespace cutrain
