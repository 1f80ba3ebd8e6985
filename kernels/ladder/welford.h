// defines: Welford, the one-pass mean and variance of the BatchNorm ladder's v3
// (batchnorm_ladder.cu): welford_add (one value), welford_merge (two partial results, Chan et
// al.'s formula), shared by the GPU kernel and the CPU test of its accuracy
// (tests/kernels/welford_test.cpp).
//
// math: a partial result of n values is (n, mean, m2), m2 = sum (x - mean)^2.
//   add x:      n += 1; d = x - mean; mean += d / n; m2 += d * (x - mean)
//   merge a, b: n = na + nb; d = mean_b - mean_a; mean = mean_a + d * (nb / n);
//               m2 = m2_a + m2_b + d * d * (na * (nb / n))
// The variance of the batch is m2 / n. The kernel adds x - K, K the channel's first value (one
// rounding at most, none for x within a factor 2 of K), and adds K back to the mean: fp32 Welford on unshifted activations far
// from 0 keeps fewer digits than the two-pass sums (tests/kernels/welford_test.cpp measures
// both). Why not sum x and x^2 in one pass: for values far
// from 0 relative to their spread (activations with a large mean), sum x^2 - (sum x)^2 / n
// cancels catastrophically; Welford's update works on deviations from the running mean, like
// the two-pass form, and merges without cancellation.
// precision: each operation rounded once in A (float on the GPU), in the order written.
#pragma once
#include "kernels/hd.h"

namespace cutrain {

template <typename A> struct Welford {
  A n = 0, mean = 0, m2 = 0;
};

template <typename A> CUTRAIN_HD inline void welford_add(Welford<A>& w, A x, A inv_n) {
  // inv_n = 1 / (w.n + 1), computed once by a caller that adds one value to several channels
  w.n = add_rn(w.n, A(1));
  const A d = sub_rn(x, w.mean);
  w.mean = add_rn(w.mean, mul_rn(d, inv_n));
  w.m2 = add_rn(w.m2, mul_rn(d, sub_rn(x, w.mean)));
}

template <typename A> CUTRAIN_HD inline Welford<A> welford_merge(const Welford<A>& a,
                                                                 const Welford<A>& b) {
  if (a.n == A(0)) return b;
  if (b.n == A(0)) return a;
  Welford<A> r;
  r.n = add_rn(a.n, b.n);
  const A d = sub_rn(b.mean, a.mean), fb = div_rn(b.n, r.n);
  r.mean = add_rn(a.mean, mul_rn(d, fb));
  r.m2 = add_rn(add_rn(a.m2, b.m2), mul_rn(mul_rn(d, d), mul_rn(a.n, fb)));
  return r;
}

}  // namespace cutrain
