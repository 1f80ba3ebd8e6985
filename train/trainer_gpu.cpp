// Trainer on GPUs: launch_gpu queues a step on every replica's compute stream (and, with
// several replicas, the all-reduce of the gradients and of the overflow flags on the ring's
// comm streams); collect_gpu reads the records of the steps that have run. See
// train/trainer_gpu.h for the streams, the records and the ring, and train/trainer.h for the
// step itself (forward_backward is shared with the CPU).
#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/check.h"
#include "kernels/softmax_xent.h"
#include "nn/dispatch.h"
#include "train/trainer_gpu.h"

namespace cutrain {

Trainer::Gpu::Lane::Lane(int dev)
    : device(dev),
      compute(dev),
      readback(dev),
      records(sizeof(StepRecord) * kGpuSlots, dev, compute.get()),
      host(sizeof(StepRecord) * kGpuSlots) {
  for (int s = 0; s < kGpuSlots; s++) {
    computed.emplace_back();
    arrived.emplace_back();
    first_ready.emplace_back(true);
    backward_done.emplace_back(true);
    reduced.emplace_back(true);
  }
}

void Trainer::launch_gpu(StepResult r) {
  Gpu& g = *gpu_;
  const int R = replicas();
  // At most kGpuSlots steps in flight: the new step's record slot is the oldest one's.
  if (g.launched.size() >= size_t(kGpuSlots)) collect_gpu(1);
  TraceSpan span(tracer, "step", "train");
  g.slot = int(step_ % kGpuSlots);
  const size_t slot = size_t(g.slot);

  // 1. Every replica's shard of the batch: decoded by the workers and copied on the loader's
  // copy stream; the replica's compute stream waits for that copy (an event), the host does
  // not.
  next_shards(r);
  const int images = r.images;

  // 2. Forward and backward, replica after replica; the loss and the top-1 count add up in
  // each replica's record. With replicas, the last replica's backward completes each bucket
  // and queues its all-reduce (bucket_ready_gpu), and then every compute stream waits for the
  // ring.
  if (R > 1) {
    std::fill(g.marked.begin(), g.marked.end(), 0);
    g.queued = 0;
    if (tracer && !g.ring_traced) {
      g.ring->trace(tracer);
      g.ring_traced = true;
    }
  }
  for (auto& rep : replicas_) {
    const GpuContextScope on(rep->context);
    Gpu::Lane& lane = g.lane(rep->rank);
    rep->optimizer->lr = r.lr;
    if (tracer && !lane.timeline) {
      std::string row = "compute stream (";
      if (R > 1) row += "replica " + std::to_string(rep->rank) + ", ";
      row += "cuda:" + std::to_string(lane.device) + ")";
      lane.timeline = std::make_unique<GpuTimeline>(tracer, row, rep->context.stream);
    }
    r.graph = graph_ready(*rep, images);  // --cuda-graph
    if (lane.timeline)
      lane.timeline->begin(r.graph ? "forward + backward (CUDA graph)" : "forward + backward",
                           {"step", r.step});
    lane.any_ready = false;
    if (r.graph) {
      replay_forward_backward(*rep);
    } else {
      lane.rec = lane.device_record(g.slot);
      memset_async(lane.rec, 0, sizeof(StepRecord), rep->context.stream);
      forward_backward(*rep, images, 0.0);  // the scale is on the device: backward_gpu
      if (cfg_.cuda_graph && images == cfg_.batch) g.eager_full++;
    }
  }
  if (R > 1) {
    CHECK(g.queued == g.marked.size(), "step " << r.step << ": " << g.queued << " of "
                                                << g.marked.size()
                                                << " buckets were all-reduced: a bug in cutrain");
    for (auto& rep : replicas_) {
      const GpuContextScope on(rep->context);
      Gpu::Lane& lane = g.lane(rep->rank);
      const cudaStream_t stream = rep->context.stream;
      lane.backward_done[slot].record(stream);
      if (lane.timeline) lane.timeline->begin("all-reduce wait", {"step", r.step});
      g.ring->wait(rep->rank, stream);
      lane.reduced[slot].record(stream);
    }
  }
  if (after_backward) after_backward(*this);

  // 3-4. The step's learning rate into every replica's step state: the one value the host
  // sends, as a kernel argument, outside any graph. Then check, decide, update, move the scale,
  // the state into the record, the gradients zeroed: kernels, no host round trip (with
  // --cuda-graph, one graph launch).
  const bool stepped = images > 0;
  {
    TraceSpan s(tracer, "optimizer", "train");
    for (auto& rep : replicas_) {
      const GpuContextScope on(rep->context);
      Gpu::Lane& lane = g.lane(rep->rank);
      if (lane.timeline) lane.timeline->begin("optimizer", {"step", r.step});
      if (stepped) lane.step->set_lr(r.lr);
    }
    if (r.graph) {
      const GpuContextScope on(replicas_[0]->context);
      g.update_graph->launch(replicas_[0]->context.stream);
    } else {
      update_gpu(stepped);
    }
  }

  // The records to the host on the side streams, as soon as the compute streams have written
  // them; 5. the slots are refilled once the compute streams are past what reads them.
  for (auto& rep : replicas_) {
    const GpuContextScope on(rep->context);
    Gpu::Lane& lane = g.lane(rep->rank);
    const cudaStream_t stream = rep->context.stream;
    StepRecord* rec = lane.device_record(g.slot);
    if (lane.rec != rec) copy_async(rec, lane.rec, sizeof(StepRecord), stream);  // the graph's
    if (lane.timeline) lane.timeline->end();
    lane.computed[slot].record(stream);
    lane.computed[slot].wait(lane.readback.get());
    copy_async(lane.host_record(g.slot), rec, sizeof(StepRecord), lane.readback.get());
    lane.arrived[slot].record(lane.readback.get());
    rep->loader->release(rep->batch, stream);
  }
  g.launched.push_back(Gpu::Launched{r, g.slot, stepped});
  step_++;
  cursor_ = replicas_[0]->loader->cursor();
  if (R > 1 && cfg_.check_replicas > 0 && step_ % cfg_.check_replicas == 0) {
    const std::string diff = replicas_difference();  // waits for the step: a debug option
    CHECK(diff.empty(), "--check-replicas: after step " << step_ - 1 << ", " << diff
                                                        << ": the replicas have drifted apart");
  }
}

bool Trainer::graph_ready(Replica& rep, int images) {
  Gpu& g = *gpu_;
  if (!cfg_.cuda_graph || replicas() > 1 || images != cfg_.batch || !g.graph_refused.empty())
    return false;
  if (g.graph) return true;
  if (g.eager_full < Gpu::kGraphWarmup) return false;
  TraceSpan span(tracer, "capture CUDA graphs", "train");
  // [input] the batch as the loader delivers it: uncut images (side P) and their windows
  const size_t P = size_t(rep.batch.side), C = size_t(rep.batch.channels);
  const size_t image_bytes = size_t(images) * P * P * C;
  const cudaStream_t stream = rep.context.stream;
  Gpu::Lane& lane = g.lane(rep.rank);
  g.graph_images = DeviceBuffer(image_bytes, lane.device, stream);
  g.graph_crops = DeviceBuffer(size_t(images) * sizeof(InputCrop), lane.device, stream);
  g.graph_labels = DeviceBuffer(size_t(images) * sizeof(int32_t), lane.device, stream);
  g.graph_record = DeviceBuffer(sizeof(StepRecord), lane.device, stream);
  // The graphs read their own input buffers and write their own record (the top of
  // trainer_gpu.h); capture runs nothing, so what the buffers hold does not matter yet.
  const Batch batch = rep.batch;
  rep.batch.d_images = g.graph_images.data();
  rep.batch.d_crops = static_cast<const InputCrop*>(g.graph_crops.data());  // [input]
  rep.batch.d_labels = static_cast<const int32_t*>(g.graph_labels.data());
  lane.rec = static_cast<StepRecord*>(g.graph_record.data());
  auto graph = std::make_unique<CudaGraph>(), update = std::make_unique<CudaGraph>();
  std::string why = graph->capture(stream, [&] {
    memset_async(lane.rec, 0, sizeof(StepRecord), stream);
    forward_backward(rep, images, 0.0);
  });
  if (why.empty()) why = update->capture(stream, [&] { update_gpu(true); });
  rep.batch = batch;
  if (!why.empty()) {
    g.graph_refused = why;
    if (notice)
      notice("cutrain: --cuda-graph: CUDA refused to capture the step (" + why +
             "); training goes on without the graphs");
    return false;
  }
  g.graph = std::move(graph);
  g.update_graph = std::move(update);
  if (notice)
    notice("cutrain: --cuda-graph: the step captured at step " + std::to_string(step_) +
           " as two CUDA graphs (forward and backward: " + std::to_string(g.graph->nodes()) +
           " nodes; the update: " + std::to_string(g.update_graph->nodes()) +
           " nodes), replayed for every full batch from now on");
  return true;
}

void Trainer::replay_forward_backward(Replica& rep) {
  Gpu& g = *gpu_;
  const cudaStream_t stream = rep.context.stream;  // it waits for the loader's copy (next())
  copy_async(g.graph_images.data(), rep.batch.d_images, g.graph_images.bytes(), stream);
  // [input] the windows, checked on the host by the loader (the graph's kernel cannot)
  copy_async(g.graph_crops.data(), rep.batch.d_crops, g.graph_crops.bytes(), stream);
  copy_async(g.graph_labels.data(), rep.batch.d_labels, g.graph_labels.bytes(), stream);
  g.lane(rep.rank).rec = static_cast<StepRecord*>(g.graph_record.data());
  g.graph->launch(stream);
}

void Trainer::update_gpu(bool stepped) {
  Gpu& g = *gpu_;
  const int R = replicas();
  if (stepped) {
    // Every replica checks its own gradients; with replicas, keeps that decision in its
    // record (to name the replica at fault) and marks its flags final.
    for (auto& rep : replicas_) {
      const GpuContextScope on(rep->context);
      Gpu::Lane& lane = g.lane(rep->rank);
      DeviceStep& ds = *lane.step;
      ds.begin();
      rep->optimizer->check_device(ds);
      if (R > 1) {
        ds.decide_into(&lane.rec->own);
        lane.checked.record(rep->context.stream);
      }
    }
    if (R > 1) {  // flag i on every replica = flag i on any: every replica decides alike
      std::vector<int32_t*> flags;
      std::vector<cudaEvent_t> ready;
      for (int r = 0; r < R; r++) {
        flags.push_back(g.lane(r).step->flags());
        ready.push_back(g.lane(r).checked.get());
      }
      g.ring->any(flags, g.lane(0).step->params(), ready);
    }
    for (auto& rep : replicas_) {
      const GpuContextScope on(rep->context);
      DeviceStep& ds = *g.lane(rep->rank).step;
      if (R > 1) g.ring->wait(rep->rank, rep->context.stream);
      ds.decide();
      rep->optimizer->apply_device(ds);
      ds.finish();
    }
  }
  // The state after the step into the record; the gradients zeroed for the next step.
  for (auto& rep : replicas_) {
    const GpuContextScope on(rep->context);
    Gpu::Lane& lane = g.lane(rep->rank);
    copy_async(&lane.rec->state, lane.step->state(), sizeof(StepState), rep->context.stream);
    if (rep->grads)
      rep->grads->zero();  // one memset per flat buffer
    else
      rep->optimizer->zero_grad();
  }
}

void Trainer::bucket_ready_gpu(Replica& rep, int k) {
  CHECK(gpu_ && gpu_->ring, "bucket_ready_gpu: not a trainer of GPU replicas");
  Gpu& g = *gpu_;
  Gpu::Lane& lane = g.lane(rep.rank);
  const cudaStream_t stream = rep.context.stream;  // the current context: rep's
  if (!lane.any_ready) {
    lane.first_ready[size_t(g.slot)].record(stream);
    lane.any_ready = true;
  }
  lane.bucket_ready[size_t(k)].record(stream);
  g.marked[size_t(k)]++;
  // Buckets go round the ring in order (the same collectives in the same order on every
  // replica): queue every complete bucket from the first not yet queued.
  const int R = replicas();
  while (g.queued < g.marked.size() && g.marked[g.queued] == R) {
    const size_t b = g.queued++;
    std::vector<void*> data;
    std::vector<cudaEvent_t> ready;
    for (int r = 0; r < R; r++) {
      data.push_back((*replicas_[size_t(r)]->grads)[b].data);
      ready.push_back(g.lane(r).bucket_ready[b].get());
    }
    const GradBucket& bucket = (*rep.grads)[b];
    g.ring->all_reduce(data, bucket.numel, bucket.dtype, true, ready);
  }
}

void Trainer::average_batchnorm_gpu() {
  Gpu& g = *gpu_;
  const int R = replicas();
  std::vector<cudaEvent_t> ready;
  for (auto& rep : replicas_) {
    const GpuContextScope on(rep->context);
    Event& e = g.lane(rep->rank).stats_ready;
    e.record(rep->context.stream);
    ready.push_back(e.get());
  }
  const size_t layers = model().batchnorm_states().size();
  for (size_t i = 0; i < layers; i++)
    for (Tensor BatchNormState::*field : {&BatchNormState::running_mean,
                                          &BatchNormState::running_var}) {
      std::vector<void*> data;
      for (int r = 0; r < R; r++)
        data.push_back((model(r).batchnorm_states()[i].second->*field).raw());
      const Tensor& t0 = model(0).batchnorm_states()[i].second->*field;
      g.ring->all_reduce(data, t0.numel(), t0.dtype(), true, ready);
    }
  for (auto& rep : replicas_) {
    const GpuContextScope on(rep->context);
    g.ring->wait(rep->rank, rep->context.stream);
  }
}

void Trainer::collect_gpu(size_t wait_for) {
  Gpu& g = *gpu_;
  const int R = replicas();
  for (size_t taken = 0; !g.launched.empty(); taken++) {
    const Gpu::Launched l = g.launched.front();
    const size_t slot = size_t(l.slot);
    bool arrived = true;
    for (auto& lane : g.lanes) arrived = arrived && lane->arrived[slot].done();
    if (taken >= wait_for && !arrived) break;
    for (auto& lane : g.lanes) lane->arrived[slot].synchronize();
    g.launched.pop_front();
    StepResult r = l.result;
    double loss = 0;
    for (auto& lane : g.lanes) {  // rank order: the same sum every run
      const StepRecord& rec = *lane->host_record(l.slot);
      loss += double(rec.loss);
      r.correct += rec.correct;
    }
    r.loss = loss;
    if (R > 1) {  // means over the replicas, as on the CPU
      for (auto& lane : g.lanes) {
        r.comm_s += lane->reduced[slot].ms_since(lane->first_ready[slot]) * 1e-3 / R;
        r.comm_exposed_s += lane->reduced[slot].ms_since(lane->backward_done[slot]) * 1e-3 / R;
      }
    }
    const StepState& state = g.lane(0).host_record(l.slot)->state;
    if (l.stepped) {
      // Every replica took the same decision from the same flags and the same state.
      for (int i = 1; i < R; i++) {
        const StepState& o = g.lane(i).host_record(l.slot)->state;
        CHECK(o.skip == state.skip && o.first_bad == state.first_bad &&
                  o.steps_taken == state.steps_taken && o.scaler.scale == state.scaler.scale &&
                  o.scaler.clean_steps == state.scaler.clean_steps,
              "step " << r.step << ": replica " << i << "'s step state (skip " << o.skip
                      << ", scale " << o.scaler.scale << ") differs from replica 0's (skip "
                      << state.skip << ", scale " << state.scaler.scale
                      << "): a bug in cutrain");
      }
      r.loss_scale = state.scale_used;
      r.taken = state.skip == 0;
      if (!r.taken) {
        // The first parameter at fault; with replicas, named as the CPU names it.
        auto name = [&](int bad) {
          return bad >= 0 ? optimizer().parameter_name(size_t(bad))
                          : std::string("(unknown parameter)");
        };
        if (R == 1) {
          r.overflow = name(state.first_bad);
        } else {
          std::vector<char> overflowed(size_t(R), 0);
          for (int i = 0; i < R; i++)
            overflowed[size_t(i)] = g.lane(i).host_record(l.slot)->own.skip != 0;
          r.overflow = overflow_name(overflowed, [&](int i) {
            return name(g.lane(i).host_record(l.slot)->own.first_bad);
          });
          if (r.overflow.empty()) r.overflow = name(state.first_bad);  // not reached: the OR
        }
      }
      // The host's scaler takes the same transition (and throws, naming the step, after too
      // many overflows in a row); it must land on the device's bits.
      update_scaler(r);
      const LossScalerState h = scaler_->state(), d = state.scaler;
      CHECK(h.scale == d.scale && h.clean_steps == d.clean_steps &&
                h.consecutive_skips == d.consecutive_skips && h.skipped_total == d.skipped_total,
            "step " << r.step << ": the device's loss scaler (scale " << d.scale
                    << ") and the host's (scale " << h.scale << ") disagree: a bug in cutrain");
      for (auto& rep : replicas_) rep->optimizer->steps_taken = state.steps_taken;
    } else {
      r.loss_scale = scaler_->scale();
    }
    r.scale_after = scaler_->scale();
    done_.push_back(r);
  }
  if (g.ring) g.ring->collect_trace(wait_for == SIZE_MAX);
  for (auto& lane : g.lanes) {
    if (!lane->timeline) continue;
    if (wait_for == SIZE_MAX)
      lane->timeline->flush();  // everything queued has run: the row is complete
    else
      lane->timeline->collect();
  }
}

void Trainer::backward_gpu(Replica& rep, Tape& tape, const VarPtr& loss, double share) {
  Tensor seed = Tensor::empty({1}, DType::f32, Device::cuda);  // (1): scale x share
  gpu_->lane(rep.rank).step->seed(share, seed.data<float>());
  tape.backward(loss, seed);
}

void Trainer::record_metrics_gpu(Replica& rep, const VarPtr& loss, const VarPtr& logits,
                                 const Tensor& labels, double weight) {
#if defined(CUTRAIN_CUDA)
  StepRecord* rec = gpu_->lane(rep.rank).rec;
  const cudaStream_t stream = rep.context.stream;
  scalar_accumulate_gpu(loss->value.data<float>(), weight, &rec->loss, stream);
  const Tensor& z = logits->value;  // (n,K)
  dispatch_float(z.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ON_GPU("top1_correct", T,
           top1_correct_gpu<T>(z.dim(0), z.dim(1), z.data<T>(), labels.data<int32_t>(),
                               &rec->correct, stream));
  });
#else
  (void)rep, (void)loss, (void)logits, (void)labels, (void)weight;
  CHECK(false, "Trainer: a CPU-only build has no GPU kernels");
#endif
}

}  // namespace cutrain
