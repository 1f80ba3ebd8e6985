// The conv ladder's switch (conv_ladder.h): each rung's three passes over conv_gemm.cuh's
// operands (v2, v3, v5) or the production kernels (v1, v4).
//
// Math: conv2d.h; the CPU reference of every rung is conv2d_*_cpu.
// Launch: no kernel of its own: v1 conv2d.cu's direct kernels, v2, v3 and v5 tc_gemm with the
//   rung's main loop (gemm_plain.cuh, gemm_fma.cuh, tc_gemm_async.cuh), v4 conv2d.cu's tc path.
// Bytes: conv_ladder.h's conv2d_forward_rung_gpu_cost, conv2d_backward_data_rung_gpu_cost,
//   conv2d_backward_filter_rung_gpu_cost.
// Flops: 2*N*P*Q*K*R*S*C a pass (the same: conv2d_forward_rung_gpu_cost, ...).
// Precision: fp32 sums, rounded to fp16 once; v5 gives v4's bits.
#include "kernels/conv_gemm.cuh"
#include "kernels/ladder/conv_ladder.h"
#include "kernels/ladder/gemm_fma.cuh"
#include "kernels/ladder/gemm_plain.cuh"
#include "kernels/ladder/tc_gemm_async.cuh"

namespace cutrain {

void conv2d_forward_rung_gpu(ConvRung r, const Conv2dShape& s, const half_t* x, const half_t* w,
                             const half_t* b, half_t* y, cudaStream_t stream) {
  conv2d_check_shape(s);
  switch (r) {
    case ConvRung::direct: return conv2d_forward_direct_gpu<half_t>(s, x, w, b, y, stream);
    case ConvRung::gemm: return conv2d_forward_gemm<tc::PlainKernel>(s, x, w, b, y, stream);
    case ConvRung::fma: return conv2d_forward_gemm<tc::FmaKernel>(s, x, w, b, y, stream);
    case ConvRung::tc: return conv2d_forward_tc_gpu(s, x, w, b, y, stream);
    case ConvRung::async: return conv2d_forward_gemm<tc::AsyncKernel>(s, x, w, b, y, stream);
  }
}

void conv2d_backward_data_rung_gpu(ConvRung r, const Conv2dShape& s, const half_t* dy,
                                   const half_t* w, half_t* dx, cudaStream_t stream) {
  conv2d_check_shape(s);
  switch (r) {
    case ConvRung::direct: return conv2d_backward_data_direct_gpu<half_t>(s, dy, w, dx, stream);
    case ConvRung::gemm: return conv2d_backward_data_gemm<tc::PlainKernel>(s, dy, w, dx, stream);
    case ConvRung::fma: return conv2d_backward_data_gemm<tc::FmaKernel>(s, dy, w, dx, stream);
    case ConvRung::tc: return conv2d_backward_data_tc_gpu(s, dy, w, dx, stream);
    case ConvRung::async: return conv2d_backward_data_gemm<tc::AsyncKernel>(s, dy, w, dx, stream);
  }
}

void conv2d_backward_filter_rung_gpu(ConvRung r, const Conv2dShape& s, const half_t* x,
                                     const half_t* dy, half_t* dw, half_t* db,
                                     cudaStream_t stream) {
  conv2d_check_shape(s);
  switch (r) {
    case ConvRung::direct:
      return conv2d_backward_filter_direct_gpu<half_t>(s, x, dy, dw, db, stream);
    case ConvRung::gemm:
      return conv2d_backward_filter_gemm<tc::PlainKernel>(s, x, dy, dw, db, stream);
    case ConvRung::fma:
      return conv2d_backward_filter_gemm<tc::FmaKernel>(s, x, dy, dw, db, stream);
    case ConvRung::tc: return conv2d_backward_filter_tc_gpu(s, x, dy, dw, db, stream);
    case ConvRung::async:
      return conv2d_backward_filter_gemm<tc::AsyncKernel>(s, x, dy, dw, db, stream);
  }
}

}  // namespace cutrain
