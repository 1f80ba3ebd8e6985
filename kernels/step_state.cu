// The step-state kernels of kernels/step_state.h on the GPU.
//
// Math: step_state.h.
// Launch: one block of one thread each. They move a few dozen bytes: what matters is that they
// run in stream order between the gradient checks and the updates, not their speed. A step of
// one replica launches set_lr once and loss_seed and scalar_accumulate once a micro-batch: the
// optimizer's kernels run decide and finish in their last block (kernels/multi_tensor.cu).
// Bytes: a few dozen a launch (step_state.h: step_decide_gpu_cost, step_finish_gpu_cost,
//   step_set_lr_gpu_cost, loss_seed_gpu_cost, scalar_accumulate_gpu_cost).
// Flops: a handful, the same cost functions (step_decide_gpu_cost: one a flag).
// Precision: the CUTRAIN_HD functions of step_state.h and loss_scale.h, whose arithmetic goes
// through hd.h's once-rounded operations: the same bits as the CPU functions.
#include "kernels/check.h"
#include "kernels/step_state.h"

namespace cutrain {

// The flags are read by a single thread: P is the number of parameter tensors (tens), not
// elements.
__global__ void step_decide_kernel(int P, const int32_t* flags, StepState* s) {
  step_decide(P, flags, s);
}

__global__ void step_finish_kernel(LossScalerConfig c, StepState* s) { step_finish(c, s); }

__global__ void step_set_lr_kernel(StepState* s, double lr) { step_set_lr(s, lr); }

__global__ void loss_seed_kernel(const StepState* s, double share, float* seed) {
  *seed = loss_seed(*s, share);
}

__global__ void scalar_accumulate_kernel(const float* x, double w, double* acc) {
  scalar_accumulate(x, w, acc);
}

void step_decide_gpu(int P, const int32_t* flags, StepState* s, cudaStream_t stream) {
  CHECK(P >= 0, "step_decide: " << P << " parameters");
  step_decide_kernel<<<1, 1, 0, stream>>>(P, flags, s);
  LAUNCH_CHECK();
}

void step_finish_gpu(const LossScalerConfig& c, StepState* s, cudaStream_t stream) {
  step_finish_kernel<<<1, 1, 0, stream>>>(c, s);
  LAUNCH_CHECK();
}

void step_set_lr_gpu(StepState* s, double lr, cudaStream_t stream) {
  step_set_lr_kernel<<<1, 1, 0, stream>>>(s, lr);
  LAUNCH_CHECK();
}

void loss_seed_gpu(const StepState* s, double share, float* seed, cudaStream_t stream) {
  loss_seed_kernel<<<1, 1, 0, stream>>>(s, share, seed);
  LAUNCH_CHECK();
}

void scalar_accumulate_gpu(const float* x, double w, double* acc, cudaStream_t stream) {
  scalar_accumulate_kernel<<<1, 1, 0, stream>>>(x, w, acc);
  LAUNCH_CHECK();
}

}  // namespace cutrain
