// Lane: one replica's queue on the CPU (everything at once) or on a GPU (streams, events, a
// ring of records copied to pinned host memory). See train/engine/lane.h.
#include "train/engine/lane.h"

#include <chrono>
#include <cstring>

#include "kernels/check.h"
#include "kernels/softmax_xent.h"
#include "nn/dispatch.h"
#include "nn/ops.h"

namespace cutrain {

struct Lane::Gpu {
  explicit Gpu(int dev)
      : compute(dev),
        readback(dev),
        records(sizeof(StepRecord) * kRecordSlots, dev, compute.get()),
        host(sizeof(StepRecord) * kRecordSlots) {
    for (int s = 0; s < kRecordSlots; s++) {
      computed.emplace_back();
      arrived.emplace_back();
      for (auto& m : marks) m.emplace_back(true);  // timing events
    }
  }
  Stream compute;                  // everything the replica's model does, in order
  Stream readback;                 // the records' copies to the host
  DeviceBuffer records;            // kRecordSlots StepRecords
  PinnedBuffer host;               // their copies on the host
  std::vector<Event> computed;     // per slot: the compute stream has written the record
  std::vector<Event> arrived;      // per slot: its host copy is complete
  std::vector<Event> marks[kMarks];
};

Lane::Lane(Device where, int device, ConvImpl conv, LinearImpl linear, LaunchPlan* plan) {
  context_.conv = conv;
  context_.linear = linear;
  context_.plan = plan;
  if (where == Device::cpu) {
    host_records_.resize(kRecordSlots);
    host_marks_.assign(kMarks, std::vector<double>(kRecordSlots, 0.0));
    return;
  }
  const DeviceGuard on(device);
  gpu_ = std::make_unique<Gpu>(device);
  context_.device = Device::cuda;
  context_.stream = gpu_->compute.get();
  context_.gpu = device;
}

Lane::~Lane() {
  // Let the GPU finish what was queued before the memory and the streams go away. Never throw
  // from here (a destructor may run while an earlier CUDA error unwinds the stack).
  try {
    timeline.reset();  // flushes its spans
    step_.reset();
    if (gpu_) {
      gpu_->compute.synchronize();
      gpu_->readback.synchronize();  // the last records' copies into pinned memory
    }
  } catch (...) {
  }
}

void Lane::make_step(const LossScalerConfig& config, int params) {
  const OnDevice on(context_);
  step_ = std::make_unique<DeviceStep>(config, params, context_);
}

StepRecord* Lane::record(int slot) {
  CHECK(slot >= 0 && slot < kRecordSlots, "Lane: record slot " << slot);
  if (!gpu_) return &host_records_[size_t(slot)];
  return static_cast<StepRecord*>(gpu_->records.data()) + slot;
}

void Lane::clear(StepRecord* rec) {
  note_launch(context_.plan, memset_cost(sizeof(StepRecord)));
  if (!gpu_)
    *rec = StepRecord{};
  else
    memset_async(rec, 0, sizeof(StepRecord), stream());
}

void Lane::copy(void* dst, const void* src, size_t bytes) {
  note_launch(context_.plan, copy_cost("copy (step state)", bytes));
  if (!gpu_)
    std::memmove(dst, src, bytes);
  else
    copy_async(dst, src, bytes, stream());
}

void Lane::add_metrics(StepRecord* rec, const Tensor& loss, double weight, const Tensor& logits,
                       const Tensor& labels) {
  // Each noted right before it is queued (a measured plan times each from its note).
  const LaunchCost top1 =
      top1_correct_gpu_cost(logits.dim(0), logits.dim(1), dtype_size(logits.dtype()));
  note_launch(context_.plan, scalar_accumulate_gpu_cost());
  if (!gpu_) {
    if (loss.dtype() == DType::f64)
      scalar_accumulate_cpu(loss.data<double>(), weight, &rec->loss);
    else
      scalar_accumulate_cpu(loss.data<float>(), weight, &rec->loss);
    note_launch(context_.plan, top1);
    rec->correct += top1_correct(logits, labels);
    return;
  }
#if defined(CUTRAIN_CUDA)
  scalar_accumulate_gpu(loss.data<float>(), weight, &rec->loss, stream());
  note_launch(context_.plan, top1);
  dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ON_GPU("top1_correct", T,
           top1_correct_gpu<T>(logits.dim(0), logits.dim(1), logits.data<T>(),
                               labels.data<int32_t>(), &rec->correct, stream()));
  });
#else
  CHECK(false, "Lane: a CPU-only build has no GPU kernels");
#endif
}

void Lane::publish(int slot) {
  LaunchCost c = copy_cost("copy (record to the host, readback stream)", sizeof(StepRecord), false);
  c.other_stream = true;
  note_launch(context_.plan, c);
  if (!gpu_) return;  // written: it is on the host already
  const size_t s = size_t(slot);
  gpu_->computed[s].record(stream());
  gpu_->computed[s].wait(gpu_->readback.get());
  copy_async(static_cast<StepRecord*>(gpu_->host.data()) + slot, record(slot),
             sizeof(StepRecord), gpu_->readback.get());
  gpu_->arrived[s].record(gpu_->readback.get());
}

bool Lane::arrived(int slot) const { return !gpu_ || gpu_->arrived[size_t(slot)].done(); }

const StepRecord& Lane::host(int slot) {
  if (!gpu_) return host_records_[size_t(slot)];
  gpu_->arrived[size_t(slot)].synchronize();
  return static_cast<const StepRecord*>(gpu_->host.data())[slot];
}

void Lane::mark(Mark m, int slot) {
  if (gpu_) return gpu_->marks[m][size_t(slot)].record(stream());
  host_marks_[m][size_t(slot)] =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Lane::seconds(Mark from, Mark to, int slot) const {
  return seconds(from, slot, to, slot);
}

double Lane::seconds(Mark from, int from_slot, Mark to, int to_slot) const {
  const size_t a = size_t(from_slot), b = size_t(to_slot);
  if (gpu_) return gpu_->marks[to][b].ms_since(gpu_->marks[from][a]) * 1e-3;
  return host_marks_[to][b] - host_marks_[from][a];
}

void Lane::synchronize() {
  if (!gpu_) return;
  gpu_->compute.synchronize();
  gpu_->readback.synchronize();
}

}  // namespace cutrain
