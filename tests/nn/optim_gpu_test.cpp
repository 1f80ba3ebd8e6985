// The whole GPU optimizer step (nn/device_step.h: DeviceStep, Optimizer::check_device,
// decide, apply_device, finish) against the CPU path (Optimizer::step + LossScaler::update),
// bit for bit, for sgd, nesterov and adamw with f32 and f16 parameters, over steps with an inf
// in one gradient, a NaN in another, both at once, and a parameter whose gradient was never
// allocated: the weights, masters and optimizer state, the loss scaler's state, the step count
// and the parameter named at fault. A skipped step changes nothing on the device. And the
// host step refuses cuda parameters, the device step CPU ones.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "nn/device_step.h"
#include "nn/gpu_context.h"
#include "nn/loss_scaler.h"
#include "nn/optim.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {
// A model's parameters: conv and fc weights in `dtype` (f16: with fp32 masters), BN's in f32,
// sizes no multiple of a block. Parameter 3 ("head.b") gets no gradient at some steps.
std::vector<VarPtr> make_params(DType dtype) {
  const std::vector<std::pair<std::string, Shape>> specs = {
      {"conv.w", {7, 3, 3, 5}}, {"bn.g", {37}}, {"fc.w", {10, 131}}, {"head.b", {10}}};
  std::vector<VarPtr> out;
  for (size_t i = 0; i < specs.size(); i++) {
    const DType d = i == 1 ? DType::f32 : dtype;
    out.push_back(make_var(cutrain_test::uniform(specs[i].second, d, 500 + i), true,
                           specs[i].first));
  }
  return out;
}

// Copies of the parameters on cuda, same names.
std::vector<VarPtr> to_cuda(const std::vector<VarPtr>& ps) {
  std::vector<VarPtr> out;
  for (const VarPtr& p : ps) out.push_back(make_var(p->value.to(Device::cuda), true, p->name));
  return out;
}

// The CPU bytes of a tensor (from the device if need be: through this thread's stream).
std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor h = t.to(Device::cpu);
  const auto* b = static_cast<const unsigned char*>(h.raw());
  return std::vector<unsigned char>(b, b + h.bytes());
}

// Every byte an optimizer step may change: the parameters, then every state tensor.
std::vector<std::vector<unsigned char>> snapshot(Optimizer& opt) {
  std::vector<std::vector<unsigned char>> out;
  for (const VarPtr& p : opt.params()) out.push_back(bytes_of(p->value));
  for (auto& [name, t] : opt.state_tensors()) out.push_back(bytes_of(*t));
  return out;
}

// What happens to the gradients at each step (1-based): a bad value in a parameter.
struct Poison {
  int step;
  size_t param;
  float value;
};
const std::vector<Poison> kPoison = {
    {2, 2, INFINITY},  // an inf in fc.w
    {3, 0, NAN},       // the next step too, a NaN in conv.w: two skips in a row
    {6, 3, -INFINITY}, // both: head.b and bn.g; bn.g comes first
    {6, 1, NAN},
};
const int kSteps = 8;

// The gradients of step `step` at loss scale `scale`, as backward leaves them (CPU tensors;
// undefined for head.b at steps 1, 3 and 4: a parameter that got no gradient).
std::vector<Tensor> gradients(const std::vector<VarPtr>& ps, int step, double scale) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < ps.size(); i++) {
    if (i == 3 && (step == 1 || step == 3 || step == 4)) {
      out.emplace_back();
      continue;
    }
    const Tensor u = cutrain_test::uniform(ps[i]->value.shape(), DType::f64,
                                           uint64_t(1000 * step) + i, -0.01, 0.01);
    std::vector<float> g = u.to_floats();
    for (float& v : g) v = float(v * scale);
    for (const Poison& p : kPoison)
      if (p.step == step && p.param == i) g[g.size() - 1 - i] = p.value;  // near the tail
    out.push_back(Tensor::from_floats(g, ps[i]->value.shape(), ps[i]->value.dtype()));
  }
  return out;
}

void require_same(const std::vector<std::vector<unsigned char>>& got,
                  const std::vector<std::vector<unsigned char>>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); i++) {
    INFO(what << ": tensor " << i);
    REQUIRE(got[i].size() == want[i].size());
    REQUIRE(std::memcmp(got[i].data(), want[i].data(), got[i].size()) == 0);
  }
}
}  // namespace

TEST_CASE("optim [gpu]: the device step equals Optimizer::step + LossScaler bit for bit") {
  REQUIRE_GPU();
  LossScalerConfig cfg;  // x2 after 2 clean steps, x0.5 on overflow: both happen in 8 steps
  cfg.init = 1024, cfg.min_scale = 1, cfg.max_scale = 4096, cfg.growth_interval = 2;
  for (DType dtype : {DType::f32, DType::f16}) {
    for (const char* kind : {"sgd", "nesterov", "adamw"}) {
      INFO(kind << ", " << dtype_name(dtype));
      Stream stream;
      GpuContextScope on(GpuContext{stream.get()});
      const std::vector<VarPtr> cpu_ps = make_params(dtype);
      const std::vector<VarPtr> gpu_ps = to_cuda(cpu_ps);
      const double wd = std::string(kind) == "adamw" ? 0.05 : 5e-4;
      auto cpu = make_optimizer(kind, cpu_ps, 0.01, 0.9, wd);
      auto gpu = make_optimizer(kind, gpu_ps, 0.01, 0.9, wd);
      REQUIRE(gpu->device() == Device::cuda);
      for (auto& [name, t] : gpu->state_tensors()) REQUIRE(t->device() == Device::cuda);
      require_same(snapshot(*gpu), snapshot(*cpu), "at the start");

      LossScaler scaler(cfg);
      DeviceStep ds(cfg, int(gpu_ps.size()));
      ds.reset(scaler.state(), cpu->steps_taken);
      int skipped = 0;
      for (int step = 1; step <= kSteps; step++) {
        INFO("step " << step);
        const double scale = scaler.scale();
        REQUIRE(ds.read().scaler.scale == scale);  // the scale backward used on both sides
        const std::vector<Tensor> g = gradients(cpu_ps, step, scale);
        for (size_t i = 0; i < g.size(); i++) {
          cpu_ps[i]->grad = g[i].defined() ? g[i].clone() : Tensor();
          gpu_ps[i]->grad = g[i].defined() ? g[i].to(Device::cuda) : Tensor();
        }
        const auto gpu_before = snapshot(*gpu);

        // A rate that changes from step to step: the GPU's comes from the device (set_lr).
        const double lr = 0.01 * (1 + step % 3);
        cpu->lr = lr;
        const bool taken = cpu->step(scale);
        scaler.update(!taken, step);
        ds.set_lr(lr);
        ds.begin();
        gpu->check_device(ds);
        ds.decide();
        gpu->apply_device(ds);
        ds.finish();
        const StepState st = ds.read();
        REQUIRE(st.lr == lr);

        skipped += !taken;
        REQUIRE(st.skip == int32_t(!taken));
        if (taken) {
          REQUIRE(st.first_bad == -1);
        } else {
          REQUIRE(st.first_bad >= 0);
          REQUIRE(gpu->parameter_name(size_t(st.first_bad)) == cpu->first_nonfinite());
          require_same(snapshot(*gpu), gpu_before, "a skipped step");
        }
        REQUIRE(st.scale_used == scale);
        REQUIRE(st.scaler.scale == scaler.scale());
        REQUIRE(st.scaler.clean_steps == scaler.clean_steps());
        REQUIRE(st.scaler.consecutive_skips == scaler.consecutive_skips());
        REQUIRE(st.scaler.skipped_total == scaler.skipped_total());
        REQUIRE(st.steps_taken == cpu->steps_taken);
        REQUIRE(st.t == cpu->steps_taken + 1);
        REQUIRE(st.inv_scale == float(1.0 / scaler.scale()));
        REQUIRE(gpu->steps_taken == 0);  // the device counts; the host copy is the caller's
        require_same(snapshot(*gpu), snapshot(*cpu), "after the step");
        if (!g[3].defined()) {
          // head.b got no gradient: the update allocated a zero one on its device, as the CPU
          // update does (grad_buffer()), even for a skipped step
          REQUIRE(gpu_ps[3]->grad.defined());
          REQUIRE(gpu_ps[3]->grad.device() == Device::cuda);
          for (unsigned char b : bytes_of(gpu_ps[3]->grad)) {
            REQUIRE(b == 0);
          }
          if (taken) {
            REQUIRE(cpu_ps[3]->grad.defined());
          }
        }
      }
      REQUIRE(skipped == 3);
      REQUIRE(cpu->steps_taken == kSteps - 3);
      REQUIRE(scaler.skipped_total() == 3);
    }
  }
}

TEST_CASE("optim [gpu]: the device step's seed is scale x share") {
  REQUIRE_GPU();
  Stream stream;
  GpuContextScope on(GpuContext{stream.get()});
  LossScalerState sc;
  sc.scale = 2048;
  DeviceStep ds(LossScalerConfig{}, 2);
  ds.reset(sc, 7);
  const StepState st = ds.read();
  REQUIRE(st.scaler.scale == 2048);
  REQUIRE(st.steps_taken == 7);
  REQUIRE(st.t == 8);
  REQUIRE(st.inv_scale == 1.0f / 2048);
  REQUIRE(st.first_bad == -1);
  Tensor seed = Tensor::empty({1}, DType::f32, Device::cuda);
  ds.seed(1.0 / 3, seed.data<float>());
  REQUIRE(seed.to(Device::cpu).data<float>()[0] == float(2048 * (1.0 / 3)));
}

TEST_CASE("optim [gpu]: the host step refuses cuda parameters, the device step CPU ones") {
  REQUIRE_GPU();
  Stream stream;
  GpuContextScope on(GpuContext{stream.get()});
  const std::vector<VarPtr> cpu_ps = make_params(DType::f16);
  const std::vector<VarPtr> gpu_ps = to_cuda(cpu_ps);
  auto cpu = make_optimizer("adamw", cpu_ps, 1e-3, 0.9, 0.05);
  auto gpu = make_optimizer("sgd", gpu_ps, 0.1, 0.9, 0);
  DeviceStep ds(LossScalerConfig{}, int(cpu_ps.size()));
  ds.reset(LossScalerState{}, 0);
  REQUIRE_ERROR(gpu->step(1.0), "SGD: step(), all_finite() and apply() run on the CPU");
  REQUIRE_ERROR(gpu->all_finite(1.0), "use check_device / apply_device");
  REQUIRE_ERROR(gpu->apply(1.0), "the parameters are on cuda");
  REQUIRE_ERROR(cpu->check_device(ds), "AdamW: check_device needs parameters on cuda");
  REQUIRE_ERROR(cpu->apply_device(ds), "AdamW: apply_device needs parameters on cuda");
  DeviceStep wrong(LossScalerConfig{}, int(cpu_ps.size()) + 1);
  REQUIRE_ERROR(gpu->check_device(wrong), "the DeviceStep has 5 flags for 4 parameters");
  REQUIRE(gpu->steps_taken == 0);
}
