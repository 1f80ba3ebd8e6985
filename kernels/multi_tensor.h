// defines: ParamSlot and ParamTable (every parameter of a model in one table on the device: its
// gradient, fp32 master weights, optimizer state and working copy), and the optimizer's steps
// over the whole table, each one launch however many parameters there are: the inf/NaN check
// of every gradient, and the SGD or AdamW update of every parameter with the gradients zeroed
// after them. apex's multi_tensor_apply and PyTorch's fused optimizers do the same.
//
// Why: a model of P parameter tensors costs 3P small launches a step with one kernel per
// tensor (check, update, memset of the gradient); the default model has 17, so 51 of the 157
// launches its step had then. One table makes them 2 (the default step launches 72 today:
// `cutrain describe default --step`, pinned by tests/train/cli/step_plan_test.cpp).
//
// Math: per element exactly sgd_update / adamw_update (sgd.h, adamw.h) and scaled_finite, as
//   the per-tensor kernels: the same bits as sgd_step_gpu and adamw_step_gpu, which are
//   sgd_step_cpu's and adamw_step_cpu's. The CPU references below run those per slot.
//   Zeroing: the update writes 0 into each gradient after reading it, whether the step is taken
//   or skipped (*skip): the next step's backward accumulates into zeros, and nobody memsets them.
//   Average (--ema, kernels/ema.h): a slot with an `ema` array has it moved towards the updated
//   master weights by the same update, on a step taken only. Averaged-only slots (no gradient:
//   BatchNorm's running statistics as `master`) come after every parameter's slot: the check
//   never sees them, the update only averages them.
// Launch: multi_tensor.cu launches them, one launch each over the whole table. The table is P
//   slots, then its chunks: each chunk is kParamChunk elements (or the rest) of one slot, so a
//   block works on one tensor of one dtype at a time and raises that tensor's flag alone. A
//   block takes chunk blockIdx.x, then every gridDim.x-th after it.
// Bytes: multi_grads_nonfinite_gpu_cost: every gradient read; multi_step_gpu_cost: the gradient
//   read and its zero written, the fp32 master and each state read and written, the working
//   copy written, each average read and written (an averaged-only slot's master read too).
// Flops: multi_grads_nonfinite_gpu_cost 2 an element; multi_step_gpu_cost ~7 (SGD) or ~15
//   (AdamW) an element, + 3 an averaged element.
// Precision: the per-tensor functions' (sgd.h, adamw.h, ema.h): the CPU's bits.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/ema.h"
#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/launch_plan.h"
#include "kernels/sgd.h"
#include "kernels/step_state.h"

namespace cutrain {

// One parameter tensor. grad and working are half_t when half, else float; master and the
// optimizer's state are fp32. working is null when the master weights are the parameter
// (fp32 training); state2 is null for SGD (its one state is the velocity); ema is null without
// a moving average. An averaged-only slot has no grad, states or working copy: master is the
// tensor averaged into ema (fp32).
struct ParamSlot {
  void* grad = nullptr;
  float* master = nullptr;
  float* state1 = nullptr;  // SGD: velocity; AdamW: m
  float* state2 = nullptr;  // AdamW: v
  void* working = nullptr;
  float* ema = nullptr;     // the moving average of master (kernels/ema.h), or null
  int64_t n = 0;
  int32_t half = 0;
};
bool operator==(const ParamSlot& a, const ParamSlot& b);

struct ParamChunk {
  int32_t slot = 0;
  int64_t begin = 0, end = 0;  // elements [begin, end) of the slot
};
constexpr int64_t kParamChunk = 8192;

// The chunks of a table (host): every slot cut into kParamChunk-element pieces, in slot order.
std::vector<ParamChunk> param_chunks(const std::vector<ParamSlot>& slots);

// The table on a GPU: the slots and their chunks in one device buffer, uploaded by build()
// (a copy waited for: call it outside a CUDA graph's capture; the optimizer builds it at its
// first step and again only if a tensor moved). In a CPU-only build build() throws. The
// parameters' slots first, then the averaged-only ones (build() checks the order).
class ParamTable {
 public:
  void build(const std::vector<ParamSlot>& slots, int device, cudaStream_t stream);
  bool built() const { return !host_.empty(); }
  const std::vector<ParamSlot>& host() const { return host_; }  // what was uploaded
  const ParamSlot* slots() const { return static_cast<const ParamSlot*>(mem_.data()); }
  const ParamChunk* chunks() const;
  int slot_count() const { return int(host_.size()); }
  int chunk_count() const { return chunks_; }
  // The parameters' slots (with a gradient) and their chunks: the first of each.
  int param_count() const { return params_; }
  int param_chunk_count() const { return param_chunks_; }
  bool has_averages() const { return averages_; }  // a slot has an ema

 private:
  std::vector<ParamSlot> host_;
  DeviceBuffer mem_;
  int chunks_ = 0, params_ = 0, param_chunks_ = 0;
  bool averages_ = false;
};

// --- CPU references: the per-tensor CPU functions of sgd.h, adamw.h and ema.h over every slot ---
// flags[i] = 1 where slot i's gradient, unscaled, holds an inf or NaN (never cleared).
// Averaged-only slots are left out.
void multi_grads_nonfinite_cpu(const std::vector<ParamSlot>& slots, double inv_scale,
                               int32_t* flags);
// Unless skip: sgd_step_cpu on every slot (p.lr the rate), then, where a slot has an ema,
// ema_update_cpu at step t with ema_decay (averaged-only slots: that alone). Skip or not:
// every gradient zeroed.
void multi_sgd_step_cpu(const std::vector<ParamSlot>& slots, double inv_scale, bool skip,
                        const SgdParams& p, int64_t t = 1, double ema_decay = 0);
// The same with adamw_step_cpu at step t.
void multi_adamw_step_cpu(const std::vector<ParamSlot>& slots, double inv_scale, bool skip,
                          const AdamWParams& p, int64_t t, double ema_decay = 0);

// --- GPU (CUDA builds only; the table's device pointers; queued on stream) ---
// The scalars as the per-tensor kernels take them (sgd.h, adamw.h): inv_scale, skip, lr
// (StepState::lr; p.lr is not read) and t (step) in device memory; ema_decay > 0: the slots'
// averages move at step *step (then step must not be null; 0: no slot may have an ema).
// The step's own work folded in (kernels/step_state.h), done by the launch's last block once
// every other block is through (last_block_to_arrive, kernels/cuda_util.cuh): one launch
// instead of two. decide: after the check, step_decide over the table's param_count() flags
// into *decide (null: not folded; replicas OR their flags first). finish: after an update,
// step_finish(finish->config, finish->state) (null: not folded). An empty table launches the
// folded kernel alone.
struct StepFinish {
  LossScalerConfig config;
  StepState* state = nullptr;
};
void multi_grads_nonfinite_gpu(const ParamTable& t, const float* inv_scale, int32_t* flags,
                               StepState* decide, cudaStream_t stream);
void multi_sgd_step_gpu(const ParamTable& t, const float* inv_scale, const int32_t* skip,
                        const double* lr, const SgdParams& p, const int64_t* step,
                        double ema_decay, const StepFinish* finish, cudaStream_t stream);
void multi_adamw_step_gpu(const ParamTable& t, const float* inv_scale, const int32_t* skip,
                          const double* lr, const AdamWParams& p, const int64_t* step,
                          double ema_decay, const StepFinish* finish, cudaStream_t stream);

// Their costs, from the slots' sizes: 1 launch each (none for an empty table, unless a step's
// work is folded in). The check reads every gradient; an update reads the gradient and writes
// its zero, reads and writes the master and each state, writes the working copy, and reads
// and writes each average (reading an averaged-only slot's master too).
struct ParamTotals {
  int64_t elements = 0;       // the parameters' slots
  double grad_bytes = 0;      // sum of n * (2 or 4)
  double working_bytes = 0;   // of the slots with a working copy
  int64_t ema_elements = 0;   // of every average (averaged-only slots included)
  double ema_bytes = 0;       // 8 an element, 12 in an averaged-only slot (its master read)
};
ParamTotals param_totals(const std::vector<ParamSlot>& slots);
// folded: a step's work folded in (decide, finish).
inline LaunchCost multi_grads_nonfinite_gpu_cost(const ParamTotals& t, bool folded) {
  return {"multi_grads_nonfinite", t.elements > 0 || folded ? 1 : 0, t.grad_bytes,
          2.0 * double(t.elements)};
}
// states: 1 (SGD) or 2 (AdamW); flops per element: ~7 (SGD), ~15 (AdamW).
inline LaunchCost multi_step_gpu_cost(const char* kernel, const ParamTotals& t, int states,
                                      double flops_per_element, bool folded) {
  const double fp32 = 4.0 * double(t.elements);
  return {kernel, t.elements > 0 || folded ? 1 : 0,
          2 * t.grad_bytes + 2 * fp32 * (1 + states) + t.working_bytes + t.ema_bytes,
          flops_per_element * double(t.elements) + 3.0 * double(t.ema_elements)};
}

}  // namespace cutrain
