// defines: ema_decay_at, ema_update and ema_update_cpu: the exponential moving average of the
// weights (--ema), kept beside them by the optimizer step (nn/optim.h) and evaluated in their
// place (torchvision's reference scripts and timm keep one the same way).
//
// math, at optimizer step t (1, 2, ...: the steps taken; a skipped step changes nothing):
//   d_t = min(decay, (1 + t) / (10 + t))      the warm-up of TensorFlow's
//                                              ExponentialMovingAverage(num_updates): early on
//                                              the average follows the weights closely, so a
//                                              short run is not an average of its random start
//   e  <- d_t * e + (1 - d_t) * w             per element, w the updated master weight
// e starts as the weights at the start of training. BatchNorm's running statistics are
// averaged the same way, as the layers' other state (w = the running mean or variance after
// the step's update): the averaged weights make averaged activations, whose statistics are, to
// first order, the average of the statistics over the same window. (timm's ModelEmaV2 and
// torchvision's ExponentialMovingAverage(use_buffers=True) do the same.)
// precision: d_t is computed in double and rounded once to A; 1 - d_t, the two products and
// the sum are each rounded once in A, in that order (ema_update: the one copy of this math,
// shared by the CPU loop and the GPU's optimizer kernels, so the GPU gives the CPU's bits).
// cost: per element read e and w, write e: 12 bytes in fp32, 3 flops.
#pragma once
#include <cstdint>

#include "kernels/hd.h"

namespace cutrain {

template <typename A> CUTRAIN_HD inline A ema_decay_at(double decay, int64_t t) {
  const double warm = div_rn(1.0 + double(t), 10.0 + double(t));
  return A(decay < warm ? decay : warm);
}

// d = ema_decay_at(decay, t); one = A(1) - d, rounded (passed in so a kernel computes it once)
template <typename A> CUTRAIN_HD inline A ema_update(A e, A w, A d, A one_minus_d) {
  return add_rn(mul_rn(d, e), mul_rn(one_minus_d, w));
}

// e[i] <- the average with w[i], i in [0, n), at step t with the given decay.
template <typename A> void ema_update_cpu(int64_t n, const A* w, A* e, double decay, int64_t t);

}  // namespace cutrain
