// Engine: the training step on every device and any number of replicas (train/engine/engine.h):
// building the replicas and queuing a step. Reading the steps' results back is in
// engine_results.cpp, checkpoints' tensors in engine_state.cpp, the replicas as a group in
// engine_replicas.cpp, --cuda-graph in engine_graph.cpp.
#include "train/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <utility>

#include "kernels/check.h"
#include "train/engine/engine_graph.h"
#include "train/replicas/mpi.h"
#include "train/replicas/mpi_gpu.h"

namespace cutrain {

// Buckets smaller than this take the next layer in too (train/replicas/grad_buckets.h). A collective
// costs a few thread hand-offs (tens of microseconds on a CPU, ~10 us of launches and events
// on a GPU), so a bucket should carry at least a few hundred KiB for the copies to dominate.
constexpr size_t kBucketMinBytes = size_t(256) << 10;

LossScalerConfig loss_scaler_config(DType dtype, int max_skips) {
  LossScalerConfig c;  // 2^16, x2 after 2000 clean steps, x0.5 on overflow, [1, 2^24]
  c.max_consecutive_skips = max_skips;
  if (dtype != DType::f16) {
    c.dynamic = false;  // fp32 gradients do not underflow: no scaling
    c.init = 1;
    // ... and an inf/NaN gradient is no scale too large, so no later step can do better:
    // the run stops at the first (--max-skips is fp16's).
    c.max_consecutive_skips = 1;
  }
  return c;
}

Engine::Engine(const TrainConfig& cfg, const RunDevice& device, const ClassBalance& balance)
    : cfg_(cfg),
      device_(device),
      compute_threads_(run_compute_threads(cfg_, device_)),
      compute_scope_(compute_threads_) {
  const int R = replica_count(cfg_);  // in this process
  // Under mpirun each process is one replica of size() (train/replicas/mpi.h), rank rank(); on
  // a GPU, that of its local rank (choose_run_device in train/run/run.cpp).
  const Mpi* mpi = device_.mpi;
  if (mpi) {
    USER_CHECK(R == 1, "--devices " << cfg_.devices << " under mpirun: each process is one "
                                    << "replica; launch more processes instead (mpirun -np N)");
    USER_CHECK(cfg_.batch % (int64_t(mpi->size()) * cfg_.accum) == 0,
               "--batch " << cfg_.batch << " is not divisible by the " << mpi->size()
                          << " processes of mpirun"
                          << (cfg_.accum > 1 ? " times --accum " + std::to_string(cfg_.accum) : "")
                          << ": the global batch is split evenly over the replicas");
  }
  world_ = mpi ? mpi->size() : R;
  const int first_rank = mpi ? mpi->rank() : 0;
  // Each replica's lane: on a GPU its compute stream and device (the model, the optimizer
  // state, the buckets and every kernel of the replica go there).
  std::vector<int> devices;
  if (device_.device == Device::cuda) {
    devices = gpu_ordinals(cfg_.devices);
    if (devices.empty()) devices.assign(size_t(R), device_.gpu);
    for (int d : devices)
      USER_CHECK(d < gpu_count(), (cfg_.devices.empty() ? "--device cuda" : "--devices " + cfg_.devices)
                                 << ": GPU " << d << " does not exist (" << gpu_count()
                                 << " usable)");
  }
  scaler_config_ = loss_scaler_config(device_.dtype, cfg_.max_skips);
  validate_loss_scaler_config(scaler_config_);

  ModelOptions mo;
  mo.H = mo.W = cfg_.size;
  mo.C = cfg_.channels;
  mo.classes = cfg_.classes;
  mo.dtype = device_.dtype;
  mo.seed = cfg_.seed;
  const ModelSpec spec = parse_model_spec(cfg_.model_text, cfg_.model);
  // Every replica builds the same model from the same seed: identical bits, no broadcast.
  for (int r = 0; r < R; r++) {
    auto rep = std::make_unique<Replica>();
    rep->rank = first_rank + r;
    const bool gpu = device_.device == Device::cuda;
    rep->lane = std::make_unique<Lane>(device_.device, devices.empty() ? -1 : devices[size_t(r)],
                                       parse_conv_impl(cfg_.conv, gpu),
                                       parse_linear_impl(cfg_.linear, gpu));
    const Context& ctx = rep->lane->context();
    const OnDevice on(ctx);
    mo.context = ctx;  // the model's tensors on the replica's device and stream
    rep->model = build_model(spec, mo);
    rep->optimizer = make_optimizer(cfg_.optimizer, rep->model->parameters(), cfg_.lr,
                                    cfg_.momentum, cfg_.wd);
    rep->lane->make_step(scaler_config_, int(rep->model->parameters().size()));
    rep->norm = InputNorm(Normalization{cfg_.mean, cfg_.std}, ctx);
    if (!balance.weights.empty())  // --balance loss: on the replica's device, once
      rep->class_weight = Tensor::from_doubles(balance.weights, {cfg_.classes},
                                               acc_dtype(device_.dtype))
                              .to(ctx);
    if (world_ > 1)
      rep->grads = std::make_unique<GradBuckets>(rep->model->parameters(), kBucketMinBytes);
    // More than one micro-batch a step: the forwards sum their batch statistics, and the
    // step's end makes the one update (update_batchnorm). Every layer's sums in one buffer.
    const auto& bns = rep->model->batchnorm_states();
    if ((world_ > 1 || cfg_.accum > 1) && !bns.empty()) {
      int64_t total = 0;
      for (const auto& [name, st] : bns) total += 2 * st->running_mean.numel();
      rep->bn_sums = Tensor::zeros({int(total)}, bns[0].second->running_mean.dtype(), ctx);
      int64_t offset = 0;
      for (const auto& [name, st] : bns) {
        const int n = 2 * int(st->running_mean.numel());
        st->step_sums = rep->bn_sums.flat_view(offset, {n});
        offset += n;
      }
    }
    replicas_.push_back(std::move(rep));
  }
  if (world_ > 1) {
    if (mpi && device_.device == Device::cuda) {  // NCCL, or the host-staged MPI ring
      const OnDevice on(replicas_[0]->lane->context());
      collective_ = make_mpi_gpu_collective(*mpi, devices[0], replicas_[0]->lane->stream());
    } else if (mpi) {
      collective_ = make_mpi_ring(*mpi);
    } else if (device_.device == Device::cuda) {
      std::vector<cudaStream_t> streams;
      for (auto& rep : replicas_) streams.push_back(rep->lane->stream());
      collective_ = make_gpu_ring(devices, streams);
    } else {
      collective_ = make_cpu_ring(R);
    }
    marked_.assign(replicas_[0]->grads->size(), 0);
    // --sync-bn's sums go through the gradients' collective. In backward they queue behind
    // the buckets' all-reduces already started, so a layer may wait for those too; a second
    // collective of their own (own comm streams) measured slower on one GPU, 2.01x the step
    // against 1.37x (bench/results/sync-bn-2026-11-26.md), for reasons not yet profiled.
    if (cfg_.sync_bn && !replicas_[0]->model->batchnorm_states().empty()) start_sync_bn();
  }
  if (cfg_.cuda_graph && device_.device == Device::cuda && world_ == 1)
    graphs_ = std::make_unique<Graphs>();
}

Engine::~Engine() {
  // The graphs first (their private pools back to the allocator), then the collective (its
  // comm streams read the gradient buffers), then each replica's lane waits for its queue
  // before the loaders and tensors go away.
  graphs_.reset();
  try {
    // Unwinding a failure: collectives queued on other processes' behalf may never complete.
    if (collective_ && std::uncaught_exceptions() > 0) collective_->abort();
    for (auto& rep : replicas_) rep->lane->synchronize();
    collective_.reset();
  } catch (...) {  // never throw from here (an earlier CUDA error may be unwinding the stack)
  }
}

void Engine::launch(const StepResult& host) {
  CHECK(!broken_, "Trainer: an earlier step failed partway (a replica, or a GPU step), so "
                  "the model's state is unknown; restart from the last checkpoint");
  CHECK(launched_.size() < size_t(kSlots), "Engine::launch: " << launched_.size()
                                               << " steps in flight: collect first");
  const OnDevice on = on_device();
  try {
    launch_step(host);
  } catch (...) {  // gradients half accumulated, a batch not released: no way back
    broken_ = true;
    throw;
  }
}

void Engine::launch_step(const StepResult& host) {
  StepResult r = host;
  TraceSpan span(tracer, "step", "train");
  const int R = world_;  // replicas in all processes
  slot_ = int(r.step % kSlots);

  // 1. Every replica's shard of the batch (on a GPU the compute stream waits for its copy).
  next_shards(r);
  const int images = r.images;

  // 2. Forward and backward, replica after replica; the loss and the top-1 count add up in
  // each replica's record. With replicas, each bucket is averaged once every replica's
  // backward has completed it (bucket_ready), and then every replica waits for the
  // collective.
  if (R > 1) {
    std::fill(marked_.begin(), marked_.end(), 0);
    reduced_ = 0;
    if (tracer && !collective_traced_) {  // the comm streams' rows (GPU replicas)
      collective_->trace(tracer);
      collective_traced_ = true;
    }
  }
  std::vector<StepRecord*> recs;
  for (auto& rep : replicas_) {  // (with threads_: their records here, their steps below)
    Lane& lane = *rep->lane;
    const OnDevice on(lane.context());
    if (tracer && lane.where() == Device::cuda && !lane.timeline) {
      std::string row = "compute stream (";
      if (R > 1) row += "replica " + std::to_string(rep->rank) + ", ";
      row += "cuda:" + std::to_string(lane.device()) + ")";
      lane.timeline = std::make_unique<GpuTimeline>(tracer, row, lane.stream());
    }
    r.graph = graph_ready(*rep, images, r.step);  // --cuda-graph
    if (lane.timeline)
      lane.timeline->begin(r.graph ? "forward + backward (CUDA graph)" : "forward + backward",
                           {"step", r.step});
    if (r.graph) {
      recs.push_back(replay_forward_backward(*rep));
    } else {
      StepRecord* rec = lane.record(slot_);
      lane.clear(rec);
      if (!threads_) forward_backward(*rep, images, rec);
      recs.push_back(rec);
      if (graphs_ && images == cfg_.batch) graphs_->eager_full++;
    }
  }
  if (threads_)  // --sync-bn: side by side, each replica's BatchNorm layers meeting the others'
    threads_->run([&](int i) {
      Replica& rep = *replicas_[size_t(i)];
      const OnDevice on(rep.lane->context());
      if (tracer && i > 0 && !rep.thread_named) {  // (replica 0 runs on the caller's thread)
        tracer->name_thread("replica " + std::to_string(rep.rank) + " (--sync-bn)");
        rep.thread_named = true;
      }
      forward_backward(rep, images, recs[size_t(i)]);
    });
  if (sync_bn_) {  // the replicas' mean
    r.sync_s = 0;
    for (auto& rep : replicas_) r.sync_s += std::exchange(rep->sync_s, 0.0) / replicas();
  }
  if (R > 1) {
    CHECK(reduced_ == marked_.size(), "step " << r.step << ": " << reduced_ << " of "
                                              << marked_.size()
                                              << " buckets were averaged: a bug in cutrain");
    TraceSpan s(tracer, "all-reduce wait", "train");
    for (auto& rep : replicas_) {
      Lane& lane = *rep->lane;
      const OnDevice on(lane.context());
      lane.mark(Lane::backward_done, slot_);
      if (lane.timeline) lane.timeline->begin("all-reduce wait", {"step", r.step});
      collective_->wait(rep->rank);
      lane.mark(Lane::reduced, slot_);
    }
  }
  if (after_backward) after_backward();

  // 3-4. The step's learning rate into every replica's step state: the one value the host
  // sends, outside any graph. Then check, decide, update, move the scale, the state into the
  // record, the gradients zeroed (with --cuda-graph, one graph launch).
  const bool stepped = images > 0;
  {
    TraceSpan s(tracer, "optimizer", "train");
    for (auto& rep : replicas_) {
      const OnDevice on(rep->lane->context());
      if (rep->lane->timeline) rep->lane->timeline->begin("optimizer", {"step", r.step});
      if (stepped) rep->lane->step().set_lr(r.lr);
    }
    if (r.graph)
      graphs_->update->launch(replicas_[0]->lane->stream());
    else
      update(stepped, recs);
  }

  // The records on their way to the host; 5. the loader's slots refilled once each lane is
  // past what reads them.
  for (size_t i = 0; i < replicas_.size(); i++) {
    Replica& rep = *replicas_[i];
    Lane& lane = *rep.lane;
    const OnDevice on(lane.context());
    StepRecord* rec = lane.record(slot_);
    if (recs[i] != rec) lane.copy(rec, recs[i], sizeof(StepRecord));  // the graphs' own
    if (lane.timeline) lane.timeline->end();
    lane.publish(slot_);
    rep.loader->release(rep.batch, lane.stream());
  }
  launched_.push_back(Launched{r, slot_, stepped});
}

void Engine::next_shards(StepResult& r) {
  const auto wait_start = std::chrono::steady_clock::now();
  r.images = 0;
  step_batches_ = 0;
  const int micro = cfg_.batch / world_ / cfg_.accum;  // forward_backward's
  for (auto& rep : replicas_) {
    const OnDevice on(rep->lane->context());  // a GPU's compute stream waits for the copy
    rep->batch = rep->loader->next(rep->lane->stream());
    r.images += rep->batch.n;
    step_batches_ += (rep->batch.n + micro - 1) / micro;
    if (on_shard) on_shard(rep->rank, rep->batch);
  }
  // Under mpirun the other processes' shards count too: the step's global batch.
  if (device_.mpi) {
    r.images = int(device_.mpi->sum(r.images));
    step_batches_ = device_.mpi->sum(step_batches_);
  }
  r.data_wait_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
  if (sync_bn_) plan_sync(r.step);
  r.batch = replicas_[0]->batch.where;
}

// The one conversion of train, eval and predict (train/engine/batch_input.h): the crop, flip and
// normalisation of the uncut images the loader delivered (on a GPU, copied there), in one kernel.
std::pair<Tensor, Tensor> Engine::micro_batch(const Replica& rep, int begin, int n) const {
  ModelInput in = model_input(rep.batch, begin, n, rep.norm, device_.dtype, rep.lane->context());
  return {std::move(in.x), std::move(in.labels)};
}

void Engine::forward_backward(Replica& rep, int images, StepRecord* rec) {
  if (on_forward_backward) on_forward_backward(rep.rank);
  const int R = world_;
  const Batch& batch = rep.batch;
  if (rep.grads) rep.grads->arm();
  rep.any_ready = false;
  const int micro = cfg_.batch / R / cfg_.accum;
  for (int begin = 0; begin < batch.n; begin += micro) {
    const int n = std::min(micro, batch.n - begin);
    if (sync_bn_)  // this micro-batch's images over every replica (0: not synchronised)
      rep.bn_sync.images = sync_images_.empty() ? 0 : sync_images_.at(size_t(begin / micro));
    // This micro-batch's share of the global batch's mean loss, times R: the all-reduce
    // averages over the R replicas (sum, then 1/R). With R = 1: n / batch.n.
    const double share = double(n) * R / double(images);
    Tape tape(rep.lane->context());  // forward and backward in the replica's context
    // Only the last micro-batch completes the gradients: only its backward marks buckets.
    if (rep.grads && begin + micro >= batch.n)
      tape.grad_ready = [this, &rep](const Var& v) {
        if (const int k = rep.grads->ready(v); k >= 0) bucket_ready(rep, k);
      };
    VarPtr x;
    Tensor labels;
    {
      TraceSpan s(tracer, "input", "train");
      auto [images_t, labels_t] = micro_batch(rep, begin, n);
      x = make_var(images_t);  // (n,S,S,C)
      labels = labels_t;       // (n)
    }
    VarPtr logits, loss;
    {
      TraceSpan s(tracer, "forward", "train");
      logits = rep.model->forward(tape, x, true);                               // (n,classes)
      // (1) fp32; with --balance loss each row weighted by its class (train/run/balance.h)
      loss = softmax_cross_entropy(tape, logits, labels, cfg_.label_smoothing, rep.class_weight);
    }
    {
      TraceSpan s(tracer, "backward", "train");
      // The seed is the device's loss scale x share: no host round trip on a GPU.
      tape.backward(loss, rep.lane->step().seed(share, loss->value.dtype()));
    }
    rep.lane->add_metrics(rec, loss->value, double(n) / double(images), logits->value, labels);
  }
  if (rep.grads)
    for (int k : rep.grads->finish()) bucket_ready(rep, k);  // buckets backward never reached
}

void Engine::bucket_ready(Replica& rep, int k) {
  const std::lock_guard<std::mutex> lock(comm_mu_);  // (replicas' threads: --sync-bn)
  if (!rep.any_ready) {  // its first this step: where the replica's communication could start
    rep.lane->mark(Lane::first_ready, slot_);
    rep.any_ready = true;
  }
  collective_->mark(rep.rank, k);
  marked_[size_t(k)]++;
  // Buckets are averaged in order (the same collectives in the same order on every replica):
  // every complete bucket from the first not yet averaged.
  const int R = replicas();
  while (reduced_ < marked_.size() && marked_[reduced_] == R) {
    const size_t b = reduced_++;
    std::vector<void*> data;
    for (auto& r : replicas_) data.push_back((*r->grads)[b].data);
    const GradBucket& bucket = (*rep.grads)[b];
    collective_->all_reduce(int(b), data, bucket.numel, bucket.dtype, true);
  }
}

void Engine::update_batchnorm() {
  if (!replicas_[0]->bn_sums.defined())
    return;  // no BatchNorm, or one micro-batch of one replica: the forward made the update
  if (world_ > 1) {  // the sums averaged over the replicas (queued: no host wait on a GPU)
    std::vector<void*> data;
    for (auto& rep : replicas_) {
      const OnDevice on(rep->lane->context());
      collective_->mark(rep->rank, stats_tag());
      data.push_back(rep->bn_sums.raw());
    }
    const Tensor& t0 = replicas_[0]->bn_sums;
    collective_->all_reduce(stats_tag(), data, t0.numel(), t0.dtype(), true);
    for (auto& rep : replicas_) {
      const OnDevice on(rep->lane->context());
      collective_->wait(rep->rank);
    }
  }
  // The sums, averaged over the world_ replicas, hold world_ / K of the K micro-batches' total.
  const double scale = step_batches_ > 0 ? double(world_) / double(step_batches_) : 0.0;
  for (auto& rep : replicas_) {
    const OnDevice on(rep->lane->context());
    if (step_batches_ > 0)
      for (const auto& [name, st] : rep->model->batchnorm_states())
        batchnorm_step_update(rep->lane->context(), *st, scale);
    rep->bn_sums.zero_();
  }
}

void Engine::update(bool stepped, const std::vector<StepRecord*>& recs) {
  const int R = world_;
  update_batchnorm();
  if (stepped) {
    // Every replica checks its own gradients; with replicas, keeps that decision in its
    // record (to name the replica at fault) and marks its flags final.
    for (size_t i = 0; i < replicas_.size(); i++) {
      Replica* rep = replicas_[i].get();
      const OnDevice on(rep->lane->context());
      DeviceStep& ds = rep->lane->step();
      ds.begin();
      rep->optimizer->check(ds);
      if (R > 1) {
        ds.decide_into(&recs[i]->own);
        collective_->mark(rep->rank, flags_tag());
      }
    }
    if (R > 1) {  // flag i on every replica = flag i on any: every replica decides alike
      std::vector<int32_t*> flags;
      for (auto& rep : replicas_) flags.push_back(rep->lane->step().flags());
      collective_->any(flags_tag(), flags, int64_t(model().parameters().size()));
    }
    for (auto& rep : replicas_) {
      const OnDevice on(rep->lane->context());
      DeviceStep& ds = rep->lane->step();
      if (R > 1) collective_->wait(rep->rank);
      ds.decide();
      rep->optimizer->apply(ds);
      ds.finish();
    }
  }
  // The state after the step into the record; the gradients zeroed for the next step.
  for (size_t i = 0; i < replicas_.size(); i++) {
    Replica* rep = replicas_[i].get();
    const OnDevice on(rep->lane->context());
    rep->lane->copy(&recs[i]->state, rep->lane->step().state(), sizeof(StepState));
    if (rep->grads)
      rep->grads->zero();  // one memset per flat buffer
    else
      rep->optimizer->zero_grad();
  }
}

}  // namespace cutrain
