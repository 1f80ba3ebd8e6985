// ReplicaThreads (see replica_threads.h).
#include "train/replicas/replica_threads.h"

#include "kernels/check.h"
#include "kernels/parallel.h"
#include "kernels/thread_start.h"

namespace cutrain {

namespace {
std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an unknown exception";
  }
}
}  // namespace

ReplicaThreads::ReplicaThreads(int replicas, std::function<void(const std::string&)> on_error,
                               int compute_threads)
    : R_(replicas), on_error_(std::move(on_error)) {
  CHECK(replicas >= 1, "ReplicaThreads: need at least one replica");
  try {
    for (int r = 1; r < R_; r++)
      threads_.push_back(start_thread("the thread of replica " + std::to_string(r),
                                      [this, r, compute_threads] {
                                        if (compute_threads > 0)
                                          set_compute_threads(compute_threads);
                                        main(r);
                                      }));
  } catch (...) {  // the destructor does not run for a constructor that throws
    stop();
    throw;
  }
}

void ReplicaThreads::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

ReplicaThreads::~ReplicaThreads() { stop(); }

void ReplicaThreads::call(int r) {
  try {
    (*job_)(r);
  } catch (...) {
    const std::exception_ptr e = std::current_exception();
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = e, first = true;
    }
    // Outside the lock: on_error wakes the other replicas, which may be about to finish.
    if (first && on_error_) on_error_("replica " + std::to_string(r) + " failed: " + what_of(e));
  }
}

void ReplicaThreads::main(int r) {
  int64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    call(r);
    std::lock_guard<std::mutex> lock(mu_);
    if (--running_ == 0) cv_.notify_all();
  }
}

void ReplicaThreads::run(const std::function<void(int)>& f) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &f;
    error_ = nullptr;
    running_ = R_ - 1;
    generation_++;
  }
  cv_.notify_all();
  call(0);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return running_ == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

}  // namespace cutrain
