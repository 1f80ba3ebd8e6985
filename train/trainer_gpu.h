// defines: StepRecord and Trainer::Gpu, the GPU half of a Trainer (train/trainer.h): per
// replica a Lane (its streams, its device-resident step state, the ring of step records
// through which the host learns, without waiting, what each queued step did), and with
// several replicas the ring all-reduce between them. Internal to train/.
//
// One replica (a Lane):
//   compute stream:   ... forward, backward ─► optimizer ─► state into record[s] ─► (event computed[s])
//   readback stream:                                         wait computed[s] ─► record[s] to host ─► (event arrived[s])
//   host:             launch(step k+1), launch(step k+2), ...   results(): arrived[s] done? read host[s]
//
// Record slot s = step % kGpuSlots. A slot is written again only after the host has read it
// (launch() first takes the oldest step when kGpuSlots are in flight), so no event is needed
// for that direction.
//
// R replicas (--devices 0,0 or 0,1,...), all queued by the one host thread, replica after
// replica (Trainer::launch_gpu):
//   compute r: forward, backward L..1 ───────► wait ─► check ──────► wait ─► decide, update
//                        │ bucket k ready        ▲              │ checked  ▲
//   comm r:              └─► all-reduce k ... ───┘              └─► OR of the flags
//                            (queued once every replica has marked k; DeviceRing)
// Backward's buckets (train/grad_buckets.h) are marked as the host queues their last gradient;
// the bucket's all-reduce is queued when the last replica marks it, in bucket order, and
// runs on the comm streams while the compute streams go on with the layers before. The OR of
// the per-parameter overflow flags makes every replica take the same decision; each record
// also keeps the replica's own decision, to name the replica whose gradient overflowed.
//
// --cuda-graph (one replica): the step of a full batch recorded once as two CUDA graphs
// (kernels/gpu.h, CudaGraph) and replayed each step after:
//   compute stream:  batch ─► graph input   [graph 1: zero the record, forward, backward]
//                    (after_backward)   lr ─► step state   [graph 2: update_gpu]
//                    graph record ─► record[s]
// A graph's addresses and arguments are frozen, so what changes from step to step sits at a
// fixed address: the batch is copied into the graphs' input buffers (the loader's slot
// changes every step); the graphs write their own record, copied into the slot's; the loss
// scale and the learning rate are device scalars (the one kernel argument that changes, the
// rate, goes in by step_set_lr between the two graphs). Everything else the graphs touch
// stays where it is between steps: weights, gradients, optimizer state, BatchNorm statistics.
// Two graphs rather than one so that after_backward (the tests' inf injection) still sits
// between backward and the checks. Capture waits for the steady state (kGraphWarmup full
// batches launched one by one: the gradients, the cuDNN plans and the cuBLAS handle exist by
// then); a short batch (bad files removed) runs without the graphs. If CUDA refuses the
// capture, the run says why once and goes on without them.
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
#include "train/device_ring.h"
#include "train/trainer.h"

namespace cutrain {

// What the device knows of one replica's step once it has run.
struct StepRecord {
  float loss = 0;        // the replica's share of the batch's mean loss (micro-batches x shares)
  int32_t pad_ = 0;
  int64_t correct = 0;   // top-1 correct in the replica's shard
  StepState state;       // after the step: skip, first_bad, scale_used, the scaler, steps_taken
  StepState own;         // R > 1: skip and first_bad of this replica's own flags, before the OR
};

struct Trainer::Gpu {
  // One replica's GPU half. Construct with `device` current (events belong to it).
  struct Lane {
    explicit Lane(int device);

    StepRecord* device_record(int slot) const {
      return static_cast<StepRecord*>(records.data()) + slot;
    }
    StepRecord* host_record(int slot) const {
      return static_cast<StepRecord*>(host.data()) + slot;
    }

    int device = 0;
    Stream compute;                  // everything the replica's model does, in order
    Stream readback;                 // the records' copies to the host
    DeviceBuffer records;            // kGpuSlots StepRecords
    PinnedBuffer host;               // their copies on the host
    std::vector<Event> computed;     // per slot: the compute stream has written the record
    std::vector<Event> arrived;      // per slot: its host copy is complete
    std::unique_ptr<DeviceStep> step;              // the loss scale, the skip flag, AdamW's t
    std::unique_ptr<InputNorm> norm;               // [input] mean/std for the input kernel
    // With --trace: the compute stream's row, timed with events (made at the first step, when
    // the tracer is known; destroyed before the streams).
    std::unique_ptr<GpuTimeline> timeline;
    // R > 1:
    std::vector<Event> bucket_ready;  // per bucket: backward has queued its last gradient
    Event checked;                    // the overflow checks are queued (the flags are final)
    Event stats_ready;                // average_batchnorm: the running statistics are final
    // per slot, timed: the step's first bucket ready, backward done, the ring done (when the
    // compute stream got past its wait); StepResult::comm_s and comm_exposed_s come from them
    std::vector<Event> first_ready, backward_done, reduced;
    bool any_ready = false;           // this step: a bucket was marked (first_ready recorded)
    // The record this step writes (the loss and top-1 count forward adds up, the state after
    // the update): the slot's, or with --cuda-graph the graphs' own, copied into the slot's.
    StepRecord* rec = nullptr;
  };

  Lane& lane(int r) { return *lanes[size_t(r)]; }

  std::vector<std::unique_ptr<Lane>> lanes;  // one per replica
  std::unique_ptr<DeviceRing> ring;          // R > 1
  bool ring_traced = false;                  // its comm streams have trace rows (--trace)
  // R > 1, this step: per bucket, how many replicas have marked it ready; the buckets whose
  // all-reduce is queued (a prefix: the ring takes buckets in order on every replica).
  std::vector<int> marked;
  size_t queued = 0;

  struct Launched {
    StepResult result;  // the host part; the rest comes from the records
    int slot = 0;
    bool stepped = false;  // the optimizer ran (false for a batch whose files were all bad)
  };
  std::deque<Launched> launched;   // queued, records not yet read, in step order
  int slot = 0;                    // the record slot of the step being queued

  // --cuda-graph (see the top of this file)
  static constexpr int kGraphWarmup = 2;
  // the graph's input: each batch is copied in ([input]: uncut images and their windows)
  DeviceBuffer graph_images, graph_crops, graph_labels;
  DeviceBuffer graph_record;                // the graphs' StepRecord
  int eager_full = 0;                       // full batches launched without the graphs
  std::string graph_refused;                // why CUDA refused the capture: not tried again
  // Last: destroyed first, their private pools back to the allocator before anything else.
  std::unique_ptr<CudaGraph> graph;         // forward and backward
  std::unique_ptr<CudaGraph> update_graph;  // update_gpu: check, decide, update, record, zero
};

}  // namespace cutrain
