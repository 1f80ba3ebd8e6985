// defines: ConvImpl and LinearImpl, the switch that picks which GPU implementation runs the
// two matrix-multiply ops, and their names for the command line and the benchmarks.
//
//   direct  one thread per output, plain loops: obviously right, the baseline (f32 and f16)
//   tc      tiled tensor-core kernels (fp16 in, fp32 accumulate): the default fast path;
//           f16 storage only (f32 runs use direct or the library)
//   cudnn / cublas  the vendor library: a selectable alternative and a second reference
//
// The CPU always runs the CPU reference; the switch only matters on a GPU.
#pragma once
#include <string>

namespace cutrain {

enum class ConvImpl { direct, tc, cudnn };
enum class LinearImpl { direct, tc, cublas };

const char* impl_name(ConvImpl i);
const char* impl_name(LinearImpl i);
// Throws cutrain::Error naming the accepted choices when `s` is none of them.
ConvImpl parse_conv_impl(const std::string& s);
LinearImpl parse_linear_impl(const std::string& s);

}  // namespace cutrain
