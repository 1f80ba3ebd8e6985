// CommThread, ReplicaThreads and the replica helpers (see replica.h).
#include "train/replica.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "kernels/check.h"
#include "kernels/thread_start.h"
#include "kernels/xxhash64.h"

namespace cutrain {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
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

// ---- CommThread --------------------------------------------------------------------------

CommThread::CommThread(Ring& ring, int rank, GradBuckets& grads)
    : ring_(ring), rank_(rank), grads_(grads), ready_(grads.size(), 0),
      done_(grads.size()) {
  thread_ = start_thread("the gradient thread of replica " + std::to_string(rank), [this] { main(); });
}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CommThread::start() {
  std::lock_guard<std::mutex> lock(mu_);
  grads_.arm();
  std::fill(ready_.begin(), ready_.end(), 0);
  done_ = 0;
  busy_s_ = 0;
  generation_++;
  cv_.notify_all();
}

void CommThread::mark_ready(int k) {
  std::lock_guard<std::mutex> lock(mu_);
  ready_[size_t(k)] = 1;
  cv_.notify_all();
}

void CommThread::on_grad_ready(const Var& v) {
  const int k = grads_.ready(v);  // compute thread only: no lock needed for the counts
  if (k >= 0) mark_ready(k);
}

double CommThread::finish() {
  for (int k : grads_.finish()) mark_ready(k);
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_ == ready_.size() || error_; });
  if (error_) std::rethrow_exception(error_);
  return seconds_since(t0);
}

void CommThread::main() {
  int64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    // Buckets strictly in order, on every replica: the ring's collectives must match.
    for (size_t k = 0; k < ready_.size(); k++) {
      cv_.wait(lock, [&] { return stop_ || ready_[k]; });
      if (stop_) return;
      lock.unlock();
      const GradBucket& b = grads_[k];
      const auto t0 = Clock::now();
      try {
        ring_.all_reduce(rank_, b.data, b.numel, b.dtype, true);
      } catch (...) {
        lock.lock();
        error_ = std::current_exception();
        cv_.notify_all();
        break;
      }
      const double dt = seconds_since(t0);
      lock.lock();
      busy_s_ += dt;
      done_ = k + 1;
      cv_.notify_all();
    }
    if (error_) {  // the ring is aborted: nothing more to do but stop when told
      cv_.wait(lock, [&] { return stop_; });
      return;
    }
  }
}

// ---- ReplicaThreads ----------------------------------------------------------------------

ReplicaThreads::ReplicaThreads(int replicas, std::function<void(const std::string&)> on_error)
    : R_(replicas), on_error_(std::move(on_error)) {
  CHECK(replicas >= 1, "ReplicaThreads: need at least one replica");
  try {
    for (int r = 1; r < R_; r++)
      threads_.push_back(start_thread("the thread of replica " + std::to_string(r),
                                      [this, r] { main(r); }));
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

// ---- helpers -----------------------------------------------------------------------------

namespace {
// A replica's tensor on the host: itself on the CPU; from a GPU, a copy ordered after the work
// queued for the replica (its context), waited for.
Tensor on_host(const Replica& rep, const Tensor& t) {
  if (t.device() == Device::cpu) return t;
  const GpuContextScope on(rep.context);
  return t.to(Device::cpu);
}
}  // namespace

void average_batchnorm_stats(std::vector<Replica*> replicas) {
  const size_t R = replicas.size();
  if (R <= 1) return;
  const size_t layers = replicas[0]->model->batchnorm_states().size();
  for (size_t i = 0; i < layers; i++) {
    for (Tensor BatchNormState::*field : {&BatchNormState::running_mean,
                                          &BatchNormState::running_var}) {
      auto stat = [&](Replica* rep) -> Tensor& {
        return rep->model->batchnorm_states()[i].second->*field;
      };
      const Tensor& t0 = stat(replicas[0]);
      const int64_t n = t0.numel();
      Tensor mean = Tensor::empty(t0.shape(), t0.dtype());
      auto average = [&](auto tag) {
        using A = decltype(tag);
        A* sum = mean.template data<A>();
        std::fill(sum, sum + n, A(0));
        for (Replica* rep : replicas) {  // rank order: the same result every time
          const Tensor x = on_host(*rep, stat(rep));
          for (int64_t e = 0; e < n; e++) sum[e] += x.template data<A>()[e];
        }
        for (int64_t e = 0; e < n; e++) sum[e] /= A(R);
      };
      if (t0.dtype() == DType::f64)
        average(double{});
      else
        average(float{});
      for (Replica* rep : replicas) {
        const GpuContextScope on(rep->context);  // a GPU's copy: on the replica's stream
        stat(rep).copy_from(mean);
      }
    }
  }
}

std::string overflow_name(const std::vector<char>& overflowed,
                          const std::function<std::string(int)>& param) {
  const int R = int(overflowed.size());
  int first = -1, count = 0;
  for (int r = 0; r < R; r++)
    if (overflowed[size_t(r)]) {
      if (first < 0) first = r;
      count++;
    }
  if (first < 0) return "";
  return count < R ? "replica " + std::to_string(first) + ": " + param(first) : param(first);
}

std::string replica_difference(const std::vector<Replica*>& replicas) {
  auto tensors = [](Replica& rep) {
    std::vector<std::pair<std::string, const Tensor*>> all;
    for (const VarPtr& p : rep.model->parameters()) all.emplace_back(p->name, &p->value);
    for (auto& [name, t] : rep.optimizer->state_tensors()) all.emplace_back(name, t);
    return all;
  };
  const auto ref = tensors(*replicas[0]);
  std::vector<Tensor> ref_host;  // replica 0's, copied once
  for (const auto& named : ref) ref_host.push_back(on_host(*replicas[0], *named.second));
  for (size_t r = 1; r < replicas.size(); r++) {
    const auto other = tensors(*replicas[r]);
    for (size_t i = 0; i < ref.size(); i++) {
      const Tensor& a = ref_host[i];
      const Tensor b = on_host(*replicas[r], *other[i].second);
      const uint64_t ha = xxh64(a.raw(), a.bytes()), hb = xxh64(b.raw(), b.bytes());
      if (ha != hb || std::memcmp(a.raw(), b.raw(), a.bytes()) != 0) {
        char buf[64];
        std::snprintf(buf, sizeof buf, " (xxh64 %016llx against %016llx)",
                      (unsigned long long)hb, (unsigned long long)ha);
        return "replica " + std::to_string(r) + " differs from replica 0 in '" + ref[i].first +
               "'" + buf;
      }
    }
  }
  return "";
}

}  // namespace cutrain
