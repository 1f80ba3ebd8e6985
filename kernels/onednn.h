// defines: the fast CPU path of conv2d and linear, through oneDNN (Debian's libdnnl), fp32:
// what cuDNN and cuBLAS are to the GPU kernels, for the CPU. Selected by ConvImpl::onednn and
// LinearImpl::onednn (impl.h), the default for fp32 training on the CPU.
//
// Same math, shapes and accumulate rule as the CPU references (conv2d.h, linear.h): NHWC
// activations, KRSC filters, backward passes add into dx, dw and db. The references stay the
// textbook and the oracle: tests/kernels/onednn_test.cpp compares every pass with them.
//
// How (onednn.cpp): conv2d runs oneDNN's convolution primitives with the activations in our
// NHWC layout and the filters in whatever blocked layout oneDNN picks for this machine (with
// plain KRSC filters it falls back to its slow reference loops); the filter is reordered into
// that layout before each forward / backward-data pass and the filter gradient out of it. The
// primitives are made once per shape and kept. linear is three GEMMs (dnnl_sgemm, row-major,
// beta = 1 accumulates) and the bias gradient, a blocked sum (blocked_sum.h) as in the reference.
//
// precision: fp32 in, fp32 sums, in oneDNN's order (blocked, vectorised, FMA): results agree
// with the reference within a tolerance, not bit for bit.
// determinism: the same bits run to run for a fixed thread count on one machine (oneDNN splits
// work by the thread count and picks kernels by the CPU's instruction set: another count or
// another CPU may give other bits). train/README.md says what that means for a run.
// threads: oneDNN's own loops run on the same OpenMP pool as the reference kernels.
#pragma once
#include <string>

#include "kernels/conv2d.h"

namespace cutrain {

void conv2d_forward_onednn(const Conv2dShape& s, const float* x, const float* w, const float* b,
                           float* y);
void conv2d_backward_data_onednn(const Conv2dShape& s, const float* dy, const float* w,
                                 float* dx);
// dw or db may be null when that gradient is not wanted.
void conv2d_backward_filter_onednn(const Conv2dShape& s, const float* x, const float* dy,
                                   float* dw, float* db);

void linear_forward_onednn(int N, int C, int K, const float* x, const float* w, const float* b,
                           float* y);
void linear_backward_onednn(int N, int C, int K, const float* x, const float* w,
                            const float* dy, float* dx, float* dw, float* db);

// What oneDNN runs for this shape, pass by pass: "fwd jit:avx2, bwd-data jit:avx2, bwd-filter
// jit:avx2" (the benchmarks print it; "ref" there means its slow reference loops).
std::string conv2d_onednn_kernels(const Conv2dShape& s);
// "oneDNN 2.6.3 (OpenMP)": the library this process loaded.
std::string onednn_version();

}  // namespace cutrain
