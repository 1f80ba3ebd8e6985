// defines: SGD, the optimizer over a model's parameters.
//
// Each parameter gets a master copy in the accumulation dtype (fp32 for fp16 parameters; for
// f32/f64 parameters the master *is* the parameter) and a velocity. step(loss_scale) divides
// the accumulated gradients by the loss scale, and either updates every parameter or, when any
// gradient is inf/NaN, none of them and returns false: the step is skipped as a whole.
#pragma once
#include <vector>

#include "kernels/sgd.h"
#include "nn/autograd.h"

namespace cutrain {

class SGD {
 public:
  SGD(std::vector<VarPtr> params, SgdParams hp);

  bool step(double loss_scale = 1.0);
  void zero_grad();

  SgdParams hp;  // lr may be changed between steps (schedules)

 private:
  struct Slot {
    VarPtr param;
    Tensor master;    // acc dtype; shares storage with param->value when the dtypes agree
    Tensor velocity;  // acc dtype
  };
  std::vector<Slot> slots_;
};

}  // namespace cutrain
