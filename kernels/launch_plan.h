// defines: LaunchCost (what one GPU entry point queues: its launches, the bytes its kernels move,
// its flops), LaunchPlan (the costs of a stretch of work, in order, by phase), and Roofline (the
// known GPUs' peaks and the ideal time of a cost on one of them).
//
// Every GPU entry point of kernels/ states its cost beside its declaration, as a plain function
// of the shapes that a CPU-only build compiles too:
//
//   LaunchCost relu_forward_gpu_cost(int64_t n, size_t elem);   // elementwise.h
//
// and the code that calls the entry point notes that cost in the plan its Context carries
// (nn/context.h), on the GPU and on the CPU alike. So one training step walked on the CPU with
// a plan attached lists what the GPU's step launches: `cutrain describe MODEL --step`.
//
// What the numbers mean:
//   launches  kernels, memsets and copies queued on a stream. A cuDNN or cuBLAS call counts as
//             the launches it makes, taken from a GPU profile and marked `estimated` until one
//             confirms it (the vendor decides, not this code).
//   bytes     what the kernels must move to and from device memory as written: every pass
//             reads its inputs once and writes its outputs once (an accumulated output is read
//             and written). A kernel that reads x three times counts x three times: that is
//             what fusing passes saves. Caches are ignored, small reads (gamma, a scalar) too
//             when they are noise beside the tensors.
//   flops     arithmetic, 2 per multiply-add; elementwise work counts a few per element.
//   tensor    the flops run on tensor cores (fp16 in, fp32 accumulate): the GPU's fp16 tensor
//             peak is their roof, else its fp32 CUDA-core peak.
// The ideal time of a cost on a GPU is the roofline's: max(bytes / bandwidth, flops / peak).
// Launch overhead is not in it: that is what the launch count shows.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/gpu.h"

namespace cutrain {

struct LaunchCost {
  std::string kernel;      // "batchnorm_forward_train" (the entry point, without _gpu)
  int launches = 0;
  double bytes = 0;
  double flops = 0;
  bool tensor = false;     // flops on tensor cores
  bool estimated = false;  // launches from a profile table (a vendor library's call)
  bool other_stream = false;  // queued on a stream beside the step's (the loader's copy, the
                              //   record's way to the host): not timed (LaunchPlan::time_on)
};

// A GPU's peaks, from its vendor's data sheet (dense, no sparsity).
struct Roofline {
  const char* name;        // "h100": what --gpu takes
  const char* full_name;   // "NVIDIA H100 SXM5 80GB"
  double tensor_fp16;      // FLOP/s, fp16 in, fp32 accumulate, dense
  double fp32;             // FLOP/s, CUDA cores
  double bandwidth;        // bytes/s of device memory
};

// The known GPUs, H100 first (the default of `describe --step`).
const std::vector<Roofline>& known_gpus();
// The GPU named `name` (a known_gpus() name); throws a UserError listing them for any other.
const Roofline& roofline_of(const std::string& name);
// max(bytes / bandwidth, flops / peak) in seconds, the peak by cost.tensor.
double ideal_seconds(const LaunchCost& cost, const Roofline& gpu);

// The costs of the work noted while recording, in order. Notes made while not recording are
// dropped: a plan attached to a run's context records only the stretch it is asked to
// (describe records the steady step, not the warm-up).
class LaunchPlan {
 public:
  struct Row {
    std::string phase;     // "input", "forward", "loss", "backward", "optimizer", "record"
    LaunchCost cost;
    double measured_s = -1;  // time_on: the GPU's seconds for it; < 0: not measured
  };
  void record(bool on) { recording_ = on; }
  bool recording() const { return recording_; }
  // The phase the next notes belong to.
  void phase(const char* name) { phase_ = name; }
  const std::string& current_phase() const { return phase_; }
  void note(const LaunchCost& c);

  // Measuring (a GPU): from time_on, each recorded note also records a timing event on
  // `stream`, where the step's work is queued; finish_timing() waits for them and gives each
  // row the time from its event to the next one's (the launches noted between). Rows of work on
  // another stream are skipped. Hold the stream while the step is queued (StreamHold,
  // kernels/gpu.h) so that the times are the GPU's, not the pace of the host.
  void time_on(cudaStream_t stream);
  void finish_timing();

  const std::vector<Row>& rows() const { return rows_; }
  void clear() { rows_.clear(); }
  int launches() const;                        // all rows
  int launches(const std::string& phase) const;  // one phase's

 private:
  bool recording_ = false;
  std::string phase_ = "step";
  std::vector<Row> rows_;
  bool timing_ = false;
  cudaStream_t stream_ = nullptr;
  std::vector<std::pair<size_t, Event>> marks_;  // (row, the event recorded as it was noted)
};

// Notes c in *plan when there is one (null: nothing to do): what every entry point's caller
// writes beside the call.
inline void note_launch(LaunchPlan* plan, const LaunchCost& c) {
  if (plan) plan->note(c);
}

// Costs of the runtime's own work (kernels/gpu.h): one memset, one copy of `bytes`. A copy
// within the device reads and writes them there; one to or from the host (on_device = false)
// moves them once in device memory (the link's own time is not on the roofline).
LaunchCost memset_cost(size_t bytes);
LaunchCost copy_cost(const char* what, size_t bytes, bool on_device = true);

// Bytes of n elements of `elem` bytes each, as a double (the plans' unit).
inline double nbytes(int64_t n, size_t elem) { return double(n) * double(elem); }

}  // namespace cutrain
