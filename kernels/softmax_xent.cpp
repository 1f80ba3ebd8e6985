#include "kernels/softmax_xent.h"

#include <cmath>

#include "kernels/check.h"

namespace cutrain {

void softmax_xent_check(int N, int K, const int32_t* labels, double smoothing, const char* op) {
  CHECK(N > 0 && K > 0,
        op << ": needs N > 0 rows and K > 0 classes, got N = " << N << ", K = " << K);
  CHECK(smoothing >= 0 && smoothing < 1,
        op << ": label smoothing must be in [0,1), got " << smoothing);
  for (int n = 0; n < N; n++)
    CHECK(labels[n] >= 0 && labels[n] < K,
          op << ": label " << labels[n] << " at row " << n << " is outside [0," << K << ")");
}

namespace {

// The row max m and log S, S = sum_k exp(z_k - m), of one row of logits.
template <typename T> void row_max_logsum(int K, const T* z, acc_t<T>& m, acc_t<T>& log_s) {
  using A = acc_t<T>;
  m = A(z[0]);
  for (int k = 1; k < K; k++) m = std::fmax(m, A(z[k]));  // a NaN logit still makes S NaN
  A s = 0;
  for (int k = 0; k < K; k++) s += std::exp(A(z[k]) - m);
  log_s = std::log(s);
}

}  // namespace

template <typename T>
void softmax_xent_forward_cpu(int N, int K, const T* logits, const int32_t* labels,
                              acc_t<T> smoothing, acc_t<T>* loss, const acc_t<T>* class_weight) {
  using A = acc_t<T>;
  softmax_xent_check(N, K, labels, double(smoothing));
  A total = 0;
  for (int n = 0; n < N; n++) {
    const T* z = logits + int64_t(n) * K;
    A m, log_s;
    row_max_logsum(K, z, m, log_s);
    // loss_n = log S + sum_k q_k (m - z_k)
    //        = log S + (1 - eps) (m - z_label) + (eps/K) sum_k (m - z_k), every term >= 0.
    // The smoothing sum is skipped when eps = 0, so a -inf logit (p = 0, q = 0) adds 0, not
    // 0 * inf = NaN.
    A row = log_s + (A(1) - smoothing) * (m - A(z[labels[n]]));
    if (smoothing > 0) {
      A gap = 0;
      for (int k = 0; k < K; k++) gap += m - A(z[k]);
      row += smoothing / A(K) * gap;
    }
    if (class_weight) row *= class_weight[labels[n]];  // none: the unweighted bits
    total += row;
  }
  *loss = total / A(N);
}

template <typename T>
void softmax_xent_backward_cpu(int N, int K, const T* logits, const int32_t* labels,
                               acc_t<T> smoothing, acc_t<T> dloss, T* dlogits,
                               const acc_t<T>* class_weight) {
  using A = acc_t<T>;
  softmax_xent_check(N, K, labels, double(smoothing));
  const A off = smoothing / A(K), on = A(1) - smoothing + off;  // q_k off and at the label
  const A g = dloss / A(N);
  for (int n = 0; n < N; n++) {
    const T* z = logits + int64_t(n) * K;
    T* dz = dlogits + int64_t(n) * K;
    A m, log_s;
    row_max_logsum(K, z, m, log_s);
    const A gn = class_weight ? g * class_weight[labels[n]] : g;  // this row's dloss / N
    for (int k = 0; k < K; k++) {
      const A p = std::exp(A(z[k]) - m - log_s);  // softmax, = exp(z_k - m) / S
      const A q = k == labels[n] ? on : off;
      dz[k] = T(A(dz[k]) + gn * (p - q));
    }
  }
}

template <typename T>
int64_t top1_correct_cpu(int N, int K, const T* logits, const int32_t* labels) {
  using A = acc_t<T>;
  softmax_xent_check(N, K, labels, 0.0, "top1_correct");
  int64_t correct = 0;
  for (int n = 0; n < N; n++) {
    const T* z = logits + int64_t(n) * K;
    int best = 0;
    for (int k = 1; k < K; k++)
      if (A(z[k]) > A(z[best])) best = k;  // strict: a tie keeps the first
    correct += best == labels[n];
  }
  return correct;
}

#define CUTRAIN_INSTANTIATE(T)                                                                 \
  template void softmax_xent_forward_cpu<T>(int, int, const T*, const int32_t*, acc_t<T>,      \
                                            acc_t<T>*, const acc_t<T>*);                       \
  template void softmax_xent_backward_cpu<T>(int, int, const T*, const int32_t*, acc_t<T>,     \
                                             acc_t<T>, T*, const acc_t<T>*);                   \
  template int64_t top1_correct_cpu<T>(int, int, const T*, const int32_t*);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(double)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
