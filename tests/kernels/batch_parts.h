// defines: BatchParts (a batch of rows split into parts, each part's work on a thread of its
// own) and ThreadSum (the parts' per-channel sums added up, as replicas' all-reduce does): the
// kernels' BatchNormSync (kernels/batchnorm.h) in tests, without a collective.
//
//   BatchParts parts{{17, 20, 13}};   // 50 rows in 3 parts
//   ThreadSum<double> all(parts.count());
//   parts.run([&](int r) {            // a thread per part
//     ... parts.of(x, C, r) ...       // its rows of an (M, C) array
//     all.sum(r, v, n);               // v[i] = the sum over the parts' v[i], in part order
//   });
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cutrain_test {

struct BatchParts {
  std::vector<int64_t> rows;  // each part's

  int count() const { return int(rows.size()); }
  int64_t total() const {
    int64_t n = 0;
    for (int64_t r : rows) n += r;
    return n;
  }
  int64_t first(int r) const {  // part r's first row
    int64_t n = 0;
    for (int k = 0; k < r; k++) n += rows[size_t(k)];
    return n;
  }
  // Part r's rows of an (M, C) array.
  template <typename T>
  std::vector<T> of(const std::vector<T>& v, int C, int r) const {
    const auto at = v.begin() + std::ptrdiff_t(first(r) * C);
    return std::vector<T>(at, at + std::ptrdiff_t(rows[size_t(r)] * C));
  }
  // f(r) for every part at once, a thread each; returns when all have.
  void run(const std::function<void(int)>& f) const {
    std::vector<std::thread> threads;
    for (int r = 0; r < count(); r++) threads.emplace_back(f, r);
    for (std::thread& t : threads) t.join();
  }
};

template <typename A>
class ThreadSum {
 public:
  explicit ThreadSum(int R) : R_(R), slots_(size_t(R)) {}
  // Thread r's n values become the sum over every thread's (in thread order); blocks until
  // every thread has called it with its n values.
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
