// defines: half_t, an IEEE 754 binary16 value for host code; acc_t<T>, the type a kernel
// accumulates in when its storage type is T.
//
// Why not just use float on the CPU? Mixed precision is about what fp16 *does*: rounding to
// 11 significant bits, overflowing to inf above 65504, flushing gradually through subnormals
// down to 2^-24. The loss scaler exists because of that overflow and underflow. With a real
// half type the CPU reference stores activations exactly as a GPU does, so an overflow that
// the scaler must catch happens on the CPU too, and CI can test it.
//
// Layout: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits; bit-identical to CUDA's
// __half, so a buffer of half_t can be handed to a kernel as __half*.
#pragma once
#include <cstdint>
#include <cstring>

namespace cutrain {

// float -> binary16 bits, rounding to nearest, ties to even (the IEEE default, and what
// __float2half_rn does). Overflow gives inf, NaN stays NaN (quiet), tiny values become
// subnormals or signed zero.
inline uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;              // |f| as bits
  if (a >= 0x7f800000u)                            // inf or NaN
    return uint16_t(sign | (a > 0x7f800000u ? 0x7e00u | ((a >> 13) & 0x3ffu) : 0x7c00u));
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds up to inf
  if (a < 0x38800000u) {                           // below 2^-14: half subnormal or zero
    // value = m * 2^(e-150) = (m >> (126-e)) units of 2^-24
    const int e = int(a >> 23);
    const int shift = 126 - e;
    if (e == 0 || shift >= 25) return uint16_t(sign);  // below half of 2^-24: zero
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t q = m >> shift;
    const uint32_t r = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (r > halfway || (r == halfway && (q & 1u))) q++;  // may carry into the smallest normal
    return uint16_t(sign | q);
  }
  // normal: re-bias the exponent (127 -> 15) and drop 13 mantissa bits, rounding to even;
  // a carry out of the mantissa correctly bumps the exponent.
  uint32_t h = (a - 0x38000000u) >> 13;
  const uint32_t r = a & 0x1fffu;
  if (r > 0x1000u || (r == 0x1000u && (h & 1u))) h++;
  return uint16_t(sign | h);
}

// binary16 bits -> float. Exact: every half is a float.
inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t x;
  if (e == 0) {
    float f = float(m) * 5.9604644775390625e-8f;   // m * 2^-24, exact
    std::memcpy(&x, &f, 4);
    x |= sign;
  } else if (e == 31) {
    x = sign | 0x7f800000u | (m << 13);            // inf or NaN (payload kept)
  } else {
    x = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

struct half_t {
  uint16_t bits = 0;

  half_t() = default;
  explicit half_t(float f) : bits(float_to_half_bits(f)) {}
  explicit half_t(double d) : bits(float_to_half_bits(float(d))) {}
  operator float() const { return half_bits_to_float(bits); }

  static half_t from_bits(uint16_t b) { half_t h; h.bits = b; return h; }
};
static_assert(sizeof(half_t) == 2, "half_t must be 16 bits to alias __half");

// The accumulation type: fp16 storage accumulates in fp32 (as the GPU kernels do), double
// stays double so gradient checks are exact to ~1e-10.
template <typename T> struct acc_type { using type = float; };
template <> struct acc_type<double> { using type = double; };
template <typename T> using acc_t = typename acc_type<T>::type;

}  // namespace cutrain
