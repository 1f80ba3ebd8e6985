// defines: counter-based random numbers: rng_u64(seed, i, j), rng_uniform, rng_normal.
//
// Counter-based means a random value is a pure function of a key (seed, i, j), not the next
// state of a generator. So the value for sample 123 of epoch 4 is the same whether one thread
// or sixteen produce it, in any order, on the CPU or on the GPU, and resuming a run needs no
// saved generator state beyond the seed and the counters. The mixer is SplitMix64's
// finaliser (Steele, Lea, Flood 2014), applied twice over the combined key.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/hd.h"  // CUTRAIN_HD

namespace cutrain {

CUTRAIN_HD inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// 64 random bits for the key (seed, i, j).
CUTRAIN_HD inline uint64_t rng_u64(uint64_t seed, uint64_t i, uint64_t j = 0) {
  return mix64(mix64(seed ^ mix64(i)) ^ (j * 0xd1b54a32d192ed03ull));
}

// Uniform in [0, 1) with 24 random bits (every value exactly representable in float).
CUTRAIN_HD inline float rng_uniform(uint64_t seed, uint64_t i, uint64_t j = 0) {
  return float(rng_u64(seed, i, j) >> 40) * (1.0f / 16777216.0f);
}

// Standard normal by Box-Muller over two independent uniforms.
CUTRAIN_HD inline float rng_normal(uint64_t seed, uint64_t i, uint64_t j = 0) {
  const uint64_t r = rng_u64(seed, i, j);
  const float u1 = (float(r >> 40) + 1.0f) * (1.0f / 16777217.0f);  // (0, 1]: log is finite
  const float u2 = float((r >> 16) & 0xffffffu) * (1.0f / 16777216.0f);
  const float rad = sqrtf(-2.0f * logf(u1));
  return rad * cosf(6.283185307179586f * u2);
}

}  // namespace cutrain
