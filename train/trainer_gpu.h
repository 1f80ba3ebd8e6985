// defines: StepRecord and Trainer::Gpu, the GPU half of a Trainer (train/trainer.h): its
// streams, the device-resident step state, and the ring of step records through which the
// host learns, without waiting, what each queued step did. Internal to train/.
//
//   compute stream:   ... forward, backward ─► optimizer ─► state into record[s] ─► (event computed[s])
//   readback stream:                                         wait computed[s] ─► record[s] to host ─► (event arrived[s])
//   host:             launch(step k+1), launch(step k+2), ...   results(): arrived[s] done? read host[s]
//
// Record slot s = step % kGpuSlots. A slot is written again only after the host has read it
// (launch() first takes the oldest step when kGpuSlots are in flight), so no event is needed
// for that direction.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "data/gpu_timeline.h"
#include "kernels/gpu.h"
#include "kernels/step_state.h"
#include "nn/device_step.h"
#include "train/batch_input.h"
#include "train/trainer.h"

namespace cutrain {

// What the device knows of one step once it has run.
struct StepRecord {
  float loss = 0;        // the batch's mean loss: the micro-batches' losses x their shares
  int32_t pad_ = 0;
  int64_t correct = 0;   // top-1 correct in the batch
  StepState state;       // after the step: skip, first_bad, scale_used, the scaler, steps_taken
};

struct Trainer::Gpu {
  explicit Gpu(int device);

  StepRecord* device_record(int slot) const {
    return static_cast<StepRecord*>(records.data()) + slot;
  }
  const StepRecord& host_record(int slot) const {
    return static_cast<const StepRecord*>(host.data())[slot];
  }
  StepRecord* host_record_ptr(int slot) const { return static_cast<StepRecord*>(host.data()) + slot; }

  Stream compute;                  // everything the model does, in order
  Stream readback;                 // the records' copies to the host
  DeviceBuffer records;            // kGpuSlots StepRecords
  PinnedBuffer host;               // their copies on the host
  std::vector<Event> computed;     // per slot: the compute stream has written the record
  std::vector<Event> arrived;      // per slot: its host copy is complete
  std::unique_ptr<DeviceStep> step;              // the loss scale, the skip flag, AdamW's t
  std::unique_ptr<DeviceNormalization> norm;     // mean/std for the input kernel
  // With --trace: the compute stream's row, timed with events (made at the first step, when
  // the tracer is known; destroyed before the streams).
  std::unique_ptr<GpuTimeline> timeline;

  struct Launched {
    StepResult result;  // the host part; the rest comes from the record
    int slot = 0;
    bool stepped = false;  // the optimizer ran (false for a batch whose files were all bad)
  };
  std::deque<Launched> launched;   // queued, record not yet read, in step order
  int slot = 0;                    // the record slot of the step being queued
};

}  // namespace cutrain
