// defines: Trainer, one training run (its data, loaders, schedule and where it is) around its
// Engine (train/engine/engine.h: the step itself), and the body of the training loop.
//
// One step, top to bottom (Trainer::launch, then Engine::launch in engine.cpp), the same code on
// the CPU and on GPUs (a batch's whole path, list file to checkpoint: docs/journey.md):
//   1. every replica's shard of the next batch from its Loader (decoded and augmented by its
//      worker threads; on a GPU already copied to the device on the loader's copy stream);
//   2. for each of the `accum` micro-batches: the uint8 NHWC pixels to the model's input,
//      normalised, in the model's dtype; forward; softmax cross-entropy with label smoothing
//      (in fp32); backward seeded with the loss scale times the micro-batch's share of the
//      batch (DeviceStep::seed), so the gradients add up to those of the whole batch's mean
//      loss; the loss and the top-1 count added to the step's record;
//   3. the optimizer step at the schedule's learning rate (nn/device_step.h): every gradient
//      unscaled and checked for inf/NaN into a flag per parameter (with replicas, the flags
//      OR-ed over them), the decision (skip the whole step, naming the first parameter at
//      fault, or update the fp32 master weights, which write the fp16 working copy);
//   4. the loss scaler's transition (halve on overflow, grow after clean steps) and the step
//      count, in the step state; the state into the record; the gradients zeroed;
//   5. the batch goes back to the Loader, whose workers refill its slot; the record starts its
//      way to the host (train/engine/lane.h).
// results() reads the records that have arrived: the step's loss, top-1, scale and decision,
// and stops the run after too many overflows in a row (loss_scaler_check).
// The epoch loop around it (evaluation, checkpoints, signals, progress) is run_training
// (train/run/run.h).
//
// Every replica's work goes to its Lane (train/engine/lane.h): the CPU is a device whose work is
// complete when it is queued, a GPU queues it on the lane's compute stream, and the host never
// waits for it: the loss scale is a device scalar that seeds backward, the skip decision and
// the scale's change are kernels, and a side stream copies each step's record to pinned host
// memory. So on a GPU launch() returns as soon as the step is queued, and the host runs ahead,
// preparing the next steps, until it is kMaxInFlight steps ahead or, sooner, the loader has no
// batch ready (its slots are refilled only once the GPU has consumed them). The CPU runs the
// very same protocol, so CI, which has no GPU, checks the control flow the GPU runs.
//
//   trainer.launch();                             // queue a step (CPU: do it)
//   for (const StepResult& r : trainer.results())  // the steps whose numbers are known
//     report(r);
//   trainer.results(true);                        // wait for all (before evaluating or saving)
//
// Replicas (--devices cpu,cpu,... or 0,1,...; train/engine/replica.h): R copies of the model,
// identical at the start (built from the same seed), each with its own loader of its shard of
// every global batch, its own optimizer and step state, its own lane. One host thread runs
// step 2 replica after replica; each replica's backward is seeded with R times its share of
// the global mean loss, and as backward completes a bucket of gradients on every replica the
// Collective (train/replicas/collective.h) averages it (on GPUs on comm streams, while backward goes
// on), so every replica ends with the same bits: those of the whole batch's mean loss, up to
// the order of the sums. Step 3 ORs the replicas' overflow flags before deciding, so every
// replica decides alike and they never drift apart. BatchNorm normalises with each replica's
// own batch statistics; the running statistics make one update per step from the mean of all
// replicas' batch statistics (Engine::update_batchnorm), alike on every replica. With R = 1 none
// of this exists: no buckets, no collective.
//
// Exact resume: a run is a pure function of its configuration. The batches are fixed by
// (seed, epoch, batch) (with --balance sampler, and the labels) and the augmentation by (seed,
// epoch, sample) (in a balanced epoch, by the draw's position); the weights, master
// weights, optimizer state, BatchNorm statistics and loss-scaler state are saved bit for bit
// (snapshot) and restored (restore), as are the step counter (the schedule's clock) and the
// sampler cursor. So a run resumed from a checkpoint computes exactly the losses and weights
// of one that never stopped (on a GPU too: every kernel is deterministic).
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "data/fingerprint.h"
#include "data/loader.h"
#include "data/trace.h"
#include "nn/context.h"
#include "nn/loss_scaler.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "nn/schedule.h"
#include "train/checkpoint/checkpoint.h"
#include "train/engine/batch_input.h"
#include "train/engine/engine.h"
#include "train/engine/evaluate.h"
#include "train/setup/balance.h"
#include "train/setup/config.h"
#include "train/setup/device.h"
#include "train/setup/memory_plan.h"

namespace cutrain {

class Trainer {
 public:
  // cfg must be resolved (resolve_config): the data are opened, the model built and
  // initialised from cfg.seed, the optimizer, the scaler and the schedule set up.
  Trainer(const TrainConfig& cfg, const RunDevice& device);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Starts one optimizer step on the next batch (see the top of this file): on the CPU it is
  // done when launch() returns, on a GPU it is queued. Blocks only for the loader's next batch,
  // or when kMaxInFlight steps are in flight, for the oldest of them.
  void launch();
  // The results of launched steps, in step order, each once: those whose device part has
  // arrived (wait = false: never blocks; on the CPU that is every launched step), or all of
  // them (wait = true). Throws when the loss scaler gives up (too many overflows in a row),
  // naming the step.
  std::vector<StepResult> results(bool wait = false);
  // Launched steps whose results have not been handed out yet.
  size_t pending() const;
  // launch(), then that step's result: one step, synchronously (tests, benchmarks). No earlier
  // step may be pending.
  StepResult step();

  // The model on the validation data (cfg.val; an error when there is none), with --tta's
  // flips; averaged: the weights' moving average instead (--ema; Engine::averaged_model).
  // Under mpirun every rank calls it (the BatchNorm average is a collective) and rank 0 alone
  // evaluates: the others get an empty result.
  EvalResult evaluate(bool averaged = false);
  bool has_average() const { return cfg_.ema > 0; }  // --ema
  bool has_validation() const { return bool(val_); }

  // Everything a resumed run needs after the last launched step, as host copies (the writer
  // thread owns them): see engine_state.cpp for the names. scalars also carry `extra` (e.g.
  // best_top1). With replicas: replica 0's state (all are equal), after averaging the
  // BatchNorm statistics. Steps may be pending: on a GPU this waits for them.
  Checkpoint snapshot(const std::map<std::string, double>& extra = {});
  // The same without waiting for the GPU (on the CPU it is snapshot()): the state is cloned
  // on the device, queued after the launched steps, and the checkpoint comes back pending
  // (Checkpoint::pending): its complete(), which the CheckpointWriter calls on its thread,
  // waits for the clones, copies them to the host and reads the loss scaler's state and the
  // step count the device had after the last launched step. Training goes on meanwhile; the
  // clones cost the state's size in device memory until then.
  Checkpoint snapshot_async(const std::map<std::string, double>& extra = {});
  // Puts a checkpoint's state into this trainer (into every replica), made from the
  // checkpoint's configuration, on any number of replicas. Every tensor must be there with the
  // right shape and dtype, and nothing else; the next step() trains on the checkpoint's cursor.
  // The training data must be the checkpoint's (its data_fingerprint, when it has one):
  // otherwise a UserError says what changed.
  void restore(const Checkpoint& c);
  // restore() for training data that changed on purpose (--allow-data-change): the state as
  // restore() puts it, but the next step is the first of the epoch after the checkpoint's
  // (of the one it ended, when it is at an epoch's end), in that epoch's fresh order over the
  // new data, at that epoch's step. Not what an uninterrupted run computes. Returns the line
  // to print: what changed and where the run goes on.
  std::string restore_at_next_epoch(const Checkpoint& c);
  // What changed from the checkpoint's training data to this run's, for a message ("96 samples
  // then, 128 now; ..."); "" when nothing did, or the checkpoint has no fingerprint.
  std::string data_change(const Checkpoint& c) const;
  const DataFingerprint& data_fingerprint() const { return fingerprint_; }

  int64_t steps_done() const { return step_; }      // optimizer steps launched so far
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t total_steps() const { return steps_per_epoch_ * cfg_.epochs; }
  int epochs_done() const { return int(step_ / steps_per_epoch_); }
  SamplerCursor cursor() const { return cursor_; }  // the batch the next step trains on
  const TrainConfig& config() const { return cfg_; }
  const RunDevice& device() const { return device_; }
  // What the run allocates, estimated before it did (train/setup/memory_plan.h); checked against
  // the machine's available memory by the constructor.
  const MemoryPlan& memory_plan() const { return memory_; }
  // The step on the replicas (train/engine/engine.h): their models, optimizers, step states.
  Engine& engine() { return *engine_; }
  Model& model(int replica = 0) { return engine_->model(replica); }
  Optimizer& optimizer(int replica = 0) { return engine_->optimizer(replica); }
  int replicas() const { return engine_->replicas(); }  // in this process
  int world() const { return engine_->world(); }        // in all (under mpirun, processes)
  // One line: the replicas, the shards and the gradient buckets ("" with one replica).
  std::string replicas_description() const { return engine_->description(); }
  // Replica r's GPU context for a scope: its compute stream and its device, so that tensor
  // copies and kernels are ordered after the steps queued for it (tests reading or writing a
  // replica's gradients in after_backward). On the CPU it changes nothing.
  OnDevice on_replica(int r) const { return engine_->on_replica(r); }
  // GPU replicas: the peer-access matrix of their devices with each pair's measured copy
  // bandwidth (train/replicas/peer_access.h; takes a fraction of a second). "" otherwise.
  std::string peer_report() const { return engine_->peer_report(); }
  // On a GPU, whether the step runs from CUDA graphs and why (Engine::graph_description).
  std::string graph_description() const { return engine_->graph_description(); }
  // "" when all replicas' weights and optimizer state are equal bit for bit, else the first
  // difference (what --check-replicas checks every N steps).
  std::string replicas_difference() const { return engine_->replicas_difference(); }
  // Replica r's step state after every launched step (the loss scaler, the step count): on a
  // GPU it waits for them. The loss scaler's configuration: loss_scaler_config (engine.h).
  StepState step_state(int r = 0) const { return engine_->step_state(r); }
  const ScheduleConfig& schedule() const { return schedule_; }
  const SampleSource& train_data() const { return *train_; }
  // --balance: the classes' counts and weights, and the run's line about them ("" for none).
  const ClassBalance& balance() const { return balance_; }
  // "threads: 2 decoding, 2 computing": each loader's decode threads and, on the CPU, each
  // replica's compute threads (train/setup/device.h).
  std::string threads_description() const;
  std::string balance_description() const {
    return cutrain::balance_description(balance_, cfg_.class_names);
  }
  const SampleSource* val_data() const { return val_.get(); }  // null: no validation data
  LoaderStats loader_stats() const;  // of replica 0's current loader (since it was made)
  // The bad files this process's loaders have found so far (their workers read ahead: some
  // may belong to later steps), each with the rank of the replica that read it.
  std::vector<std::pair<int, BadFile>> bad_files() const;

  // Spans of the steps ("step", "input", "forward", "backward", "optimizer"), evaluations and
  // the loader's workers go here (data/trace.h); null: none. Set before the first step.
  Tracer* tracer = nullptr;

  // Called in launch() after the last backward (and, with replicas, the all-reduce) and before
  // the optimizer step: the gradients of model(r).parameters() hold the batch's loss-scaled
  // (averaged) gradients (on a GPU: queued to; reach replica r's under on_replica(r)). For
  // tests (injecting an inf).
  std::function<void(Trainer&)> after_backward;
  // Called in launch() with each replica's shard once the loader has delivered it. For tests.
  std::function<void(int replica, const Batch&)> on_shard;
  // Called on the thread that runs a replica's forward and backward (with --sync-bn, its own),
  // before them, with the replica's rank. For tests.
  std::function<void(int rank)> on_forward_backward;
  // One-line messages for the user while training (run/run.cpp prints them): the CUDA graph was
  // captured (--cuda-graph), or why CUDA refused it. Null: not said.
  std::function<void(const std::string&)> notice;

  // Steps a trainer may have in flight: the size of each lane's ring of step records.
  static constexpr int kMaxInFlight = Engine::kMaxInFlight;

 private:
  void start_loaders();  // every replica's, at cursor_
  int loaders_here() const;  // on this machine: this process's replicas', mpirun's neighbours'
  void restore_state(const Checkpoint& c);  // restore()'s checks and state

  TrainConfig cfg_;
  RunDevice device_;
  MemoryPlan memory_;
  DataFingerprint fingerprint_;                // of the training data (checkpoints keep it)
  ClassBalance balance_;                       // --balance: of the training data
  std::string fingerprint_json_;
  Normalization norm_;
  std::shared_ptr<const SampleSource> train_, val_;
  std::unique_ptr<Engine> engine_;
  ScheduleConfig schedule_;
  int64_t steps_per_epoch_ = 0;
  int64_t step_ = 0;
  SamplerCursor cursor_;
  std::deque<StepResult> done_;                // steps whose results are known, not handed out
};

}  // namespace cutrain
