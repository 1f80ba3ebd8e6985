// defines: ThreadSum, R threads adding up per-channel sums as replicas' all-reduce does: the
// kernels' BatchNormSync (kernels/batchnorm.h) in tests, without a collective.
//
//   ThreadSum<double> all(R);
//   ... on thread r: all.sum(r, v, n)   // v[i] = the sum over the R threads' v[i], rank order
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

namespace cutrain_test {

template <typename A>
class ThreadSum {
 public:
  explicit ThreadSum(int R) : R_(R), slots_(size_t(R)) {}
  // Blocks until every thread has called it with its n values.
  void sum(int r, A* v, int n) {
    std::unique_lock<std::mutex> lock(mu_);
    slots_[size_t(r)].assign(v, v + n);
    meet(lock);
    for (int i = 0; i < n; i++) {
      A s = 0;
      for (const std::vector<A>& slot : slots_) s += slot[size_t(i)];
      v[i] = s;
    }
    meet(lock);  // nobody refills a slot before everyone has read them
  }

 private:
  void meet(std::unique_lock<std::mutex>& lock) {
    const int64_t round = round_;
    if (++arrived_ == R_) {
      arrived_ = 0;
      round_++;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return round_ != round; });
    }
  }
  const int R_;
  std::vector<std::vector<A>> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t round_ = 0;
};

}  // namespace cutrain_test
