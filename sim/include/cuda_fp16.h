// The simulator's <cuda_fp16.h>: __half as a 16-bit IEEE binary16, converted by cutrain's own
// kernels/half.h (round to nearest even, the bits of __float2half_rn; exact widening).
#pragma once
#include "cuda_runtime.h"
#include "kernels/half.h"

struct __half {
  unsigned short __x;
  __half() = default;
  __half(float f) : __x(cutrain::float_to_half_bits(f)) {}
  __half(double d) : __x(cutrain::float_to_half_bits(float(d))) {}
  operator float() const { return cutrain::half_bits_to_float(__x); }
};
static_assert(sizeof(__half) == 2, "__half is 16 bits");
typedef __half half;
struct __half_raw {
  unsigned short x;
};

inline float __half2float(__half h) { return cutrain::half_bits_to_float(h.__x); }
inline __half __float2half_rn(float f) {
  __half h;
  h.__x = cutrain::float_to_half_bits(f);
  return h;
}
inline __half __float2half(float f) { return __float2half_rn(f); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short u) {
  __half h;
  h.__x = u;
  return h;
}
// Arithmetic in fp32, rounded once to half: what the sm_53+ instructions give.
inline __half __hadd(__half a, __half b) { return __float2half_rn(float(a) + float(b)); }
inline __half __hmul(__half a, __half b) { return __float2half_rn(float(a) * float(b)); }
inline bool __hisnan(__half a) { return (a.__x & 0x7fff) > 0x7c00; }
inline bool __hisinf(__half a) { return (a.__x & 0x7fff) == 0x7c00; }
