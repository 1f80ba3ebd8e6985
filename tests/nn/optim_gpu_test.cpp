// The one optimizer step protocol (nn/device_step.h, nn/optim.h: set_lr, begin, check,
// decide, apply, finish) on a cuda DeviceStep against the same protocol on a CPU one
// (take_step), bit for bit, for sgd, nesterov and adamw with f32 and f16 parameters, over
// steps with an inf in one gradient, a NaN in another, both at once, and a parameter whose
// gradient was never allocated: the weights, masters and optimizer state, the whole step state
// (the loss scaler's state, the step count, the decision and the parameter named at fault).
// A skipped step changes nothing on the device. With --ema's averages (of the parameters and
// of a statistic that changes every step) the same, in the update's launch. The seed and a
// replica's decide_into give the CPU's bits. And an optimizer refuses a step state on the other device, or of another size.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "nn/device_step.h"
#include "nn/context.h"
#include "nn/loss_scaler.h"
#include "nn/optim.h"
#include "tests/kernels/step_state_compare.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::require_same_state;

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
std::vector<VarPtr> to_cuda(const std::vector<VarPtr>& ps, const Context& ctx) {
  std::vector<VarPtr> out;
  for (const VarPtr& p : ps) out.push_back(make_var(p->value.to(ctx), true, p->name));
  return out;
}

// The CPU bytes of a tensor (from the device if need be: after its stream's work).
std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor h = t.to(Context::cpu());
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

// The parameter the decision names at `step`: the first poisoned one in parameter order.
int first_poisoned(int step) {
  int first = -1;
  for (const Poison& p : kPoison)
    if (p.step == step && (first < 0 || int(p.param) < first)) first = int(p.param);
  return first;
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

TEST_CASE("optim [gpu]: the step on a cuda DeviceStep equals the CPU DeviceStep's bit for bit") {
  REQUIRE_GPU();
  LossScalerConfig cfg;  // x2 after 2 clean steps, x0.5 on overflow: both happen in 8 steps
  cfg.init = 1024, cfg.min_scale = 1, cfg.max_scale = 4096, cfg.growth_interval = 2;
  for (DType dtype : {DType::f32, DType::f16}) {
    for (const char* kind : {"sgd", "nesterov", "adamw"})
    for (double ema : {0.0, 0.95}) {
      INFO(kind << ", " << dtype_name(dtype) << (ema > 0 ? ", --ema" : ""));
      Stream stream;
      const Context ctx = Context::cuda(stream.get());  // every GPU tensor and kernel here
      const std::vector<VarPtr> cpu_ps = make_params(dtype);
      const std::vector<VarPtr> gpu_ps = to_cuda(cpu_ps, ctx);
      const double wd = std::string(kind) == "adamw" ? 0.05 : 5e-4;
      auto cpu = make_optimizer(kind, cpu_ps, 0.01, 0.9, wd);
      auto gpu = make_optimizer(kind, gpu_ps, 0.01, 0.9, wd);
      Tensor cpu_stat = cutrain_test::uniform({37}, DType::f32, 77, 0.5, 2);
      Tensor gpu_stat = cpu_stat.to(ctx);
      if (ema > 0) {
        cpu->enable_ema(ema, {{"bn.running_var", &cpu_stat}});
        gpu->enable_ema(ema, {{"bn.running_var", &gpu_stat}});
      }
      REQUIRE(gpu->device() == Device::cuda);
      for (auto& [name, t] : gpu->state_tensors()) REQUIRE(t->device() == Device::cuda);
      require_same(snapshot(*gpu), snapshot(*cpu), "at the start");

      DeviceStep cds(cfg, int(cpu_ps.size()), Context::cpu());
      DeviceStep gds(cfg, int(gpu_ps.size()), ctx);
      cds.reset(loss_scaler_start(cfg), 0);
      gds.reset(loss_scaler_start(cfg), 0);
      require_same_state(gds.read(), cds.read());
      int skipped = 0;
      for (int step = 1; step <= kSteps; step++) {
        INFO("step " << step);
        const LossScalerState scaler_before = cds.read().scaler;
        const double scale = scaler_before.scale;
        REQUIRE(gds.read().scaler.scale == scale);  // the scale backward used on both sides
        const std::vector<Tensor> g = gradients(cpu_ps, step, scale);
        const Tensor stat = cutrain_test::uniform({37}, DType::f32, 90 + uint64_t(step), 0.5, 2);
        cpu_stat.copy_from(stat);  // as the step's forward moves BatchNorm's statistics
        gpu_stat.copy_from(stat.to(ctx));
        for (size_t i = 0; i < g.size(); i++) {
          cpu_ps[i]->grad = g[i].defined() ? g[i].clone() : Tensor();
          gpu_ps[i]->grad = g[i].defined() ? g[i].to(ctx) : Tensor();
        }
        const auto gpu_before = snapshot(*gpu);

        // A rate that changes from step to step: both read it from their step state (set_lr).
        const double lr = 0.01 * (1 + step % 3);
        // The CPU: the whole step at once. The GPU: the same calls, queued, nothing read back
        // until the state is read below.
        const bool taken = take_step(*cpu, cds, lr);
        gds.set_lr(lr);
        gds.begin();
        if (step % 2) {  // the replicas' way: the decision a kernel of its own
          gpu->check(gds);
          gds.decide();
        } else {         // one replica's: the decision in the check's last block
          gpu->check_and_decide(gds);
        }
        gpu->apply(gds);  // the finish in the update's last block
        const StepState st = gds.read();
        require_same_state(st, cds.read());
        REQUIRE(st.lr == lr);

        skipped += !taken;
        REQUIRE(st.skip == int32_t(!taken));
        REQUIRE(st.first_bad == first_poisoned(step));
        if (!taken) {
          const char* names[] = {"conv.w", "bn.g", "fc.w", "head.b"};  // what a report says
          REQUIRE(gpu->parameter_name(size_t(st.first_bad)) == names[st.first_bad]);
          require_same(snapshot(*gpu), gpu_before, "a skipped step");
          loss_scaler_check(cfg, st.scaler, step, gpu->parameter_name(size_t(st.first_bad)));
        }
        REQUIRE(st.scale_used == scale);
        const LossScalerState scaler_want = loss_scaler_next(cfg, scaler_before, !taken);
        REQUIRE(st.scaler.scale == scaler_want.scale);
        REQUIRE(st.scaler.clean_steps == scaler_want.clean_steps);
        REQUIRE(st.scaler.consecutive_skips == scaler_want.consecutive_skips);
        REQUIRE(st.scaler.skipped_total == scaler_want.skipped_total);
        REQUIRE(st.t == st.steps_taken + 1);
        REQUIRE(st.inv_scale == float(1.0 / st.scaler.scale));
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
      REQUIRE(gds.read().steps_taken == kSteps - 3);
      REQUIRE(gds.read().scaler.skipped_total == 3);
      REQUIRE(gds.read().peak_skips == 2);  // steps 2 and 3
    }
  }
}

TEST_CASE("optim [gpu]: the cuda step state's reset, seed and decide_into give the CPU's bits") {
  REQUIRE_GPU();
  Stream stream;
  const Context ctx = Context::cuda(stream.get());  // every GPU tensor and kernel here
  LossScalerState sc;
  sc.scale = 2048;
  DeviceStep gds(LossScalerConfig{}, 3, ctx), cds(LossScalerConfig{}, 3, Context::cpu());
  gds.reset(sc, 7);
  cds.reset(sc, 7);
  const StepState st = gds.read();
  REQUIRE(st.scaler.scale == 2048);
  REQUIRE(st.steps_taken == 7);
  REQUIRE(st.t == 8);
  REQUIRE(st.inv_scale == 1.0f / 2048);
  REQUIRE(st.first_bad == -1);
  require_same_state(st, cds.read());
  for (double share : {1.0 / 3, 0.1, 1.0}) {
    INFO("share " << share);
    const Tensor seed = gds.seed(share, DType::f32);
    REQUIRE(seed.device() == Device::cuda);
    const float got = seed.to(Context::cpu()).data<float>()[0];
    const float want = cds.seed(share, DType::f32).data<float>()[0];
    REQUIRE(std::memcmp(&got, &want, sizeof got) == 0);
    REQUIRE(got == float(2048 * share));
  }
  REQUIRE_ERROR(gds.seed(0.5, DType::f64), "DeviceStep::seed: a GPU loss is f32, got f64");

  // a replica's own decision, before its flags are OR-ed with the others': the state unchanged
  const std::vector<int32_t> flags = {0, 1, 1};
  copy_async(gds.flags(), flags.data(), flags.size() * sizeof(int32_t), stream.get());
  for (int i = 0; i < 3; i++) *cds.flag(i) = flags[size_t(i)];
  const StepState fresh = step_state_make(LossScalerState{}, 0);
  DeviceBuffer mine(sizeof(StepState));
  copy_async(mine.data(), &fresh, sizeof fresh, stream.get());
  gds.decide_into(static_cast<StepState*>(mine.data()));
  StepState host_mine = fresh;
  cds.decide_into(&host_mine);
  stream.synchronize();  // flags and fresh, the copies' sources, outlived them
  StepState got_mine;
  copy_sync(&got_mine, mine.data(), sizeof got_mine);
  require_same_state(got_mine, host_mine);
  REQUIRE(got_mine.skip == 1);
  REQUIRE(got_mine.first_bad == 1);
  require_same_state(gds.read(), st);
}

TEST_CASE("optim [gpu]: an optimizer refuses a step state on the other device, or of another "
          "size") {
  REQUIRE_GPU();
  Stream stream;
  const Context ctx = Context::cuda(stream.get());  // every GPU tensor and kernel here
  const std::vector<VarPtr> cpu_ps = make_params(DType::f16);
  const std::vector<VarPtr> gpu_ps = to_cuda(cpu_ps, ctx);
  auto cpu = make_optimizer("adamw", cpu_ps, 1e-3, 0.9, 0.05);
  auto gpu = make_optimizer("sgd", gpu_ps, 0.1, 0.9, 0);
  const std::vector<Tensor> g = gradients(cpu_ps, 1, 1024);
  for (size_t i = 0; i < g.size(); i++) {
    cpu_ps[i]->grad = g[i].defined() ? g[i].clone() : Tensor();
    gpu_ps[i]->grad = g[i].defined() ? g[i].to(ctx) : Tensor();
  }
  const auto cpu_before = snapshot(*cpu), gpu_before = snapshot(*gpu);
  DeviceStep cds(LossScalerConfig{}, int(cpu_ps.size()), Context::cpu());
  DeviceStep gds(LossScalerConfig{}, int(gpu_ps.size()), ctx);
  cds.reset(LossScalerState{}, 0);
  gds.reset(LossScalerState{}, 0);
  REQUIRE_ERROR(gpu->check(cds), "SGD: the step state is on cpu, the parameters on cuda");
  REQUIRE_ERROR(gpu->apply(cds), "SGD: the step state is on cpu, the parameters on cuda");
  REQUIRE_ERROR(take_step(*gpu, cds, 0.1), "SGD: the step state is on cpu, the parameters on cuda");
  REQUIRE_ERROR(cpu->check(gds), "AdamW: the step state is on cuda, the parameters on cpu");
  REQUIRE_ERROR(cpu->apply(gds), "AdamW: the step state is on cuda, the parameters on cpu");
  DeviceStep wrong(LossScalerConfig{}, int(gpu_ps.size()) + 1, ctx);
  wrong.reset(LossScalerState{}, 0);
  REQUIRE_ERROR(gpu->check(wrong), "SGD: the DeviceStep has 5 flags for 4 parameters");
  REQUIRE_ERROR(gpu->apply(wrong), "SGD: the DeviceStep has 5 flags for 4 parameters");
  require_same(snapshot(*cpu), cpu_before, "the CPU optimizer, refused");
  require_same(snapshot(*gpu), gpu_before, "the GPU optimizer, refused");
  REQUIRE(gds.read().steps_taken == 0);
  REQUIRE(cds.read().steps_taken == 0);
}
