// The CPU side of kernels/step_state.h: the CUTRAIN_HD functions called as they are, so the
// tests can hold the GPU's results against them.
#include "kernels/step_state.h"

namespace cutrain {

void step_decide_cpu(int P, const int32_t* flags, StepState* s) { step_decide(P, flags, s); }
void step_finish_cpu(const LossScalerConfig& c, StepState* s) { step_finish(c, s); }
void step_set_lr_cpu(StepState* s, double lr) { step_set_lr(s, lr); }
void loss_seed_cpu(const StepState* s, double share, float* seed) { *seed = loss_seed(*s, share); }
template <typename X> void scalar_accumulate_cpu(const X* x, double w, double* acc) {
  scalar_accumulate(x, w, acc);
}
template void scalar_accumulate_cpu<float>(const float*, double, double*);
template void scalar_accumulate_cpu<double>(const double*, double, double*);

}  // namespace cutrain
