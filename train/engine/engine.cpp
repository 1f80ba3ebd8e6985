// Engine: queuing a training step on every device and any number of replicas
// (train/engine/engine.h): the shards from the loaders, forward and backward, the buckets'
// all-reduce, the update. Engine's other files, each one concern: engine_replicas.cpp builds
// the replicas and describes them, engine_results.cpp reads the steps' results back,
// engine_state.cpp puts the run's state into a checkpoint and back, engine_sync.cpp is
// --sync-bn, engine_graph.cpp --cuda-graph.
#include "train/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>

#include "kernels/check.h"
#include "train/engine/engine_graph.h"
#include "train/replicas/mpi.h"

namespace cutrain {

void Engine::launch(const StepResult& host) {
  CHECK(!broken_, "Trainer: an earlier step failed partway (a replica, or a GPU step), so "
                  "the model's state is unknown; restart from the last checkpoint");
  CHECK(launched_.size() < size_t(kMaxInFlight), "Engine::launch: " << launched_.size()
                                               << " steps in flight: collect first");
  const OnDevice on = on_device();
  try {
    launch_step(host);
  } catch (...) {  // gradients half accumulated, a batch not released: no way back
    broken_ = true;
    throw;
  }
}

// The step, top to bottom (docs/journey.md, stop 10; the comments below name its other stops).
void Engine::launch_step(const StepResult& host) {
  StepResult r = host;
  TraceSpan span(tracer, "step", "train");
  const int R = world_;  // replicas in all processes
  slot_ = int(r.step % Lane::kRecordSlots);
  step_now_ = r.step;  // for the collective timeout's message
  if (device_.mpi) device_.mpi->at_step(r.step);
  if (collective_) collective_->at_step(r.step);

  // 1. Every replica's shard of the batch (on a GPU the compute stream waits for its copy).
  // Journey stop 11.
  phase("input");
  next_shards(r);
  const int images = r.images;
  const auto launch_start = std::chrono::steady_clock::now();  // the host queuing the step

  // 2. Forward and backward, replica after replica; the loss and the top-1 count add up in
  // each replica's record. With replicas, each bucket is averaged once every replica's
  // backward has completed it (bucket_ready), and then every replica waits for the
  // collective. Journey stops 12 (the graphs) and 13-20 (forward_backward), then stop 21's
  // wait for the all-reduce.
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
      phase("record");
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
  // record, the gradients zeroed (with --cuda-graph, one graph launch). Journey stop 21.
  const bool stepped = images > 0;
  {
    TraceSpan s(tracer, "optimizer", "train");
    phase("optimizer");
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
  // past what reads them. Journey stops 22 and 23.
  phase("record");
  for (size_t i = 0; i < replicas_.size(); i++) {
    Replica& rep = *replicas_[i];
    Lane& lane = *rep.lane;
    const OnDevice on(lane.context());
    StepRecord* rec = lane.record(slot_);
    if (recs[i] != rec) lane.copy(rec, recs[i], sizeof(StepRecord));  // the graphs' own
    if (lane.timeline) lane.timeline->end();
    lane.mark(Lane::step_end, slot_);  // (the record's copy to the host waits for it)
    lane.publish(slot_);
    rep.loader->release(rep.batch, lane.stream());
  }
  // How long the host took to queue the step: on a GPU, a device that keeps pace with the
  // launches waited for the host inside the step (DeviceTime::launch_s). On the CPU the work
  // is done as it is queued: nothing to compare.
  if (device_.device == Device::cuda)
    r.device.launch_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - launch_start).count();
  launched_.push_back(Launched{r, slot_, clock_slot_, stepped});
  clock_slot_ = slot_;
}

void Engine::next_shards(StepResult& r) {
  const auto wait_start = std::chrono::steady_clock::now();
  r.images = 0;
  step_batches_ = 0;
  const int micro = cfg_.batch / world_ / cfg_.accum;  // forward_backward's
  // The device's clock (lane.h's marks): every lane's step begins before any loader is waited
  // for, and its batch counts as ready only once every replica's is (and, under mpirun, every
  // process's count is in): waiting for one replica's loader, or for another rank, is every
  // replica's wait, not one replica's idle time or another's compute.
  for (auto& rep : replicas_) {
    const OnDevice on(rep->lane->context());
    rep->lane->mark(Lane::step_begin, slot_);
  }
  for (auto& rep : replicas_) {
    Lane& lane = *rep->lane;
    const OnDevice on(lane.context());  // a GPU's compute stream waits for the copy
    rep->batch = rep->loader->next(lane.stream());
    if (plan_)  // the loader's copies of the batch to the device, on its copy stream
      for (const LaunchCost& c : batch_copy_costs(rep->batch.n, rep->loader->batch_capacity(),
                                                  rep->loader->sample_bytes()))
        plan_->note(c);
    r.data_wait_held_s += rep->batch.wait_held_s;
    r.loader_s = std::max(r.loader_s, rep->batch.load_s / rep->loader->threads());
    r.images += rep->batch.n;
    step_batches_ += (rep->batch.n + micro - 1) / micro;
    if (on_shard) on_shard(rep->rank, rep->batch);
  }
  // Under mpirun the other processes' shards count too: the step's global batch.
  if (device_.mpi) {
    r.images = int(device_.mpi->sum(r.images));
    step_batches_ = device_.mpi->sum(step_batches_);
  }
  for (auto& rep : replicas_) {
    const OnDevice on(rep->lane->context());
    rep->lane->mark(Lane::batch_ready, slot_);
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
      phase("input");
      auto [images_t, labels_t] = micro_batch(rep, begin, n);
      x = make_var(images_t);  // (n,S,S,C)
      labels = labels_t;       // (n)
    }
    VarPtr logits, loss;
    {
      TraceSpan s(tracer, "forward", "train");
      phase("forward");
      logits = rep.model->forward(tape, x, true);                               // (n,classes)
      phase("loss");
      // (1) fp32; with --balance loss each row weighted by its class (train/setup/balance.h)
      loss = softmax_cross_entropy(tape, logits, labels, cfg_.label_smoothing, rep.class_weight);
    }
    {
      TraceSpan s(tracer, "backward", "train");
      phase("backward");
      // The seed is the device's loss scale x share: no host round trip on a GPU.
      tape.backward(loss, rep.lane->step().seed(share, loss->value.dtype()));
    }
    phase("record");
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
    // Every replica checks its own gradients; alone, it decides in the same launch; with
    // replicas, it keeps its own decision in its record (to name the replica at fault) and
    // marks its flags final.
    for (size_t i = 0; i < replicas_.size(); i++) {
      Replica* rep = replicas_[i].get();
      const OnDevice on(rep->lane->context());
      DeviceStep& ds = rep->lane->step();
      ds.begin();
      if (R == 1) {
        rep->optimizer->check_and_decide(ds);
        continue;
      }
      rep->optimizer->check(ds);
      ds.decide_into(&recs[i]->own);
      collective_->mark(rep->rank, flags_tag());
    }
    if (R > 1) {  // flag i on every replica = flag i on any: every replica decides alike
      std::vector<int32_t*> flags;
      for (auto& rep : replicas_) flags.push_back(rep->lane->step().flags());
      collective_->any(flags_tag(), flags, int64_t(model().parameters().size()));
    }
    for (auto& rep : replicas_) {
      const OnDevice on(rep->lane->context());
      DeviceStep& ds = rep->lane->step();
      if (R > 1) {
        collective_->wait(rep->rank);
        ds.decide();
      }
      rep->optimizer->apply(ds);  // ends in the step's finish
    }
  }
  // The state after the step into the record. The update zeroed the gradients for the next
  // step (Optimizer::apply); without one (no images), they are zeroed here.
  for (size_t i = 0; i < replicas_.size(); i++) {
    Replica* rep = replicas_[i].get();
    const OnDevice on(rep->lane->context());
    phase("record");
    rep->lane->copy(&recs[i]->state, rep->lane->step().state(), sizeof(StepState));
    if (stepped) continue;
    phase("optimizer");
    if (rep->grads)
      rep->grads->zero();  // one memset per flat buffer
    else
      rep->optimizer->zero_grad();
  }
}

}  // namespace cutrain
