// Trainer on a GPU: launch_gpu queues a step on the compute stream, collect_gpu reads the
// records of the steps that have run. See train/trainer_gpu.h for the streams and the records,
// and train/trainer.h for the step itself (forward_backward is shared with the CPU).
#include <chrono>
#include <cstdint>
#include <string>

#include "kernels/check.h"
#include "kernels/softmax_xent.h"
#include "nn/dispatch.h"
#include "train/trainer_gpu.h"

namespace cutrain {

Trainer::Gpu::Gpu(int device)
    : compute(device),
      readback(device),
      records(sizeof(StepRecord) * kGpuSlots, device, compute.get()),
      host(sizeof(StepRecord) * kGpuSlots) {
  for (int s = 0; s < kGpuSlots; s++) {
    computed.emplace_back();
    arrived.emplace_back();
  }
}

void Trainer::launch_gpu(StepResult r) {
  Gpu& g = *gpu_;
  // At most kGpuSlots steps in flight: the new step's record slot is the oldest one's.
  if (g.launched.size() >= size_t(kGpuSlots)) collect_gpu(1);
  TraceSpan span(tracer, "step", "train");
  Replica& rep = *replicas_[0];
  const cudaStream_t stream = g.compute.get();
  g.slot = int(step_ % kGpuSlots);
  StepRecord* rec = g.device_record(g.slot);

  // 1. The batch: decoded by the workers and copied on the loader's copy stream; the compute
  // stream waits for that copy (an event), the host does not.
  const auto wait_start = std::chrono::steady_clock::now();
  rep.batch = rep.loader->next(stream);
  if (on_shard) on_shard(rep.rank, rep.batch);
  r.data_wait_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
  r.batch = rep.batch.where;
  r.images = rep.batch.n;
  rep.optimizer->lr = r.lr;
  if (tracer && !g.timeline)
    g.timeline = std::make_unique<GpuTimeline>(
        tracer, "compute stream (cuda:" + std::to_string(current_device()) + ")", stream);
  if (g.timeline) g.timeline->begin("forward + backward", {"step", r.step});
  memset_async(rec, 0, sizeof(StepRecord), stream);

  // 2. Forward and backward; the loss and the top-1 count add up in the record.
  forward_backward(rep, r.images, 0.0);  // the scale is on the device: backward_gpu
  if (after_backward) after_backward(*this);

  // 3-4. Check, decide, update, move the scale: kernels, no host round trip.
  const bool stepped = r.images > 0;
  if (g.timeline) g.timeline->begin("optimizer", {"step", r.step});
  if (stepped) {
    TraceSpan s(tracer, "optimizer", "train");
    DeviceStep& ds = *g.step;
    ds.begin();
    rep.optimizer->check_device(ds);
    ds.decide();
    rep.optimizer->apply_device(ds);
    ds.finish();
  }
  copy_async(&rec->state, g.step->state(), sizeof(StepState), stream);
  rep.optimizer->zero_grad();
  if (g.timeline) g.timeline->end();

  // The record to the host on the side stream, as soon as the compute stream has written it.
  g.computed[size_t(g.slot)].record(stream);
  g.computed[size_t(g.slot)].wait(g.readback.get());
  copy_async(g.host_record_ptr(g.slot), rec, sizeof(StepRecord), g.readback.get());
  g.arrived[size_t(g.slot)].record(g.readback.get());

  // 5. The slot is refilled once the compute stream is past what reads it.
  rep.loader->release(rep.batch, stream);
  g.launched.push_back(Gpu::Launched{r, g.slot, stepped});
  step_++;
  cursor_ = rep.loader->cursor();
}

void Trainer::collect_gpu(size_t wait_for) {
  Gpu& g = *gpu_;
  for (size_t taken = 0; !g.launched.empty(); taken++) {
    const Gpu::Launched l = g.launched.front();
    Event& arrived = g.arrived[size_t(l.slot)];
    if (taken >= wait_for && !arrived.done()) break;
    arrived.synchronize();
    g.launched.pop_front();
    const StepRecord& rec = g.host_record(l.slot);
    StepResult r = l.result;
    r.loss = rec.loss;
    r.correct = rec.correct;
    if (l.stepped) {
      r.loss_scale = rec.state.scale_used;
      r.taken = rec.state.skip == 0;
      if (!r.taken)
        r.overflow = rec.state.first_bad >= 0
                         ? optimizer().parameter_name(size_t(rec.state.first_bad))
                         : std::string("(unknown parameter)");
      // The host's scaler takes the same transition (and throws, naming the step, after too
      // many overflows in a row); it must land on the device's bits.
      scaler_->update(!r.taken, r.step);
      const LossScalerState h = scaler_->state(), d = rec.state.scaler;
      CHECK(h.scale == d.scale && h.clean_steps == d.clean_steps &&
                h.consecutive_skips == d.consecutive_skips && h.skipped_total == d.skipped_total,
            "step " << r.step << ": the device's loss scaler (scale " << d.scale
                    << ") and the host's (scale " << h.scale << ") disagree: a bug in cutrain");
      optimizer().steps_taken = rec.state.steps_taken;
    } else {
      r.loss_scale = scaler_->scale();
    }
    r.scale_after = scaler_->scale();
    done_.push_back(r);
  }
  if (g.timeline) {
    if (wait_for == SIZE_MAX)
      g.timeline->flush();  // everything queued has run: the row is complete
    else
      g.timeline->collect();
  }
}

void Trainer::backward_gpu(Tape& tape, const VarPtr& loss, double share) {
  Tensor seed = Tensor::empty({1}, DType::f32, Device::cuda);  // (1): scale x share
  gpu_->step->seed(share, seed.data<float>());
  tape.backward(loss, seed);
}

void Trainer::record_metrics_gpu(const VarPtr& loss, const VarPtr& logits, const Tensor& labels,
                                 double weight) {
#if defined(CUTRAIN_CUDA)
  StepRecord* rec = gpu_->device_record(gpu_->slot);
  const cudaStream_t stream = gpu_->compute.get();
  scalar_accumulate_gpu(loss->value.data<float>(), weight, &rec->loss, stream);
  const Tensor& z = logits->value;  // (n,K)
  dispatch_float(z.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ON_GPU("top1_correct", T,
           top1_correct_gpu<T>(z.dim(0), z.dim(1), z.data<T>(), labels.data<int32_t>(),
                               &rec->correct, stream));
  });
#else
  (void)loss, (void)logits, (void)labels, (void)weight;
  CHECK(false, "Trainer: a CPU-only build has no GPU kernels");
#endif
}

}  // namespace cutrain
