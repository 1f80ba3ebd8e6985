// defines: MemoryPlan, what a training run will allocate, estimated from its configuration
// before it allocates anything; check_memory, which refuses a run that cannot fit and names
// the options to lower; host_memory_available.
//
// The estimate counts the big allocations, each from the shapes alone:
//   batch ring    replicas x 4 slots x (batch / replicas) images of size x size x channels
//                 bytes (data/loader.h); on a GPU also pinned on the host, and again on the device
//   activations   per replica, one micro-batch (batch / replicas / accum): the input and every
//                 layer's output, kept for backward and matched by a gradient (x 3); the
//                 evaluation's larger batches need no gradients (x 1); the larger of the two
//   parameters    per replica: weights, gradients, fp32 masters and optimizer state (x 4 fp32)
// It is an estimate, meant to be right within a factor of two: enough to refuse a run that
// would end in bad_alloc or the OOM killer hours later, not to predict the peak to the byte.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nn/tensor.h"
#include "train/setup/config.h"
#include "train/setup/device.h"

namespace cutrain {

struct MemoryItem {
  std::string what;    // "batch ring"
  std::string detail;  // "4 slots of 128 images of 28x28x1"
  int64_t bytes = 0;
};

struct MemoryPlan {
  std::vector<MemoryItem> host;    // the machine's memory (all replicas together)
  std::vector<MemoryItem> device;  // each GPU replica's device memory (empty on the CPU)
  static int64_t total(const std::vector<MemoryItem>& items);
};

// The plan of a resolved configuration (size, channels, classes and model_text known) run on
// `device` with activations in `dtype`.
MemoryPlan plan_memory(const TrainConfig& cfg, Device device, DType dtype);

// Throws UserError when the plan needs more than is available: "the run needs about 41.2 GiB
// of memory (batch ring 38.0 GiB: ...); this machine has 23.0 GiB available: lower --batch or
// --size". gpu_available: free bytes of each GPU replica's device, in replica order (empty on
// the CPU).
void check_memory(const MemoryPlan& plan, int64_t host_available,
                  const std::vector<int64_t>& gpu_available, const std::vector<int>& gpus);

// plan_memory and check_memory for a run on `device`, with this machine's available memory
// and each GPU replica's free device memory. Returns the plan.
MemoryPlan check_run_memory(const TrainConfig& cfg, const RunDevice& device);

// The memory a new allocation can get on this machine: /proc/meminfo's MemAvailable, lowered
// to what the process's memory cgroups (v1 or v2, and those above them) still allow: limit -
// (usage - inactive page cache). -1 when it cannot be told.
int64_t host_memory_available();

}  // namespace cutrain
