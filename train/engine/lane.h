// defines: StepRecord (what the device knows of one replica's step once it has run) and Lane
// (one replica's queue: where its work runs, its step state, and the ring of step records
// through which the host learns, without waiting, what each launched step did).
//
// The CPU is a device whose work is complete when it is queued: a CPU lane runs every call at
// once, its records are host memory that has "arrived" as soon as it is written, and its time
// marks are the host clock. A GPU lane queues on its compute stream, copies each record to
// pinned host memory on a side stream, and marks time with events:
//
//   compute stream:   ... forward, backward ─► optimizer ─► state into record[s] ─► (event computed[s])
//   readback stream:                                         wait computed[s] ─► record[s] to host ─► (event arrived[s])
//   host:             launch(step k+1), launch(step k+2), ...   results(): arrived(s)? host(s)
//
// Record slot s = step % kRecordSlots. A slot is written again only after the host has read it (the
// trainer first takes the oldest step when kRecordSlots are in flight), so no event is needed for
// that direction. The trainer (train/engine/trainer.cpp) drives every lane with the same code; what
// differs per device is only behind this interface and in which kernel runs.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "data/gpu_timeline.h"
#include "kernels/gpu.h"
#include "kernels/step_state.h"
#include "nn/autograd.h"
#include "nn/device_step.h"
#include "nn/context.h"

namespace cutrain {

// What the device knows of one replica's step once it has run.
struct StepRecord {
  double loss = 0;       // the replica's share of the batch's mean loss (micro-batches x shares)
  int64_t correct = 0;   // top-1 correct in the replica's shard
  StepState state;       // after the step: skip, first_bad, scale_used, the scaler, steps_taken
  StepState own;         // R > 1: skip and first_bad of this replica's own flags, before the OR
};

class Lane {
 public:
  static constexpr int kRecordSlots = 16;  // steps in flight at most: the ring of records

  // On the CPU (device = -1), or on GPU `device` (made current for the construction: the
  // streams, events and memory belong to it). conv/linear: the kernels' implementations.
  // plan: where everything made and queued in this lane's context notes what a GPU launches
  // (Context::plan; null: nothing noted).
  Lane(Device where, int device, ConvImpl conv, LinearImpl linear, LaunchPlan* plan = nullptr);
  ~Lane();  // waits for what was queued (never throws)
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  Device where() const { return context_.device; }
  int device() const { return context_.gpu; }
  // The context every op of this replica runs in (nn/context.h): its device, on a GPU its
  // compute stream and ordinal, and the conv/linear implementations.
  const Context& context() const { return context_; }
  cudaStream_t stream() const { return context_.stream; }

  // The step state (the loss scale, the skip decision, the step count) on this lane's device.
  // Made once the parameter count is known.
  void make_step(const LossScalerConfig& config, int params);
  DeviceStep& step() { return *step_; }

  // Record slot s in the device's memory; zeroed (queued) before a step writes it.
  StepRecord* record(int slot);
  void clear(StepRecord* rec);
  // dst = src, bytes of the device's memory, in the lane's order.
  void copy(void* dst, const void* src, size_t bytes);
  // The loss (one element, f32 or f64) x weight added to rec->loss, the top-1 count of logits
  // (n,K) against labels (n) added to rec->correct: queued after the forward that made them.
  void add_metrics(StepRecord* rec, const Tensor& loss, double weight, const Tensor& logits,
                   const Tensor& labels);
  // Record slot s is complete once the work queued so far has run: start its way to the host.
  void publish(int slot);
  bool arrived(int slot) const;          // has it reached the host? (never blocks)
  const StepRecord& host(int slot);      // waits until it has, then the host's copy

  // Time marks of a step (slot s), on the device's clock (GPU: timing events on the compute
  // stream; the CPU: the host's clock): where the step began, before the wait for its batch
  // (step_begin), the batch ready (batch_ready), the step's last kernel done (step_end); and
  // what the replicas' all-reduce took (first_ready, backward_done, reduced).
  enum Mark { step_begin, batch_ready, first_ready, backward_done, reduced, step_end, kMarks };
  void mark(Mark m, int slot);
  double seconds(Mark from, Mark to, int slot) const;
  // From mark `from` of slot from_slot to mark `to` of slot to_slot (an earlier step's end to
  // this one's begin). Both must have been recorded, the first before the second.
  double seconds(Mark from, int from_slot, Mark to, int to_slot) const;

  // With --trace: the compute stream's row (GPU lanes; made by the trainer at the first step).
  std::unique_ptr<GpuTimeline> timeline;

  void synchronize();  // waits for everything queued (shutdown, tests)

 private:
  struct Gpu;  // streams, events, device and pinned memory (lane.cpp)
  Context context_;
  std::unique_ptr<Gpu> gpu_;
  std::unique_ptr<DeviceStep> step_;
  std::vector<StepRecord> host_records_;           // CPU: the records themselves
  std::vector<std::vector<double>> host_marks_;    // CPU: per mark, per slot, seconds
};

}  // namespace cutrain
