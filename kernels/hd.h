// defines: CUTRAIN_HD, the mark of a function compiled for both the host and the device, and
// add_rn, sub_rn, mul_rn, div_rn, sqrt_rn: float and double arithmetic rounded once per
// operation, to nearest even, on both sides.
//
// Why: some kernels must give exactly the CPU reference's bits (the optimizer step, so a GPU
// run and a CPU run of the same steps agree; the input conversion). IEEE 754 makes + - * /
// and sqrt correctly rounded, so the same operations in the same order give the same bits on
// any conforming machine, with two traps:
//  - contraction: nvcc fuses a*b + c into one fma (one rounding instead of two) by default.
//    The __fadd_rn / __fmul_rn / ... intrinsics are never fused, so device code that goes
//    through these functions keeps the CPU's two roundings. (The host side is compiled
//    with -ffp-contract=off, see the Makefile.)
//  - approximate division or square root (-use_fast_math): the _rn intrinsics are exact
//    whatever the flags.
// So a per-element update written once, as a CUTRAIN_HD function over these operations, is
// the same computation in the CPU reference and in the kernel, and cannot drift.
#pragma once
#include <cmath>
#include <type_traits>

#include "kernels/half.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

#ifndef CUTRAIN_HD
#if defined(__CUDACC__)
#define CUTRAIN_HD __host__ __device__
#else
#define CUTRAIN_HD
#endif
#endif

namespace cutrain {

#if defined(__CUDA_ARCH__)
// device: the round-to-nearest intrinsics
CUTRAIN_HD inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
CUTRAIN_HD inline float sub_rn(float a, float b) { return __fsub_rn(a, b); }
CUTRAIN_HD inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
CUTRAIN_HD inline float div_rn(float a, float b) { return __fdiv_rn(a, b); }
CUTRAIN_HD inline float sqrt_rn(float a) { return __fsqrt_rn(a); }
CUTRAIN_HD inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
CUTRAIN_HD inline double sub_rn(double a, double b) { return __dsub_rn(a, b); }
CUTRAIN_HD inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
CUTRAIN_HD inline double div_rn(double a, double b) { return __ddiv_rn(a, b); }
CUTRAIN_HD inline double sqrt_rn(double a) { return __dsqrt_rn(a); }
#else
// host: the plain operators (SSE on x86-64: every float operation rounded to float)
CUTRAIN_HD inline float add_rn(float a, float b) { return a + b; }
CUTRAIN_HD inline float sub_rn(float a, float b) { return a - b; }
CUTRAIN_HD inline float mul_rn(float a, float b) { return a * b; }
CUTRAIN_HD inline float div_rn(float a, float b) { return a / b; }
CUTRAIN_HD inline float sqrt_rn(float a) { return std::sqrt(a); }
CUTRAIN_HD inline double add_rn(double a, double b) { return a + b; }
CUTRAIN_HD inline double sub_rn(double a, double b) { return a - b; }
CUTRAIN_HD inline double mul_rn(double a, double b) { return a * b; }
CUTRAIN_HD inline double div_rn(double a, double b) { return a / b; }
CUTRAIN_HD inline double sqrt_rn(double a) { return std::sqrt(a); }
#endif

// Is x finite (not inf, not NaN)?
template <typename A> CUTRAIN_HD inline bool is_finite(A x) {
#if defined(__CUDA_ARCH__)
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}


}  // namespace cutrain
