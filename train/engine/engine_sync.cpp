// Synchronised BatchNorm (--sync-bn): the replicas' BatchNorm layers take their statistics over
// the global batch (train/replicas/REPLICAS.md, "Synchronised BatchNorm").
//
// A BatchNorm layer's kernels stop twice in the forward (after summing x, after summing
// (x - mean)^2) and once in the backward (sum dy, sum dy*xhat) for sync_sum, which turns the
// replica's per-channel sums into every replica's. So the replicas must reach each layer
// together: under mpirun each process runs its own replica anyway; in one process the
// replicas' forward and backward run side by side on threads_, a thread each, and meet here.
// The sums are all-reduced (summed, not averaged) by the gradients' collective.
#include <algorithm>
#include <chrono>
#include <string>

#include "kernels/check.h"
#include "train/engine/engine.h"
#include "train/replicas/deadline.h"
#include "train/replicas/mpi.h"

namespace cutrain {

void Engine::start_sync_bn() {
  sync_bn_ = true;
  for (auto& rep : replicas_) {
    Replica* r = rep.get();
    r->bn_sync.sum = [this, r](const Context&, void* data, int n, DType dtype) {
      sync_sum(*r, data, n, dtype);
    };
    for (const auto& [name, st] : r->model->batchnorm_states()) st->sync = &r->bn_sync;
  }
  if (replicas() == 1) return;  // mpirun: one replica in this process
  sync_data_.assign(replicas_.size(), nullptr);
  sync_here_.assign(replicas_.size(), false);
  // A replica that fails lets the others stop waiting for it (they throw too).
  threads_ = std::make_unique<ReplicaThreads>(
      replicas(),
      [this](const std::string&) {
        const std::lock_guard<std::mutex> lock(comm_mu_);
        sync_failed_ = true;
        sync_cv_.notify_all();
      },
      compute_threads_);
}

void Engine::plan_sync(int64_t step) {
  // Every replica's shard size, in rank order.
  std::vector<int64_t> sizes;
  for (auto& rep : replicas_) sizes.push_back(rep->batch.n);
  if (device_.mpi) {
    const int64_t mine = sizes[0];
    sizes.assign(size_t(world_), 0);
    device_.mpi->all_gather(&mine, sizeof mine, sizes.data());
  }
  const int64_t micro = cfg_.batch / world_ / cfg_.accum;  // forward_backward's
  auto batches = [micro](int64_t n) { return (n + micro - 1) / micro; };
  const int64_t K = batches(sizes[0]);
  bool same = K > 0;
  for (int64_t n : sizes) same = same && batches(n) == K;
  sync_images_.clear();
  const bool empty = std::all_of(sizes.begin(), sizes.end(), [](int64_t n) { return n == 0; });
  if (!same && !empty) {
    // A batch whose shards lost bad files unevenly, so that they do not split alike: the
    // replicas cannot meet at every layer, so each uses its own statistics.
    if (notice) {
      std::string list;
      for (int64_t n : sizes) list += (list.empty() ? "" : ", ") + std::to_string(n);
      notice("--sync-bn: step " + std::to_string(step + 1) + "'s shards (" + list +
             " images) do not split into the same number of micro-batches of " +
             std::to_string(micro) + ", so in this step each replica's BatchNorm uses the "
             "statistics of its own shard");
    }
  }
  if (!same) return;
  sync_images_.assign(size_t(K), 0);
  for (int64_t n : sizes)
    for (int64_t k = 0; k < K; k++) sync_images_[size_t(k)] += std::min(micro, n - k * micro);
}

void Engine::sync_sum(Replica& rep, void* data, int n, DType dtype) {
  const auto start = std::chrono::steady_clock::now();
  Collective& c = *collective_;
  std::unique_lock<std::mutex> lock(comm_mu_);
  c.mark(rep.rank, sync_tag());  // after the kernels that wrote data
  if (replicas() == 1) {  // mpirun: the other replicas are the other processes
    c.all_reduce(sync_tag(), {data}, n, dtype, /*average=*/false);
  } else {
    // (After a failure the engine is broken: nothing here is reset, no step runs again.)
    CHECK(!sync_failed_, "--sync-bn: another replica failed in this step");
    if (sync_arrived_ == 0) sync_n_ = n, sync_dtype_ = dtype;
    CHECK(n == sync_n_ && dtype == sync_dtype_,
          "--sync-bn: replica " << rep.rank << " brought " << n << " " << dtype_name(dtype)
                                << " sums where another brought " << sync_n_ << " "
                                << dtype_name(sync_dtype_) << ": a bug in cutrain");
    sync_data_.at(size_t(rep.rank)) = data;
    sync_here_.at(size_t(rep.rank)) = true;
    if (++sync_arrived_ < replicas()) {
      const int64_t round = sync_round_;
      auto done = [&] { return sync_round_ != round || sync_failed_; };
      const double timeout = cfg_.collective_timeout;
      Deadline deadline(timeout);
      if (timeout <= 0) {
        sync_cv_.wait(lock, done);
      } else {
        while (!sync_cv_.wait_for(lock, std::chrono::duration<double>(Deadline::kPollSeconds),
                                  done))
          if (deadline.passed()) break;
      }
      if (!done()) {
        // The collective timeout: the replicas that never brought their sums, named; the
        // others stop waiting too (ReplicaThreads' on_error sets sync_failed_).
        std::string missing;
        for (size_t r = 0; r < sync_here_.size(); r++)
          if (!sync_here_[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        USER_CHECK(false, "collective timeout: replica " << rep.rank << " waited " << timeout
                              << " s at step " << step_now_ + 1 << " in --sync-bn's BatchNorm "
                              << "sums for replica " << missing << ", which never brought "
                              << "theirs (--collective-timeout " << timeout << ")");
      }
      CHECK(sync_round_ != round, "--sync-bn: another replica failed in this step");
    } else {  // the last to arrive: every replica's sums are queued
      c.all_reduce(sync_tag(), sync_data_, n, dtype, /*average=*/false);
      sync_arrived_ = 0;
      std::fill(sync_here_.begin(), sync_here_.end(), false);
      sync_round_++;
      sync_cv_.notify_all();
    }
  }
  c.wait(rep.rank);  // its queue goes on with the sums
  rep.sync_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace cutrain
