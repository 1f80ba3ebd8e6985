// defines: Optimizer (the interface the training loop and the checkpoints use), SGD, AdamW and
// make_optimizer(name, ...).
//
// Each parameter gets a master copy in the accumulation dtype (fp32 for fp16 parameters; for
// f32/f64 parameters the master *is* the parameter) and per-optimizer state (a velocity, or
// Adam's two moments), all in the accumulation dtype. step(loss_scale) divides the accumulated
// gradients by the loss scale, and either updates every parameter or, when any gradient is
// inf/NaN, none of them and returns false: the step is skipped as a whole, and
// first_nonfinite() names the parameter that overflowed.
//
//   auto opt = make_optimizer("adamw", model->parameters(), 1e-3, 0.9, 0.05);
//   opt->lr = lr_at(schedule, step);
//   const bool taken = opt->step(scaler.scale());
//   if (!taken) report(opt->first_nonfinite());
//   scaler.update(!taken, step);
//   opt->zero_grad();
//
// Checkpoints: state_tensors() lists, in parameter order, every tensor besides the parameters
// themselves that a resume needs: "<param>.master" (only where separate from the parameter),
// "<param>.momentum" (SGD), "<param>.adam_m" and "<param>.adam_v" (AdamW); plus steps_taken
// (AdamW's bias correction depends on it). Restore by writing into those tensors (same shape
// and dtype) and setting steps_taken; the parameters (the fp16 working copies) are saved and
// restored with the model.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/sgd.h"
#include "nn/autograd.h"
#include "nn/device_step.h"

namespace cutrain {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;  // the masters would be shared: never what is meant
  Optimizer& operator=(const Optimizer&) = delete;

  // Unscales the gradients by 1/loss_scale, and if every one is finite updates every
  // parameter, counts the step and returns true. Otherwise changes nothing (weights, state,
  // steps_taken), remembers the first parameter at fault and returns false. A parameter whose
  // gradient was never allocated counts as a zero gradient.
  bool step(double loss_scale = 1.0);
  void zero_grad();

  // step() in its two halves, for data-parallel replicas, which must agree on the decision
  // before any of them updates: all_finite() checks the unscaled gradients (and remembers the
  // first parameter at fault), apply() updates and counts the step without checking.
  // step(s) is `if (!all_finite(s)) return false; apply(s); return true;`.
  bool all_finite(double loss_scale);
  void apply(double loss_scale);

  // The name of the first parameter, in parameter order, whose unscaled gradient held an inf
  // or NaN at the last step() ("parameter 3" when unnamed); empty if that step was taken or
  // none has been tried yet. Kept until the next step(), so it survives zero_grad().
  const std::string& first_nonfinite() const { return first_nonfinite_; }

  // GPU (parameters on cuda; nn/device_step.h has the whole step). Queued on this thread's
  // GpuContext stream; nothing is read back. check_device: grads_nonfinite_gpu of every
  // parameter into ds.flag(i) (a parameter without a gradient buffer is skipped). apply_device:
  // the update kernels, unscaling by ds.inv_scale(), doing nothing when ds.skip() is set, at
  // the learning rate ds.lr() (DeviceStep::set_lr; `lr` is the CPU's), AdamW at step ds.t().
  // steps_taken and first_nonfinite() are not touched: the device counts the steps
  // (StepState::steps_taken), and the caller copies them back when it learns them.
  void check_device(DeviceStep& ds);
  void apply_device(DeviceStep& ds);
  Device device() const { return params_[0]->value.device(); }
  // The name of parameter i ("parameter 3" when unnamed), as first_nonfinite() gives it.
  std::string parameter_name(size_t i) const { return param_name(i); }

  virtual std::vector<std::pair<std::string, Tensor*>> state_tensors() = 0;
  virtual std::string name() const = 0;  // "sgd", "nesterov", "adamw"
  const std::vector<VarPtr>& params() const { return params_; }

  double lr;                  // may be changed between steps (schedules); must be >= 0
  int64_t steps_taken = 0;    // steps actually taken (skipped ones not counted)

 protected:
  Optimizer(const char* who, std::vector<VarPtr> params, double lr);
  // Called by step() once every gradient is known to be finite; steps_taken is not yet
  // incremented (the step being taken is number steps_taken + 1).
  virtual void update(double inv_scale) = 0;
  virtual void update_device(DeviceStep& ds) = 0;  // apply_device's kernels
  // The "<param>.master" entries: only masters that are separate from their parameter.
  void add_masters(std::vector<std::pair<std::string, Tensor*>>& out, size_t i);
  Tensor& grad(size_t i) { return params_[i]->grad_buffer(); }
  // The parameter's storage when it is a working copy separate from its master, else null.
  template <typename T> T* working(size_t i) const {
    return masters_[i].raw() != params_[i]->value.raw() ? params_[i]->value.template data<T>()
                                                        : nullptr;
  }
  // Zero tensors of the accumulation dtype, one per parameter (velocities, moments).
  std::vector<Tensor> acc_zeros() const;
  std::string param_name(size_t i) const;
  void check_host_step() const;  // the parameters are on the CPU, or a clear error

  const char* who_;              // "SGD" / "AdamW", the prefix of error messages
  std::vector<VarPtr> params_;
  std::vector<Tensor> masters_;  // acc dtype; shares storage with the parameter when equal

 private:
  std::string first_nonfinite_;
};

// SGD with momentum (optionally Nesterov) and L2 weight decay: the math is in kernels/sgd.h.
class SGD : public Optimizer {
 public:
  SGD(std::vector<VarPtr> params, SgdParams hp);
  std::vector<std::pair<std::string, Tensor*>> state_tensors() override;
  std::string name() const override { return hp_.nesterov ? "nesterov" : "sgd"; }
  const SgdParams& hyper() const { return hp_; }  // hp.lr is the initial lr; see lr

 private:
  void update(double inv_scale) override;
  void update_device(DeviceStep& ds) override;
  SgdParams hp_;
  std::vector<Tensor> velocity_;
};

// AdamW: Adam with decoupled weight decay; the math is in kernels/adamw.h.
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<VarPtr> params, AdamWParams hp);
  std::vector<std::pair<std::string, Tensor*>> state_tensors() override;
  std::string name() const override { return "adamw"; }
  const AdamWParams& hyper() const { return hp_; }  // hp.lr is the initial lr; see lr

 private:
  void update(double inv_scale) override;
  void update_device(DeviceStep& ds) override;
  AdamWParams hp_;
  std::vector<Tensor> m_, v_;
};

// name: "sgd" (momentum), "nesterov" (SGD with Nesterov momentum) or "adamw" (betas 0.9,
// 0.999, eps 1e-8; `momentum` is not used). Throws naming the choices for any other name.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<VarPtr> params,
                                          double lr, double momentum, double weight_decay);

}  // namespace cutrain
