// The names of the conv2d and linear implementations, and `auto` (impl.h).
#include "kernels/impl.h"

#include "kernels/check.h"

namespace cutrain {

const char* impl_name(ConvImpl i) {
  switch (i) {
    case ConvImpl::direct: return "direct";
    case ConvImpl::tc: return "tc";
    case ConvImpl::cudnn: return "cudnn";
    case ConvImpl::onednn: return "onednn";
  }
  return "?";
}

const char* impl_name(LinearImpl i) {
  switch (i) {
    case LinearImpl::direct: return "direct";
    case LinearImpl::tc: return "tc";
    case LinearImpl::cublas: return "cublas";
    case LinearImpl::onednn: return "onednn";
  }
  return "?";
}

namespace {
// One rule for both ops: auto -> tc (GPU) or onednn (CPU); a GPU choice on the CPU -> direct
// (the reference: what such a run computed before onednn existed); onednn on a GPU -> tc.
template <typename Impl>
Impl parse_impl(const char* op, const std::string& s, bool gpu, std::initializer_list<Impl> all) {
  if (s == "auto") return gpu ? Impl::tc : Impl::onednn;
  for (Impl i : all)
    if (s == impl_name(i)) {
      if (gpu) return i == Impl::onednn ? Impl::tc : i;
      return i == Impl::onednn ? i : Impl::direct;
    }
  std::string names = "auto";
  for (Impl i : all) names += std::string(", ") + impl_name(i);
  CHECK(false, "--" << op << " " << s << ": expected " << names);
  return Impl::direct;
}
}  // namespace

ConvImpl parse_conv_impl(const std::string& s, bool gpu) {
  return parse_impl("conv", s, gpu,
                    {ConvImpl::direct, ConvImpl::tc, ConvImpl::cudnn, ConvImpl::onednn});
}

LinearImpl parse_linear_impl(const std::string& s, bool gpu) {
  return parse_impl("linear", s, gpu,
                    {LinearImpl::direct, LinearImpl::tc, LinearImpl::cublas, LinearImpl::onednn});
}

std::string conv_choice_str(const ConvChoice& c) {
  return std::string(impl_name(c.forward)) + "," + impl_name(c.data) + "," + impl_name(c.filter);
}

ConvChoice parse_conv_choice(const std::string& s) {
  ConvImpl pass[3];
  size_t at = 0;
  for (int i = 0; i < 3; i++) {
    const size_t comma = i < 2 ? s.find(',', at) : s.size();
    bool ok = comma != std::string::npos;
    if (ok) {
      const std::string name = s.substr(at, comma - at);
      ok = false;
      for (ConvImpl c : {ConvImpl::direct, ConvImpl::tc, ConvImpl::cudnn})
        if (name == impl_name(c)) pass[i] = c, ok = true;
      at = comma + 1;
    }
    CHECK(ok, "conv kernels '" << s << "': expected three of direct, tc and cudnn, for the "
                               << "forward, the data gradient and the weight gradient "
                               << "(\"tc,cudnn,tc\")");
  }
  return ConvChoice{pass[0], pass[1], pass[2]};
}

}  // namespace cutrain
