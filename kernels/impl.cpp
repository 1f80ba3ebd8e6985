// The names of the GPU implementations (impl.h).
#include "kernels/impl.h"

#include "kernels/check.h"

namespace cutrain {

const char* impl_name(ConvImpl i) {
  switch (i) {
    case ConvImpl::direct: return "direct";
    case ConvImpl::tc: return "tc";
    case ConvImpl::cudnn: return "cudnn";
  }
  return "?";
}

const char* impl_name(LinearImpl i) {
  switch (i) {
    case LinearImpl::direct: return "direct";
    case LinearImpl::tc: return "tc";
    case LinearImpl::cublas: return "cublas";
  }
  return "?";
}

ConvImpl parse_conv_impl(const std::string& s) {
  for (ConvImpl i : {ConvImpl::direct, ConvImpl::tc, ConvImpl::cudnn})
    if (s == impl_name(i)) return i;
  CHECK(false, "conv implementation '" << s << "': expected direct, tc or cudnn");
  return ConvImpl::direct;
}

LinearImpl parse_linear_impl(const std::string& s) {
  for (LinearImpl i : {LinearImpl::direct, LinearImpl::tc, LinearImpl::cublas})
    if (s == impl_name(i)) return i;
  CHECK(false, "linear implementation '" << s << "': expected direct, tc or cublas");
  return LinearImpl::direct;
}

}  // namespace cutrain
