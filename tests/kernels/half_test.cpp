// half_t against known IEEE binary16 bit patterns: exact values, ties to even, overflow,
// subnormals, NaN and inf.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/half.h"
#include "tests/test_util.h"

using namespace cutrain;

static float f_from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

TEST_CASE("half: exact values have their known bit patterns") {
  REQUIRE(float_to_half_bits(0.0f) == 0x0000);
  REQUIRE(float_to_half_bits(-0.0f) == 0x8000);
  REQUIRE(float_to_half_bits(1.0f) == 0x3c00);
  REQUIRE(float_to_half_bits(-2.0f) == 0xc000);
  REQUIRE(float_to_half_bits(0.5f) == 0x3800);
  REQUIRE(float_to_half_bits(65504.0f) == 0x7bff);        // largest finite half
  REQUIRE(float_to_half_bits(6.103515625e-05f) == 0x0400);  // 2^-14, smallest normal
  REQUIRE(float_to_half_bits(5.9604644775390625e-08f) == 0x0001);  // 2^-24, smallest subnormal
  REQUIRE(float_to_half_bits(0.333251953125f) == 0x3555);  // 1/3 rounded to half, exactly
}

TEST_CASE("half: rounding is to nearest, ties to even") {
  // 1 + 2^-11 lies halfway between 1 (0x3c00, even) and 1 + 2^-10 (0x3c01): goes to even.
  REQUIRE(float_to_half_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  // 1 + 3*2^-11 lies halfway between 0x3c01 (odd) and 0x3c02 (even): goes up to even.
  REQUIRE(float_to_half_bits(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  // just above the halfway point rounds up
  REQUIRE(float_to_half_bits(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)) == 0x3c01);
  // 2049 is not representable (11 bits of precision): halfway between 2048 and 2050
  REQUIRE(float_to_half_bits(2049.0f) == 0x6800);  // 2048, even mantissa
  REQUIRE(float_to_half_bits(2051.0f) == 0x6802);  // 2052
  // carry out of the mantissa bumps the exponent: 2047.9 -> 2048
  REQUIRE(float_to_half_bits(2047.9f) == 0x6800);
}

TEST_CASE("half: overflow goes to inf at exactly 65520") {
  REQUIRE(float_to_half_bits(65519.0f) == 0x7bff);   // below the halfway point: 65504
  REQUIRE(float_to_half_bits(65520.0f) == 0x7c00);   // halfway, 65504 is odd: up, to inf
  REQUIRE(float_to_half_bits(1e6f) == 0x7c00);
  REQUIRE(float_to_half_bits(-1e6f) == 0xfc00);
  REQUIRE(float_to_half_bits(std::numeric_limits<float>::infinity()) == 0x7c00);
  REQUIRE(float_to_half_bits(-std::numeric_limits<float>::infinity()) == 0xfc00);
  REQUIRE(std::isinf(float(half_t(70000.0f))));
}

TEST_CASE("half: subnormals and underflow") {
  const float tiny = std::ldexp(1.0f, -24);
  REQUIRE(float_to_half_bits(3 * tiny) == 0x0003);
  REQUIRE(float_to_half_bits(1023 * tiny) == 0x03ff);   // largest subnormal
  REQUIRE(float_to_half_bits(2.5f * tiny) == 0x0002);   // tie: 2 is even
  REQUIRE(float_to_half_bits(3.5f * tiny) == 0x0004);   // tie: 4 is even
  REQUIRE(float_to_half_bits(0.5f * tiny) == 0x0000);   // tie between 0 and 2^-24: 0 is even
  REQUIRE(float_to_half_bits(0.51f * tiny) == 0x0001);
  REQUIRE(float_to_half_bits(-0.25f * tiny) == 0x8000); // signed zero
  REQUIRE(float_to_half_bits(1e-30f) == 0x0000);
  REQUIRE(float_to_half_bits(f_from_bits(0x00000001)) == 0x0000);  // float subnormal
  // 1023.5 units rounds up into the smallest normal
  REQUIRE(float_to_half_bits(1023.5f * tiny) == 0x0400);
  REQUIRE(half_bits_to_float(0x0001) == tiny);
  REQUIRE(half_bits_to_float(0x03ff) == 1023 * tiny);
}

TEST_CASE("half: NaN stays NaN, and decoding is exact") {
  REQUIRE((float_to_half_bits(std::numeric_limits<float>::quiet_NaN()) & 0x7c00) == 0x7c00);
  REQUIRE((float_to_half_bits(std::numeric_limits<float>::quiet_NaN()) & 0x03ff) != 0);
  // a signalling NaN whose payload lives only in the low bits must not become inf
  REQUIRE((float_to_half_bits(f_from_bits(0x7f800001)) & 0x03ff) != 0);
  REQUIRE(std::isnan(half_bits_to_float(0x7e00)));
  REQUIRE(std::isinf(half_bits_to_float(0x7c00)));
  REQUIRE(half_bits_to_float(0xfc00) < 0);
  REQUIRE(half_bits_to_float(0x3555) == 0.333251953125f);
  // every finite half survives half -> float -> half exactly
  for (uint32_t b = 0; b < 0x10000; b++) {
    const uint16_t h = uint16_t(b);
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaNs: checked above
    REQUIRE(float_to_half_bits(half_bits_to_float(h)) == h);
  }
}
