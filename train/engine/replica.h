// defines: Replica (one data-parallel copy of a run: its model, optimizer, lane, loader shard and
// gradient buckets), overflow_name and replica_difference (the --check-replicas test).
//
// A step of R replicas (Engine::launch, train/engine/engine.cpp), one host thread queuing replica
// after replica (with --sync-bn their forward and backward side by side, a thread each):
//
//   replica r:   forward ... backward: layer L, L-1, ..., 1 ──────► wait ─► check ─► (OR) ─► decide, update
//                                          │ bucket k complete on every replica  ▲
//   collective:                            └► average bucket k ... ──────────────┘
//
// Each replica trains on its own shard of the global batch (data/sampler.h: contiguous,
// disjoint, in rank order), seeds backward with its share of the global mean loss, and marks
// each bucket when backward has completed it (Tape::grad_ready); once every replica has marked
// bucket k, the Collective (train/replicas/collective.h) averages it. On the CPU that happens at
// once (the CPU ring's ranks on ReplicaThreads, train/replicas/replica_threads.h); on GPUs it
// is queued on comm streams that wait for the marks (events), so it overlaps the layers before.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/loader.h"
#include "nn/context.h"
#include "nn/model.h"
#include "nn/ops.h"
#include "nn/optim.h"
#include "train/engine/batch_input.h"
#include "train/engine/lane.h"
#include "train/replicas/grad_buckets.h"

namespace cutrain {

struct Replica {
  int rank = 0;
  std::unique_ptr<Lane> lane;          // where its work runs: the CPU, or its GPU's streams
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Loader> loader;
  std::unique_ptr<GradBuckets> grads;  // R > 1 only: R = 1 keeps the gradients as they are
  Tensor bn_sums;                      // more than one micro-batch a step: every BatchNorm
                                       //   layer's step_sums, one flat buffer (one collective)
  Tensor class_weight;                 // --balance loss: (classes) in the loss's dtype on its
                                       //   device, made once (a CUDA graph keeps its address);
                                       //   undefined otherwise
  InputNorm norm;                      // mean and std where the input kernel reads them
  BatchSync bn_sync;                   // --sync-bn: where its BatchNorm layers' states link
                                       //   to the other replicas (Engine::sync_sum)
  double sync_s = 0;                   // --sync-bn: this step's seconds in Engine::sync_sum
  bool thread_named = false;           // --sync-bn with --trace: its thread's row is named
  Batch batch;                         // this step's shard, from next() to release()
  bool any_ready = false;              // this step: a bucket was marked (Lane::first_ready)
};

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
// Every tensor of a replica's state, by name, pointing at the live tensors: the weights, the
// optimizer's state (its averages with --ema), BatchNorm's statistics. What a checkpoint holds
// (engine_state.cpp) and what replica_difference compares.
std::vector<std::pair<std::string, Tensor*>> state_tensors(Model& model, Optimizer& opt);
inline std::vector<std::pair<std::string, Tensor*>> replica_tensors(Replica& rep) {
  return state_tensors(*rep.model, *rep.optimizer);
}

}  // namespace cutrain
