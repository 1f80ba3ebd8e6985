// defines: Replica (one data-parallel copy of a run: its model, optimizer, loader shard,
// gradient buckets and communication thread), CommThread (the thread that all-reduces a
// replica's buckets as backward completes them), ReplicaThreads (one compute thread per
// replica), average_batchnorm_stats and replica_difference (the --check-replicas test).
//
// A step of R replicas (Trainer::step, train/trainer.cpp):
//
//   compute thread r:  forward ... backward: layer L, L-1, ..., 1 ──────────► wait ─► check ─► any ─► update
//                                                 │ bucket ready    │                        (all skip
//   comm thread r:                                └► all-reduce k ──└► all-reduce k+1 ...     together)
//
// Each replica trains on its own shard of the global batch (data/sampler.h: contiguous, disjoint,
// in rank order), seeds backward with its share of the global mean loss, and hands each bucket
// to its comm thread when backward has completed it (Tape::grad_ready); the comm threads of all
// replicas run the ring all-reduce (train/ring.h) bucket after bucket, in the same order, while
// the compute threads go on with the layers before. On a GPU the compute thread is the compute
// stream, the comm thread the comm stream, and "bucket ready" an event.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/loader.h"
#include "nn/gpu_context.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "train/grad_buckets.h"
#include "train/ring.h"

namespace cutrain {

class CommThread {
 public:
  CommThread(Ring& ring, int rank, GradBuckets& grads);
  ~CommThread();  // stops and joins
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Before the backward that completes the gradients: arms the buckets, and the thread waits
  // for bucket 0.
  void start();
  // Tape::grad_ready of the compute thread: marks v's bucket ready when v completed it.
  void on_grad_ready(const Var& v);
  // After backward: every bucket not yet ready is, then waits until all are all-reduced.
  // Returns the seconds waited: the communication backward did not hide. Rethrows an error of
  // the comm thread.
  double finish();
  // Seconds the comm thread spent in all-reduces during the last step (including waiting for
  // slower peers inside the ring).
  double busy_seconds() const { return busy_s_; }

 private:
  void mark_ready(int k);
  void main();

  Ring& ring_;
  const int rank_;
  GradBuckets& grads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<char> ready_;  // per bucket, this step
  int64_t generation_ = 0;   // start() calls
  size_t done_ = 0;          // buckets all-reduced this step
  bool stop_ = false;
  std::exception_ptr error_;
  double busy_s_ = 0;
  std::thread thread_;
};

struct Replica {
  int rank = 0;
  GpuContext context;                  // its compute stream and device (on the CPU: no stream)
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Loader> loader;
  std::unique_ptr<GradBuckets> grads;  // R > 1 only: R = 1 keeps the gradients as they are
  std::unique_ptr<CommThread> comm;    // R > 1 only
  Tensor class_weight;                 // --balance loss: (classes) in the loss's dtype on its
                                       //   device, made once (a CUDA graph keeps its address);
                                       //   undefined otherwise
  Batch batch;                         // this step's shard, from next() to release()
  // this step:
  double loss = 0;                     // the shard's loss, weighted by its share
  int64_t correct = 0;
  double comm_s = 0, exposed_s = 0;    // all-reduce time, and the part backward did not hide
};

// One compute thread per replica: run(f) calls f(r) for every replica r at once (r = 0 on the
// calling thread) and returns when all have; the first exception is rethrown, after on_error
// was called with its message (it aborts the ring, so the other replicas stop waiting).
class ReplicaThreads {
 public:
  ReplicaThreads(int replicas, std::function<void(const std::string&)> on_error);
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

// Every replica's BatchNorm running statistics replaced by their average over the replicas
// (in rank order, in the statistics' dtype), so all evaluate and save the same model. The
// update of running statistics is linear in them, so averaging earlier or later gives the same
// result up to rounding.
void average_batchnorm_stats(std::vector<Replica*> replicas);

// What a step skipped by R > 1 replicas names: the first replica whose own (averaged)
// gradients overflowed and its first parameter at fault, "replica 1: conv2.w"; only the
// parameter when every replica's did. An inf or NaN in one replica's backward is averaged into
// every replica's gradients, so then all overflow and the source is not known; a replica
// named alone had it after the all-reduce (e.g. injected by a test). overflowed[r]: replica
// r's check failed; param(r): its first parameter at fault.
std::string overflow_name(const std::vector<char>& overflowed,
                          const std::function<std::string(int)>& param);

// "" when every replica's weights and optimizer state equal replica 0's bit for bit; else which
// replica and tensor differ first, with the xxh64 of both. GPU replicas' tensors are copied to
// the host (after the work queued for them): a debugging aid, not for every step.
std::string replica_difference(const std::vector<Replica*>& replicas);

}  // namespace cutrain
