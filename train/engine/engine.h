// defines: Engine, the training step on R replicas (R >= 1) on any device: their models,
// optimizers, lanes and gradient buckets, the collective between them, and the step protocol
// that drives them; StepResult, what one step did.
//
// The Engine does a step (train/README.md, "One step's journey"): the shards from the
// replicas' loaders (which the Trainer makes), forward and backward, the collective, the
// optimizer step, the records, and later their results. The same code for every device: what
// differs is behind Lane (train/engine/lane.h) and Collective (train/replicas/collective.h). It
// knows nothing of data sets, epochs, schedules or checkpoints' files (train/engine/trainer.h
// has those). Its files, one concern each: engine.cpp queues a step, engine_replicas.cpp builds
// the replicas and describes them, engine_results.cpp reads results back, engine_state.cpp
// snapshots and restores, engine_sync.cpp is --sync-bn, engine_graph.cpp --cuda-graph.
//
//   Engine e(cfg, device, balance);
//   ... the Trainer makes each e.replica(r).loader ...
//   e.launch(r);                 // queue step r.step (CPU: do it)
//   e.collect(0, done);          // the steps whose records have arrived
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/metrics.h"
#include "data/sampler.h"
#include "data/trace.h"
#include "kernels/parallel.h"
#include "nn/loss_scaler.h"
#include "train/checkpoint/checkpoint.h"
#include "train/engine/lane.h"
#include "train/engine/replica.h"
#include "train/replicas/collective.h"
#include "train/replicas/replica_threads.h"
#include "train/setup/balance.h"
#include "train/setup/config.h"
#include "train/setup/device.h"

namespace cutrain {

struct StepResult {
  int64_t step = 0;           // this step's number (0-based): the schedule's clock
  SamplerCursor batch;        // the batch it trained on
  int images = 0;             // in the batch (bad files removed)
  double loss = 0;            // the batch's mean loss (with label smoothing and --balance
                              //   loss's class weights: as optimised)
  int64_t correct = 0;        // top-1 correct in the batch
  double lr = 0;              // the learning rate it used
  double loss_scale = 1;      // the loss scale its backward used
  double scale_after = 1;     // the loss scale after it (what the next step uses)
  bool taken = true;          // false: an inf/NaN gradient, the step was skipped
  std::string overflow;       // then: the first parameter whose gradient overflowed (with
                              // replicas, see overflow_name in train/engine/replica.h)
  double data_wait_s = 0;     // the host waiting for the loaders' next batches (Loader::next)
  double data_wait_held_s = 0;  // of it, while the device still held a batch's slot (the host
                                //   ahead of the device, Batch::wait_held_s): back-pressure
  // The step on the device's clock (data/metrics.h, DeviceTime; GPU: events on each replica's
  // compute stream, the CPU: the host's clock), means over the replicas. idle is the gap since
  // the previous step's end, 0 for the first step and after other work on the lanes (an
  // evaluation, a snapshot: see interrupt_clock).
  DeviceTime device;
  double loader_s = 0;        // the loader alone: the batch's load seconds over its workers
                              //   (Batch::load_s / threads), the slowest replica's
  // Replicas (R > 1), means over the replicas:
  double comm_s = 0;          // all-reduce time of the step's buckets (on GPUs: from the first
                              // bucket ready to the last bucket reduced, idle gaps included)
  double comm_exposed_s = 0;  // the part of it backward did not hide (compute waited for it;
                              // with replicas sharing a GPU, also for the others' backward)
  bool graph = false;         // forward and backward replayed from the CUDA graph (--cuda-graph)
  double sync_s = -1;         // --sync-bn: seconds this process's replicas spent (mean) in
                              //   BatchNorm's synchronisation, waits for the others included, as
                              //   the host sees it (on GPUs only the queuing); < 0: no --sync-bn
};

class Engine {
 public:
  // Builds the replicas (one per --devices entry, or one): each a lane on its device, the model
  // from cfg.seed (identical on every replica), its optimizer and step state, with R > 1 its
  // gradient buckets; and the collective. cfg must be resolved.
  // plan: every launch a GPU step queues is noted there, by phase, while it records
  // (kernels/launch_plan.h), on either device; the lanes then carry the GPU's kernel choices
  // (cfg.conv and cfg.linear as a GPU reads them; the CPU still computes with its reference).
  // `cutrain describe --step` and its tests.
  Engine(const TrainConfig& cfg, const RunDevice& device, const ClassBalance& balance,
         LaunchPlan* plan = nullptr);
  ~Engine();  // waits for what was queued
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Steps 1-5 of step r.step at r.lr, queued: every replica's shard from its loader
  // (replica(i).loader, made by the Trainer), forward, backward, the buckets' all-reduce,
  // after_backward, the optimizer step, the records on their way, every batch released to its
  // loader. Blocks only for the loaders. At most kMaxInFlight steps may be in flight: collect
  // first.
  void launch(const StepResult& r);
  // The launched steps whose records have arrived, appended to `done` in step order, after
  // waiting for the oldest `wait_for` of them (SIZE_MAX: all). Throws when the loss scaler
  // gives up (too many overflows in a row), naming the step; the engine is broken then.
  void collect(size_t wait_for, std::deque<StepResult>& done);
  size_t in_flight() const { return launched_.size(); }
  // A step failed partway (an exception in launch, or the loss scaler gave up): the state is
  // unknown, and launch refuses.
  bool broken() const { return broken_; }
  // A run that is failing under mpirun: the collective between the processes is aborted
  // (NCCL's ncclCommAbort), so that the steps queued behind it, and whatever waits for them
  // (the checkpoint writer's copies), finish instead of waiting for ranks that will not come.
  // The engine is broken after it. Nothing to do in one process.
  void abort_collective();

  int replicas() const { return int(replicas_.size()); }  // in this process
  // Replicas in all: this process's, or under mpirun one per process (RunDevice::mpi).
  int world() const { return world_; }
  int compute_threads() const { return compute_threads_; }  // each replica's (on the CPU)
  Replica& replica(int r) { return *replicas_.at(size_t(r)); }
  const Replica& replica(int r) const { return *replicas_.at(size_t(r)); }
  Model& model(int r = 0) { return *replica(r).model; }
  Optimizer& optimizer(int r = 0) { return *replica(r).optimizer; }
  // --ema: a model of the weights' moving average (replica 0's optimizer keeps it: every
  // replica's is the same), for evaluation: its parameters the averages in the training dtype,
  // its BatchNorm statistics theirs. Made at the first call on replica 0's device, filled at
  // each, after the launched steps (queued there). Throws without --ema.
  Model& averaged_model();
  // Replica r's GPU made the current device for a scope (nn/context.h: CUDA launches kernels
  // on the current device). Nothing on the CPU or with one GPU. Its tensors' copies are
  // ordered on its compute stream anyway (they were made there).
  OnDevice on_replica(int r) const {
    return OnDevice(replica(r).lane->context());
  }
  // --cuda-graph: the nodes (kernels, copies, memsets) of the two captured graphs together; 0
  // before the capture and without graphs.
  size_t graph_nodes() const;
  // On a GPU, one line for the run's header: "CUDA graphs: on (...)" or "off" and why (the
  // option, or replicas: a graph holds one replica's step). "" on the CPU.
  std::string graph_description() const;
  // Replica r's step state after every launched step (on a GPU it waits for them).
  StepState step_state(int r = 0) const;
  const LossScalerConfig& scaler_config() const { return scaler_config_; }

  // Checkpoints (engine_state.cpp). Into c: replica 0's tensors (all replicas hold the same),
  // cloned after the launched steps, and, pending (Checkpoint::pending), the loss scaler's
  // state and the step count after them; BatchNorm statistics averaged first.
  void snapshot(Checkpoint& c);
  // c's tensors into every replica (every one must be there with the right shape and dtype,
  // and nothing else), the loss scaler's state and the step count into every step state.
  void restore(const Checkpoint& c);

  // Replicas as a group (engine_replicas.cpp). One line: the replicas, the shards and the
  // buckets ("" with one replica).
  std::string description() const;
  // GPU replicas: the peer-access matrix with measured bandwidths; "" otherwise.
  std::string peer_report() const;
  // "" when all replicas' weights and optimizer state are equal bit for bit, else the first
  // difference (--check-replicas).
  std::string replicas_difference();

  Tracer* tracer = nullptr;                          // the step's spans; null: none
  std::function<void()> after_backward;              // tests: between backward and the update
  std::function<void(int replica, const Batch&)> on_shard;  // tests: each shard as it arrives
  std::function<void(int rank)> on_forward_backward;  // tests: on the thread of a replica's
                                                      //   forward and backward, before them
  std::function<void(const std::string&)> notice;    // one-line messages (--cuda-graph)

  // Work other than steps ran on the lanes since the last launched step (an evaluation, a
  // snapshot): the next step's device clock starts afresh, its idle time not counted.
  void interrupt_clock() { clock_slot_ = -1; }
  // --sync-bn: a replica's thread failed in this step, and the others stop waiting (tests).
  bool sync_failed() {
    const std::lock_guard<std::mutex> lock(comm_mu_);
    return sync_failed_;
  }

  // A record slot each, and one to spare: the slot of the step before the oldest in flight
  // still holds the step_end mark that the oldest one's idle time is read from.
  static constexpr int kMaxInFlight = Lane::kRecordSlots - 1;

 private:
  struct Graphs;  // --cuda-graph's graphs and buffers (train/engine/engine_graph.h)
  struct Shard;   // one replica's part of a step's result (engine_results.cpp)
  struct Launched {
    StepResult result;     // the host part; the rest comes from the records
    int slot = 0;
    int prev_slot = -1;    // the step just before on the lanes (its end starts this one's idle
                           //   time); -1: none, or other work in between
    bool stepped = false;  // the optimizer ran (false for a batch whose files were all bad)
  };

  OnDevice on_device() const { return on_replica(0); }
  void launch_step(const StepResult& r);
  // Step 1 on every replica: its shard of the next global batch from its loader (on a GPU, on
  // the device, its compute stream waiting for the copy), in rank order; into r the images,
  // the batch's place and the time waited for the loader.
  void next_shards(StepResult& r);
  // StepResult of a launched step from its lanes' records; throws when the loss scaler gives
  // up (naming weights that are themselves inf/NaN when they are the cause).
  StepResult result_of(const Launched& l);
  // Waits until the records of step `l` are on the host. A GPU's queue behind a collective
  // between processes (NCCL) is watched while the host waits: the collective's own error, or
  // the collective timeout, aborts it and throws a UserError naming the step.
  void await_records(const Launched& l);
  // The model's input and labels for images [begin, begin + n) of a replica's batch, in the
  // model's dtype, on the model's device.
  std::pair<Tensor, Tensor> micro_batch(const Replica& rep, int begin, int n) const;
  // Step 2 on one replica: forward and backward over its shard in micro-batches, the loss and
  // top-1 count into `rec`; with replicas, each bucket marked as backward completes it.
  // `images`: the global batch's.
  void forward_backward(Replica& rep, int images, StepRecord* rec);
  // Replicas: rep's backward has completed bucket k. Marks it; once every replica has,
  // averages it (and the buckets after it that are complete too).
  void bucket_ready(Replica& rep, int k);
  // The Collective's tags besides the buckets (0 .. buckets - 1): the overflow flags, and the
  // BatchNorm statistics' step sums.
  int flags_tag() const { return int(marked_.size()); }
  int stats_tag() const { return int(marked_.size()) + 1; }
  int sync_tag() const { return int(marked_.size()) + 2; }  // --sync-bn's sums
  // --sync-bn (engine_sync.cpp). The step's plan, from every replica's shard size (under
  // mpirun gathered from every process): sync_images_, the images of each micro-batch over
  // every replica, or empty when the shards (thinned by bad files) do not split into the same
  // number of micro-batches (then each replica's BatchNorm uses its own batch this step, and
  // `notice` says so).
  void plan_sync(int64_t step);
  // At start: every replica's BatchNorm layers linked to sync_sum; with replicas in this
  // process, a thread for each.
  void start_sync_bn();
  // rep's BatchNorm layer has its n per-channel sums in data (on its device, queued): they
  // become the sums over every replica. With replicas in this process, each brings its own
  // from its thread and the last to arrive runs the all-reduce; every queue then waits for it.
  void sync_sum(Replica& rep, void* data, int n, DType dtype);
  // The step's one update of every replica's BatchNorm running statistics, from the batch
  // statistics its micro-batches summed (BatchNormState::step_sums), averaged over the
  // replicas first: every replica makes the same update, so their statistics stay equal bit
  // for bit. Queues only. A step of one micro-batch and one replica has no sums: its forward
  // updated them.
  void update_batchnorm();
  // Steps 3-4 on every replica: the checks, with replicas the OR of the overflow flags, the
  // decision, the update with the gradients zeroed, the scale's change (none of it when
  // stepped = false: a batch whose files were all bad; then the gradients are zeroed alone);
  // then the state into each replica's record `recs[r]`. Queues only: a CUDA graph can
  // capture it (--cuda-graph, one replica).
  void update(bool stepped, const std::vector<StepRecord*>& recs);
  // --cuda-graph (engine_graph.cpp): can this step come from the graphs? Captures them at the
  // first full batch after the warm-up; false on the CPU, before, for a short batch, and when
  // CUDA refused the capture (said once through `notice`).
  bool graph_ready(Replica& rep, int images, int64_t step);
  // Step 2 from its graph: the batch into the graph's input buffers, the replay; the record
  // the graphs write.
  StepRecord* replay_forward_backward(Replica& rep);

  TrainConfig cfg_;                            // batch, accum, size, label smoothing, ...
  RunDevice device_;
  int compute_threads_;                        // per replica (run_compute_threads)
  // The compute threads of the thread that made the engine, while it lives: an engine is used
  // on that thread (one at a time: a second engine there would set its own count, and the
  // first's destruction put back the count from before it).
  ComputeThreadsScope compute_scope_;
  LaunchPlan* plan_ = nullptr;                 // what a GPU step launches (null: not noted)
  int world_ = 1;                              // replicas in all processes
  LossScalerConfig scaler_config_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::unique_ptr<Collective> collective_;     // R > 1
  std::mutex comm_mu_;                         // collective_, marked_ and reduced_, which the
                                               //   replicas' threads share (--sync-bn)
  bool collective_traced_ = false;             // collective_->trace(tracer) was called
  std::unique_ptr<Graphs> graphs_;             // --cuda-graph on a GPU
  std::unique_ptr<Model> averaged_;            // --ema: averaged_model(), once asked for
  void phase(const char* name) {               // the phase of the plan's next notes
    if (plan_) plan_->phase(name);
  }
  bool broken_ = false;
  int64_t step_batches_ = 0;                   // this step's micro-batches, in all replicas
  std::vector<int> marked_;                    // R > 1, this step: per bucket, replicas marked
  size_t reduced_ = 0;                         // buckets averaged this step (a prefix)
  int slot_ = 0;                               // the record slot of the step being queued
  int64_t step_now_ = 0;                       // the step being queued (0-based), for messages
  int clock_slot_ = -1;                        // the last launched step's slot, while nothing
                                               //   else ran on the lanes since (interrupt_clock)
  std::deque<Launched> launched_;              // queued, records not yet read, in step order
  // --sync-bn with world_ > 1 (engine_sync.cpp):
  bool sync_bn_ = false;
  std::vector<int64_t> sync_images_;           // this step, per micro-batch (see plan_sync)
  std::unique_ptr<ReplicaThreads> threads_;    // replicas in this process: their forward and
                                               //   backward side by side, a thread each
  std::condition_variable sync_cv_;            // with comm_mu_: the replicas meeting in sync_sum
  std::vector<void*> sync_data_;               // the arrived replicas' sums
  std::vector<bool> sync_here_;                // which replicas arrived in this round
  int sync_arrived_ = 0;
  int sync_n_ = 0;                             // this round's size and type (every replica's)
  DType sync_dtype_ = DType::f32;
  int64_t sync_round_ = 0;
  bool sync_failed_ = false;                   // a replica's thread failed: nobody waits
};

// The scaler of a run: dynamic from 2^16 for fp16, the run stopping after max_skips skipped
// steps in a row (--max-skips); fixed at 1 for fp32, the run stopping at the first inf/NaN
// gradient (there is no scale to lower, so no later step can do better).
LossScalerConfig loss_scaler_config(DType dtype, int max_skips);

// Which weights eval, predict and export load from a checkpoint (--weights): the moving
// average's (--ema) when the checkpoint has it, else the weights (auto); the average's, or an
// error naming the checkpoint without one (ema); the weights, even beside an average (raw).
enum class WeightChoice { automatic, ema, raw };
// "auto", "ema", "raw"; throws a UserError naming the choices for anything else.
WeightChoice parse_weight_choice(const std::string& text);
// Whether a checkpoint holds the weights' moving average (its "<param>.ema" tensors).
bool has_average(const Checkpoint& c);

// A model as a checkpoint saved it, for evaluation and prediction: built from the checkpoint's
// configuration in `dtype`, weights (or, by `weights`, their average) and BatchNorm statistics
// (or theirs) loaded. For a dtype other than the training one, the fp32 master weights are
// used when the checkpoint has them (an average is fp32 already), else the weights are
// converted. The model lives in context `in` (on a GPU: made on its stream).
std::unique_ptr<Model> load_model(const Checkpoint& c, const TrainConfig& cfg, DType dtype,
                                  const Context& in = Context::cpu(),
                                  WeightChoice weights = WeightChoice::automatic);
// What load_model took: "the weights' moving average" or "the weights".
const char* weights_loaded(const Checkpoint& c, WeightChoice weights);

}  // namespace cutrain
