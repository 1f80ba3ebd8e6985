// defines: blocked pairwise summation, the one way the long reductions in kernels/ add up
// (BN's per-channel statistics and parameter gradients, the weight and bias gradients of
// conv2d and linear), on the CPU and the GPU:
//   kSumBlock                the block length b
//   BlockedSum<A, B>         one running sum, term by term (host and device)
//   blocked_sum<A, B>(n, f)  f(0) + f(1) + ... + f(n-1), the same way (host and device)
//   BlockedSums<A>           L sums side by side, for CPU loops that add a row of independent
//                            sums per step and sum their blocks themselves (.cpp files only)
//
// The problem. A running sum s += x[i] rounds every partial sum to 24 bits (fp32), so the
// error of each addition is relative to the partial sum, not to the term: once s holds 2^20
// terms of one sign, each new term keeps only its top ~4 bits. By the standard bound (Higham,
// Accuracy and Stability of Numerical Algorithms, ch. 4), a sum in which every term passes
// through at most d roundings satisfies
//   |computed - exact| <= gamma_d * sum |x[i]|,   gamma_d = d u / (1 - d u),  u = 2^-24 (fp32)
// and the running sum has d = n - 1. Roundings of both signs partly cancel, so typical errors
// are nearer sqrt(n) u than n u; still, for BN's batch mean over 2^20 values of mean 100 the
// running fp32 sum is off by 3e-5 relative, a blocked pairwise one by 3e-8
// (tests/kernels/long_sums_test.cpp).
//
// The scheme. Pairwise summation (add neighbours, then neighbouring pair sums, ...) has
// d = ceil(log2 n). Blocked pairwise keeps the plain running sum for blocks of b consecutive
// terms -- the loops the kernels already have, fast and vectorised -- and combines the block
// sums pairwise: a term passes through b - 1 additions in its block and at most
// floor(log2(ceil(n / b))) + 1 while the block sums are combined (below), so
//   d <= b + floor(log2(ceil(n / b)))          (n = 10^6, b = 64: d = 78 instead of 999,999)
// With b = 1 it is plain pairwise: d <= floor(log2 n) + 1, for combining partial sums.
//
// The block sums are combined by a binary counter, as they arrive, without storing them all:
// level[j] holds the sum of 2^j consecutive block sums while bit j of `count` is 1. A new block
// sum merges with level 0, 1, 2, ... as long as those bits are 1 (the carries of count + 1),
// then takes the first free level. When the count is a power of two this is exactly the
// pairwise tree; otherwise total() adds the occupied levels from the smallest up.
//
// Why not Kahan's compensated sum (error <= (2u + O(n u^2)) sum |x[i]|, whatever n)? It costs
// 4 flops a term instead of 1, in the vectorised inner loops of conv2d's weight gradient too,
// and a compiler allowed to reassociate (-ffast-math) optimises the compensation away. Blocked pairwise changes no inner loop: handing a block over costs about two
// additions a lane per b terms.
//
// Determinism: the order of the additions depends on n (and on the order of the terms) only,
// so the bits are the same on every run, on any GPU, and on any thread count (each sum is one
// thread's, kernels/parallel.h). The CPU and GPU kernels use the same helper but sum their
// terms in different orders, so they still agree within a tolerance, not bit for bit.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/check.h"
#include "kernels/hd.h"

namespace cutrain {

// b: long enough that handing a block over is cheap next to its b terms (conv2d's weight
// gradient runs ~2% more instructions than with a running sum), short enough that d stays
// small.
constexpr int kSumBlock = 64;

// Sum of as many terms as an int64_t counts: bit j of the block count needs level j.
constexpr int kSumLevels = 64;

// One running sum in A (float or double), term by term: add(x) for each term, then total().
// On the GPU the levels sit in local memory (indexed at run time), touched once per block.
template <typename A, int B = kSumBlock> class BlockedSum {
 public:
  CUTRAIN_HD void add(A x) {
    block_ += x;
    if (++in_block_ == B) {
      push(block_);
      block_ = A(0);
      in_block_ = 0;
    }
  }
  // A whole block at once: its sum, added in order by the caller (at a block boundary only).
  // The same bits as its B terms through add(); the caller's loop of B terms has a fixed trip
  // count, which the compiler unrolls (on a GPU: B loads in flight, not one at a time).
  CUTRAIN_HD void add_block(A block_sum) { push(block_sum); }
  // The sum of every term added so far: the unfinished block, then the levels upward.
  CUTRAIN_HD A total() const {
    A s = block_;
    for (int j = 0; j < kSumLevels && (count_ >> j) != 0; j++)
      if ((count_ >> j) & 1) s = level_[j] + s;
    return s;
  }

 private:
  CUTRAIN_HD void push(A s) {  // the binary counter (top of this file)
    int j = 0;
    for (uint64_t c = count_; c & 1; c >>= 1) s = level_[j++] + s;
    level_[j] = s;
    count_++;
  }
  A block_ = A(0);
  int in_block_ = 0;
  uint64_t count_ = 0;   // block sums pushed
  A level_[kSumLevels];  // level_[j] is valid while bit j of count_ is 1
};

// f(0) + f(1) + ... + f(n-1) in A, blocked pairwise (b = B). f(i) returns the term (in A).
// The whole blocks go through add_block (a fixed-length loop the compiler unrolls), the tail
// term by term: the same bits as add() on every term.
template <typename A, int B = kSumBlock, typename Term>
CUTRAIN_HD A blocked_sum(int64_t n, Term f) {
  BlockedSum<A, B> s;
  int64_t i = 0;
  const int64_t whole = B > 1 && n > 0 ? n - n % B : 0;  // terms in whole blocks
  for (; i < whole; i += B) {
    A block = A(0);
#if defined(__CUDA_ARCH__)
#pragma unroll 8
#endif
    for (int j = 0; j < B; j++) block += f(i + j);
    s.add_block(block);
  }
  for (; i < n; i++) s.add(f(i));
  return s.total();
}

#if defined(__CUDACC__)
// (device) f(0) + ... + f(n-1) by the 32 lanes of one warp, the same value returned in every
// lane; every lane must call it (it shuffles with the full mask). Lane l takes the run of
// ceil(n/32) consecutive terms from l * ceil(n/32), blocked pairwise in blocks of 8 (eight
// loads in flight, not one: a thread per sum adding G ~ 1024 partials one push at a time made
// BN's finalize the slowest part of BN), and the 32 run sums meet in a butterfly (xor 16, 8,
// 4, 2, 1): pairwise too, and since a + b == b + a exactly, every lane ends with the same bits.
// A term meets at most 8 + log2(n/256) + 1 roundings in its run and 5 in the butterfly. The
// order depends on n alone.
template <typename Term> __device__ float warp_blocked_sum(int64_t n, Term f) {
  const int64_t per = (n + 31) / 32, lane = threadIdx.x % 32;
  const int64_t begin = lane * per < n ? lane * per : n;
  const int64_t end = begin + per < n ? begin + per : n;
  float s = blocked_sum<float, 8>(end - begin, [&](int64_t i) { return f(begin + i); });
  for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
  return s;
}
#endif

#if !defined(__CUDACC__)  // host code of the .cpp files (nvcc builds without OpenMP)
// L independent sums at once, for the CPU loops whose inner loop runs over a row of sums (a
// filter's R*S*C weights, a block of channels). The caller sums each block of kSumBlock steps
// (pixels, rows of a batch) into a row of L block sums, as its plain loop would, and hands the
// row to add(), which combines the rows by the counter above, lane by lane (the last, shorter
// block too), and zeroes the row for the next block. total(out) writes the L sums. This is
// BlockedSum on every lane, with the block loop in the caller, where it vectorises.
template <typename A> class BlockedSums {
 public:
  // steps: the most steps summed between resets, so ceil(steps / kSumBlock) rows. The levels
  // are allocated here, so that add() calls nothing and the caller's hot loop around it stays
  // a plain loop (a call there makes the compiler reload what it kept in registers).
  BlockedSums(size_t lanes, int64_t steps)
      : lanes_(lanes), rows_((steps + kSumBlock - 1) / kSumBlock) {
    int levels = 1;  // floor(log2(rows)) + 1: count_ < rows keeps j below it
    while ((int64_t(1) << levels) <= rows_) levels++;
    levels_.resize(size_t(levels) * lanes);
  }
  void reset() { count_ = 0; }  // L new sums, all 0
  // row + level 0 + level 1 + ... while those are occupied, into the first free level j; then
  // row = 0. One pass over the row, and one more per level beyond the first it meets.
  void add(A* row) {
    CHECK(int64_t(count_) < rows_, "BlockedSums: more than the " << rows_ << " rows planned");
    int j = 0;
    for (uint64_t c = count_; c & 1; c >>= 1) j++;
    A* dst = levels_.data() + size_t(j) * lanes_;
    const A* level0 = levels_.data();
    // (omp simd: the rows never overlap, so the compiler may vectorise without checking)
    if (j == 0) {
#pragma omp simd
      for (size_t l = 0; l < lanes_; l++) dst[l] = row[l], row[l] = A(0);
    } else {
#pragma omp simd
      for (size_t l = 0; l < lanes_; l++) dst[l] = level0[l] + row[l], row[l] = A(0);
    }
    for (int i = 1; i < j; i++) add_level(i, dst);
    count_++;
  }
  void total(A* out) const {
    for (size_t l = 0; l < lanes_; l++) out[l] = A(0);
    for (int j = 0; j < kSumLevels && (count_ >> j) != 0; j++)
      if ((count_ >> j) & 1) add_level(j, out);
  }

 private:
  void add_level(int j, A* s) const {  // s[l] = level j + s[l], every lane
    const A* lj = levels_.data() + size_t(j) * lanes_;
#pragma omp simd
    for (size_t l = 0; l < lanes_; l++) s[l] = lj[l] + s[l];
  }
  size_t lanes_;
  int64_t rows_;
  uint64_t count_ = 0;     // rows added
  std::vector<A> levels_;  // row j = level j, valid while bit j of count_ is 1
};
#endif

}  // namespace cutrain
