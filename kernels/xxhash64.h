// defines: xxh64, the 64-bit xxHash of a byte buffer (Yann Collet's XXH64, seed 0 by default).
//
// Used for checkpoint checksums (train/checkpoint/checkpoint.h) and to compare replicas' weights
// (train/engine/replica.h): it reads 32 bytes per round in four independent lanes, so it runs at
// memory speed (several GB/s on one core) where a byte-at-a-time hash like FNV-1a does about
// 1 GB/s, and a flipped bit anywhere changes the result. Not cryptographic: it finds damage,
// not tampering. Matches the reference implementation (tests/kernels/xxhash64_test.cpp checks
// its published test vectors). Runtime, not an op: a pure host function any floor may use.
#pragma once
#include <cstddef>
#include <cstdint>

namespace cutrain {

uint64_t xxh64(const void* data, size_t bytes, uint64_t seed = 0);

}  // namespace cutrain
