// `cutrain describe MODEL --step` (train/cli/step_plan.h): one training step walked on the CPU,
// every launch a GPU would queue noted by the code that queues it. The default model's count is
// pinned here: a change that adds launches to the step shows in CI, and one that removes them
// lowers the pin on purpose ([lean-step]: at most 40).
#include <map>
#include <set>
#include <string>

#include "kernels/gpu.h"
#include "nn/model.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "train/cli/step_plan.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

int rows_of(const LaunchPlan& p, const std::string& prefix) {
  int n = 0;
  for (const LaunchPlan::Row& r : p.rows()) n += r.cost.kernel.rfind(prefix, 0) == 0;
  return n;
}

double tensor_flops(const LaunchPlan& p) {
  double f = 0;
  for (const LaunchPlan::Row& r : p.rows())
    if (r.cost.tensor) f += r.cost.flops;
  return f;
}

}  // namespace

TEST_CASE("describe --step: the default model's step at batch 128, fp16, one replica") {
  StepPlanOptions o;  // default, 28x28x1, 10 classes, batch 128, fp16, sgd, the GPU's auto (tc)
  const LaunchPlan p = step_plan(o).plan;

  // The pin. Today's step, counted from the code (kernels/*.h state each entry point's cost).
  // Lower it when a change removes launches; a change that raises it needs a reason.
  // 172 before BatchNorm took in the ReLU after it (each of 5 layers: a ReLU forward, its
  // backward and the memset of its gradient buffer fewer): 157; before the optimizer ran as one
  // check and one update over every parameter (kernels/multi_tensor.h), with the update
  // zeroing the gradients (17 checks, 17 updates, 17 memsets): 108; before backward zeroed the
  // activations' gradients in one buffer (Tape::backward: 14 memsets): 95; before the batch
  // went over in one copy (3) and backward took its seed and the loss its labels without
  // copying them: 91; before BatchNorm's, the bias gradient's and the loss's sums were
  // finished by their kernels' last blocks (10 + 5 + 2 + 1 finalize kernels) and the optimizer's
  // check and update took in the step's decide and finish (2): 72.
  REQUIRE(p.launches() == 72);

  // The phases, in the step's order.
  std::vector<std::string> order;
  for (const LaunchPlan::Row& r : p.rows())
    if (order.empty() || order.back() != r.phase) order.push_back(r.phase);
  const std::vector<std::string> expected = {"input", "record", "input", "forward", "loss",
                                             "backward", "record", "optimizer", "record"};
  REQUIRE(order == expected);

  // Five conv layers on tensor cores: a forward each; four data gradients (conv1's input needs
  // none); five weight gradients.
  REQUIRE(rows_of(p, "conv2d_forward tc") == 5);
  REQUIRE(rows_of(p, "conv2d_backward_data tc") == 4);
  REQUIRE(rows_of(p, "conv2d_backward_filter tc") == 5);
  REQUIRE(rows_of(p, "batchnorm_forward_train") == 5);
  REQUIRE(rows_of(p, "batchnorm_backward_train") == 5);
  REQUIRE(rows_of(p, "relu_forward") == 0);  // fused into the BatchNorm before each
  REQUIRE(rows_of(p, "relu_backward") == 0);
  // The optimizer: one check and one update over all 17 parameters (5 conv weights, 5 x BN
  // gamma and beta, the classifier's weight and bias), the update zeroing the gradients.
  REQUIRE(rows_of(p, "multi_grads_nonfinite") == 1);
  REQUIRE(rows_of(p, "multi_sgd_step") == 1);
  // set_lr, the flags' memset, the check (ending in the decision), the update (ending in the
  // step's finish)
  REQUIRE(p.launches("optimizer") == 4);
  REQUIRE(rows_of(p, "step_decide") == 0);
  REQUIRE(rows_of(p, "step_finish") == 0);

  // The tensor cores' flops are the model's GEMMs, three times over (forward, data gradient,
  // weight gradient), less conv1's data gradient, at 128 images.
  ModelOptions mo;
  mo.classes = 10;
  mo.dtype = DType::f16;
  const auto m = build_model(load_model_spec("default"), mo);
  const double conv1 = 2.0 * 28 * 28 * 32 * 3 * 3 * 1;  // per image
  REQUIRE(tensor_flops(p) == doctest::Approx(128.0 * (3.0 * double(m->forward_flops()) - conv1)));

  // Every launch moves something (a memset of a flag, at least) and costs time on a roofline.
  const Roofline& h100 = roofline_of("h100");
  for (const LaunchPlan::Row& r : p.rows()) {
    INFO(r.phase << " " << r.cost.kernel);
    REQUIRE(r.cost.launches >= 1);
    REQUIRE(r.cost.bytes > 0);
    REQUIRE(ideal_seconds(r.cost, h100) > 0);
  }
}

TEST_CASE("describe --step: the plan follows the precision, the optimizer and the kernels") {
  StepPlanOptions o;
  o.batch = 32;  // (quicker; the kernels are the same)
  o.precision = "fp32";
  o.optimizer = "adamw";
  const LaunchPlan fp32 = step_plan(o).plan;
  // fp32 runs the direct kernels (tc is fp16 only): nothing on tensor cores.
  REQUIRE(rows_of(fp32, "conv2d_forward direct") == 5);
  REQUIRE(tensor_flops(fp32) == 0);
  REQUIRE(rows_of(fp32, "multi_adamw_step") == 1);
  REQUIRE(rows_of(fp32, "multi_sgd_step") == 0);

  o.precision = "fp16";
  o.conv = "cudnn";
  const LaunchPlan cudnn = step_plan(o).plan;
  REQUIRE(rows_of(cudnn, "conv2d_forward cudnn") == 5);
  for (const LaunchPlan::Row& r : cudnn.rows())
    if (r.cost.kernel.rfind("conv2d", 0) == 0) REQUIRE(r.cost.estimated);
}

TEST_CASE("describe --step: the same options give the same plan") {
  StepPlanOptions o;
  o.batch = 16;
  const LaunchPlan a = step_plan(o).plan, b = step_plan(o).plan;
  REQUIRE(a.rows().size() == b.rows().size());
  for (size_t i = 0; i < a.rows().size(); i++) {
    REQUIRE(a.rows()[i].phase == b.rows()[i].phase);
    REQUIRE(a.rows()[i].cost.kernel == b.rows()[i].cost.kernel);
    REQUIRE(a.rows()[i].cost.bytes == b.rows()[i].cost.bytes);
  }
}

TEST_CASE("cutrain describe --step: the table and its totals; bad options refused") {
  TempDir dir;
  const std::string log = dir / "log";
  const Ran r =
      run_cutrain({"describe", "default", "--step", "--batch", "64", "--gpu", "h200"}, log);
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE(r.output.find("NVIDIA H200") != std::string::npos);
  REQUIRE(r.output.find("conv2d_forward tc") != std::string::npos);
  REQUIRE(r.output.find("By phase:") != std::string::npos);
  REQUIRE(r.output.find("Total: ") != std::string::npos);
  REQUIRE(r.output.find("million images/s") != std::string::npos);

  const Ran gpu = run_cutrain({"describe", "default", "--step", "--gpu", "v100"}, log);
  REQUIRE(gpu.status == 2);
  REQUIRE(gpu.output.find("--gpu v100") != std::string::npos);
  REQUIRE(gpu.output.find("h100") != std::string::npos);  // the names it knows
  if (!gpu_usable()) {  // --measure runs the step on a GPU
    const Ran m = run_cutrain({"describe", "default", "--step", "--measure"}, log);
    REQUIRE(m.status == 2);
    REQUIRE(m.output.find("--measure times the step on a GPU") != std::string::npos);
  }
  const Ran rect = run_cutrain({"describe", "default", "--step", "--input", "28x32x1"}, log);
  REQUIRE(rect.status == 2);
  REQUIRE(rect.output.find("square") != std::string::npos);
}
