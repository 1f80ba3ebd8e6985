// defines: ReplicaThreads, one persistent thread per replica: how the CPU ring's ranks run
// (train/replicas/collective.cpp) and how --sync-bn runs the replicas' forward and backward side
// by side (train/engine/engine_sync.cpp).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cutrain {

// One thread per replica: run(f) calls f(r) for every replica r at once (r = 0 on the
// calling thread) and returns when all have; the first exception is rethrown, after on_error
// was called with its message (it aborts the ring, so the other replicas stop waiting).
class ReplicaThreads {
 public:
  // compute_threads > 0: the compute threads (kernels/parallel.h) of each thread started here
  // (OpenMP keeps the count per thread; rank 0 runs on the caller's, which keeps its own).
  ReplicaThreads(int replicas, std::function<void(const std::string&)> on_error,
                 int compute_threads = 0);
  ~ReplicaThreads();
  ReplicaThreads(const ReplicaThreads&) = delete;
  ReplicaThreads& operator=(const ReplicaThreads&) = delete;

  void run(const std::function<void(int)>& f);
  int size() const { return R_; }

 private:
  void main(int r);
  void stop();  // and join the threads
  void call(int r);

  const int R_;
  std::function<void(const std::string&)> on_error_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* job_ = nullptr;
  int64_t generation_ = 0;
  int running_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

}  // namespace cutrain
