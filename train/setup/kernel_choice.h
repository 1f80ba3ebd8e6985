// defines: choose_conv_kernels, --conv auto on a GPU: each conv layer's forward, data gradient
// and weight gradient timed once at the start with cutrain's own kernels (tc in fp16, direct in
// fp32) and with cuDNN, at the run's micro-batch, the faster kept for each pass, like PyTorch's
// cudnn.benchmark. The choices are the run's kernel plan (nn/model.h, KernelPlan): printed,
// saved in config.json, and so used by --resume, eval and predict; `train --kernel-plan RUN`
// repeats them in another run, kernel for kernel (timings vary a little from run to run, so
// two timed runs may choose differently, and their bits differ where they do).
//
// Under mpirun rank 0 times and every rank takes its plan; replicas in one process share it.
#pragma once
#include <string>
#include <vector>

#include "train/setup/config.h"
#include "train/setup/device.h"

namespace cutrain {

// When the run is new, on a GPU, --conv auto, without a --kernel-plan, and the build has cuDNN:
// times the passes and sets cfg.kernel_plan; adds a line per layer to `notes` ("conv2: forward
// tc 0.041 ms, cudnn 0.052 ms -> tc; ..."). Otherwise changes nothing.
void choose_conv_kernels(TrainConfig& cfg, const RunDevice& device, bool resuming,
                         std::vector<std::string>& notes);

}  // namespace cutrain
