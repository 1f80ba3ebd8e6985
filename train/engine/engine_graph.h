// defines: Engine::Graphs, what --cuda-graph keeps (one replica on one GPU): the step of a full
// batch recorded once as two CUDA graphs (kernels/gpu.h, CudaGraph) and replayed each step after:
//
//   compute stream:  batch ─► graph input   [graph 1: zero the record, forward, backward]
//                    (after_backward)   lr ─► step state   [graph 2: Engine::update]
//                    graph record ─► record[s]
//
// A graph's addresses and arguments are frozen, so what changes from step to step sits at a
// fixed address: the batch is copied into the graphs' input buffers (the loader's slot
// changes every step); the graphs write their own record, copied into the slot's; the loss
// scale and the learning rate are device scalars (the one kernel argument that changes, the
// rate, goes in by DeviceStep::set_lr between the two graphs). Everything else the graphs touch
// stays where it is between steps: weights, gradients, optimizer state, BatchNorm statistics.
// Two graphs rather than one so that after_backward (the tests' inf injection) still sits
// between backward and the checks. Capture waits for the steady state (kWarmup full batches
// launched one by one: the gradients, the cuDNN plans and the cuBLAS handle exist by then); a
// short batch (bad files removed) runs without the graphs. If CUDA refuses the capture, the
// run says why once and goes on without them. Internal to train/.
#pragma once
#include <memory>
#include <string>

#include "kernels/gpu.h"
#include "train/engine/engine.h"

namespace cutrain {

struct Engine::Graphs {
  static constexpr int kWarmup = 2;
  // the graphs' input: each batch is copied in (uncut images, their windows, labels)
  DeviceBuffer images, crops, labels;
  DeviceBuffer record;           // the graphs' StepRecord
  int eager_full = 0;            // full batches launched without the graphs
  std::string refused;           // why CUDA refused the capture: not tried again
  // Last: destroyed first, their private pools back to the allocator before anything else.
  std::unique_ptr<CudaGraph> forward_backward;  // forward and backward
  std::unique_ptr<CudaGraph> update;            // Engine::update: check, decide, update, zero
};

}  // namespace cutrain
