// ReplicaThreads and the replica helpers (see replica.h).
#include "train/replicas/replica.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "kernels/check.h"
#include "kernels/parallel.h"
#include "kernels/thread_start.h"
#include "kernels/xxhash64.h"

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

// ---- ReplicaThreads ----------------------------------------------------------------------

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

// ---- helpers -----------------------------------------------------------------------------

namespace {
// A replica's tensor on the host: itself on the CPU; from a GPU, a copy ordered after the work
// queued for the replica (on its compute stream, where its tensors were made), waited for.
Tensor on_host(const Replica& rep, const Tensor& t) {
  if (t.device() == Device::cpu) return t;
  const OnDevice on(rep.lane->context());
  return t.to(Context::cpu());
}
}  // namespace

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

std::vector<std::pair<std::string, const Tensor*>> replica_tensors(Replica& rep) {
  std::vector<std::pair<std::string, const Tensor*>> all;
  for (const VarPtr& p : rep.model->parameters()) all.emplace_back(p->name, &p->value);
  for (auto& [name, t] : rep.optimizer->state_tensors()) all.emplace_back(name, t);
  for (const auto& [name, st] : rep.model->batchnorm_states()) {  // equal too: one update a step
    all.emplace_back(name + ".running_mean", &st->running_mean);
    all.emplace_back(name + ".running_var", &st->running_var);
  }
  return all;
}

std::string replica_difference(const std::vector<Replica*>& replicas) {
  const auto ref = replica_tensors(*replicas[0]);
  std::vector<Tensor> ref_host;  // replica 0's, copied once
  for (const auto& named : ref) ref_host.push_back(on_host(*replicas[0], *named.second));
  for (size_t r = 1; r < replicas.size(); r++) {
    const auto other = replica_tensors(*replicas[r]);
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
