// defines: Optimizer (the interface the training loop and the checkpoints use), SGD, AdamW,
// make_optimizer(name, ...) and take_step.
//
// Each parameter gets a master copy in the accumulation dtype (fp32 for fp16 parameters; for
// f32/f64 parameters the master *is* the parameter) and per-optimizer state (a velocity, or
// Adam's two moments), all in the accumulation dtype. One protocol on every device, driven by
// the step state where the model lives (nn/device_step.h): check() flags each parameter whose
// gradient, unscaled, holds an inf/NaN; the DeviceStep decides (skip the whole step when any
// flag is set, naming the first parameter); apply() updates every parameter at the state's
// learning rate, or, told to skip, changes nothing at all. On the CPU each call runs at once,
// on a GPU it is queued and the host never waits.
//
//   auto opt = make_optimizer("adamw", model->parameters(), 1e-3, 0.9, 0.05);
//   DeviceStep ds(scaler_config, int(opt->params().size()), Context::cpu());
//   const bool taken = take_step(*opt, ds, lr_at(schedule, step));   // = the sequence below
//   if (!taken) report(opt->parameter_name(size_t(ds.read().first_bad)));
//   // the gradients are zero again: the next backward accumulates into them
//
// The weights' moving average (--ema, kernels/ema.h): after enable_ema(decay, buffers), apply()
// moves an average of every parameter's master weights and of each buffer (BatchNorm's running
// statistics) on every step taken, never on a skipped one; on a GPU inside the update's launch.
//
// Checkpoints: state_tensors() lists, in parameter order, every tensor besides the parameters
// themselves that a resume needs: "<param>.master" (only where separate from the parameter),
// "<param>.momentum" (SGD), "<param>.adam_m" and "<param>.adam_v" (AdamW); then, with an
// average, "<param>.ema" for every parameter and "<buffer>.ema" for every buffer. The step count
// (AdamW's bias correction depends on it) and the loss scaler are the DeviceStep's state. The
// parameters (the fp16 working copies) are saved and restored with the model.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/multi_tensor.h"
#include "kernels/sgd.h"
#include "nn/autograd.h"
#include "nn/device_step.h"

namespace cutrain {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;  // the masters would be shared: never what is meant
  Optimizer& operator=(const Optimizer&) = delete;

  // Every parameter's gradient unscaled by the state's inv_scale: ds.flag(i) raised where it
  // holds an inf or NaN (never cleared: DeviceStep::begin does that). A parameter whose
  // gradient was never allocated counts as a zero gradient. Replicas then OR their flags and
  // call ds.decide().
  void check(DeviceStep& ds);
  // check, then ds.decide(): one replica's step. On a GPU one launch, the decision made by
  // the check's last block.
  void check_and_decide(DeviceStep& ds);
  // Unless the state says skip (DeviceStep::decide): every parameter updated at the state's
  // learning rate (DeviceStep::set_lr), unscaling by its inv_scale, AdamW at step t. Told to
  // skip, nothing changes at all. Either way the gradients are zeroed after: the next
  // backward accumulates into zeros. Then the step is finished (DeviceStep::finish: the loss
  // scaler's transition, the step count), on a GPU by the update's last block.
  // On a GPU check and apply are one launch each over every parameter (kernels/multi_tensor.h:
  // the table is built at the first step); on the CPU a loop of the per-tensor references.
  void apply(DeviceStep& ds);
  void zero_grad();

  // Keeps the moving average from now on (decay in (0, 1)): of every parameter's master
  // weights, and of each named buffer (in the accumulation dtype, on the parameters' device;
  // the pointers must outlive the optimizer). Each average starts as a copy of its tensor.
  // Called once, before the first step.
  void enable_ema(double decay, std::vector<std::pair<std::string, Tensor*>> buffers);
  double ema_decay() const { return ema_decay_; }  // 0: no average
  // The averages (ema_decay() > 0): of parameter i (its master's dtype and shape), and of each
  // buffer by its name.
  const Tensor& param_average(size_t i) const { return param_ema_[i]; }
  const std::vector<std::pair<std::string, Tensor>>& buffer_averages() const {
    return buffer_ema_;
  }

  Device device() const { return params_[0]->value.device(); }
  // The name of parameter i ("parameter 3" when unnamed): StepState::first_bad's name.
  std::string parameter_name(size_t i) const;

  virtual std::vector<std::pair<std::string, Tensor*>> state_tensors() = 0;
  virtual std::string name() const = 0;  // "sgd", "nesterov", "adamw"
  const std::vector<VarPtr>& params() const { return params_; }

 protected:
  Optimizer(const char* who, std::vector<VarPtr> params, double lr);
  // apply()'s update on the CPU, the step known to be taken: s holds inv_scale, lr and t.
  virtual void update_cpu(const StepState& s) = 0;
  // apply() on a GPU: the update of every parameter and the gradients zeroed, one launch over
  // the table (the kernels read ds's device pointers and skip on their own), ending in
  // *finish (kernels/multi_tensor.h).
  virtual void update_gpu(DeviceStep& ds, const ParamTable& table, const StepFinish& finish) = 0;
  // What update_gpu queues (kernels/launch_plan.h).
  virtual LaunchCost update_cost() const = 0;  // with the step's finish folded in
  // The optimizer's state of parameter i into its table slot (state1, state2).
  virtual void fill_state(size_t i, ParamSlot& s) = 0;
  // The sizes the multi-tensor kernels' costs count from.
  ParamTotals totals() const;
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
  // The "<param>.ema" and "<buffer>.ema" entries (none without an average): state_tensors()
  // ends with them.
  void add_averages(std::vector<std::pair<std::string, Tensor*>>& out);
  void check_step(const DeviceStep& ds) const;  // ds is this optimizer's: device, flags
  void check_flags(DeviceStep& ds, bool decide);  // check(), then ds.decide() when asked

  const char* who_;              // "SGD" / "AdamW", the prefix of error messages
  std::vector<VarPtr> params_;
  std::vector<Tensor> masters_;  // acc dtype; shares storage with the parameter when equal

 private:
  // GPU: the table of every parameter (kernels/multi_tensor.h), built again only when a tensor
  // moved (a gradient allocated or replaced). Missing gradients are allocated first (zeros).
  const ParamTable& table(const DeviceStep& ds);
  ParamTable table_;
  double ema_decay_ = 0;
  std::vector<Tensor> param_ema_;  // one per parameter, the master's dtype
  std::vector<Tensor*> buffers_;   // the tensors averaged besides the parameters
  std::vector<std::pair<std::string, Tensor>> buffer_ema_;
};

// SGD with momentum (optionally Nesterov) and L2 weight decay: the math is in kernels/sgd.h.
class SGD : public Optimizer {
 public:
  SGD(std::vector<VarPtr> params, SgdParams hp);
  std::vector<std::pair<std::string, Tensor*>> state_tensors() override;
  std::string name() const override { return hp_.nesterov ? "nesterov" : "sgd"; }
  const SgdParams& hyper() const { return hp_; }  // hp.lr is the initial lr (the state's is used)

 private:
  void update_cpu(const StepState& s) override;
  void update_gpu(DeviceStep& ds, const ParamTable& table, const StepFinish& finish) override;
  LaunchCost update_cost() const override;
  void fill_state(size_t i, ParamSlot& s) override;
  SgdParams hp_;
  std::vector<Tensor> velocity_;
};

// AdamW: Adam with decoupled weight decay; the math is in kernels/adamw.h.
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<VarPtr> params, AdamWParams hp);
  std::vector<std::pair<std::string, Tensor*>> state_tensors() override;
  std::string name() const override { return "adamw"; }
  const AdamWParams& hyper() const { return hp_; }  // hp.lr is the initial lr (the state's is used)

 private:
  void update_cpu(const StepState& s) override;
  void update_gpu(DeviceStep& ds, const ParamTable& table, const StepFinish& finish) override;
  LaunchCost update_cost() const override;
  void fill_state(size_t i, ParamSlot& s) override;
  AdamWParams hp_;
  std::vector<Tensor> m_, v_;
};

// name: "sgd" (momentum), "nesterov" (SGD with Nesterov momentum) or "adamw" (betas 0.9,
// 0.999, eps 1e-8; `momentum` is not used). Throws naming the choices for any other name.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<VarPtr> params,
                                          double lr, double momentum, double weight_decay);

// One whole step, waiting for its decision: ds.set_lr(lr), begin, opt.check, decide, opt.apply,
// finish; true when it was taken (the state's skip is 0). For tests and tools: the trainer
// queues the parts (replicas OR their flags between check and decide) and reads the decision
// later.
bool take_step(Optimizer& opt, DeviceStep& ds, double lr);

}  // namespace cutrain
