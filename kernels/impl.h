// defines: ConvImpl and LinearImpl, the switch that picks which implementation runs the two
// matrix-multiply ops, and their names for the command line and the benchmarks.
//
//   direct  plain loops: on a GPU one thread per output, on the CPU the reference (conv2d.cpp,
//           linear.cpp). Obviously right, the baseline and the oracle (every dtype)
//   tc      GPU: tiled tensor-core kernels (fp16 in, fp32 accumulate), the default there;
//           f16 storage only (f32 runs use direct)
//   cudnn / cublas  GPU: the vendor library, a selectable alternative and a second reference
//   onednn  CPU: oneDNN (kernels/onednn.h), the default there; f32 only (f64 and f16 storage
//           run the reference)
//
// `auto` (the command line's default) is onednn on the CPU; on a GPU it is tc here, and a new
// run's conv layers are then timed, tc against cuDNN, per pass (train/setup/kernel_choice.h),
// the faster kept in the run's kernel plan (nn/model.h: KernelPlan). The GPU choices
// on the CPU mean direct, so a CPU run made before onednn existed (its checkpoint says "tc")
// resumes on the same reference kernels, with the same bits; onednn on a GPU means tc, so a
// CPU run resumes on a GPU (--device may change on resume).
#pragma once
#include <string>

namespace cutrain {

enum class ConvImpl { direct, tc, cudnn, onednn };
enum class LinearImpl { direct, tc, cublas, onednn };

const char* impl_name(ConvImpl i);
const char* impl_name(LinearImpl i);
// The implementation `s` (auto, direct, tc, cudnn/cublas, onednn) names for a run on a GPU
// (gpu) or on the CPU, by the rules above. Throws cutrain::Error naming the accepted choices
// when `s` is none of them.
ConvImpl parse_conv_impl(const std::string& s, bool gpu);
LinearImpl parse_linear_impl(const std::string& s, bool gpu);

// One conv layer's implementations on a GPU, pass by pass: the forward, the data gradient and
// the weight gradient may each run another (the faster one for that layer's shape). Written
// "tc,cudnn,tc" (forward, data, filter); each a GPU choice: direct, tc or cudnn.
struct ConvChoice {
  ConvImpl forward = ConvImpl::tc, data = ConvImpl::tc, filter = ConvImpl::tc;
  bool operator==(const ConvChoice& o) const {
    return forward == o.forward && data == o.data && filter == o.filter;
  }
};
std::string conv_choice_str(const ConvChoice& c);
// Throws cutrain::Error naming the text and what it expects.
ConvChoice parse_conv_choice(const std::string& s);

}  // namespace cutrain
