// A run's kernel plan (nn/model.h, KernelPlan; train --kernel-plan): the conv kernels of each
// layer and pass on a GPU. Its text round trips and bad text is refused by name; a model takes
// it layer by layer and refuses a name it does not have; the step's plan shows each layer on
// its own kernels; --kernel-plan RUN copies another run's plan; and on the CPU, which runs its
// own kernels, a plan changes nothing at all.
#include <filesystem>
#include <fstream>
#include <string>

#include "nn/model.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/train_fixture.h"
#include "train/cli/step_plan.h"
#include "train/engine/trainer.h"
#include "train/setup/config.h"
#include "train/setup/kernel_choice.h"
#include "train/setup/resolve.h"

using namespace cutrain;
using namespace cutrain_test;

TEST_CASE("kernel plan: text round trip, and bad text refused by name") {
  const KernelPlan p = parse_kernel_plan("conv2=tc,cudnn,cudnn;block3.conv1=cudnn,direct,tc");
  REQUIRE(p.size() == 2);
  REQUIRE(p.at("conv2") == ConvChoice{ConvImpl::tc, ConvImpl::cudnn, ConvImpl::cudnn});
  REQUIRE(p.at("block3.conv1") == ConvChoice{ConvImpl::cudnn, ConvImpl::direct, ConvImpl::tc});
  REQUIRE(parse_kernel_plan(kernel_plan_str(p)) == p);
  REQUIRE(kernel_plan_str(p) == "block3.conv1=cudnn,direct,tc;conv2=tc,cudnn,cudnn");
  REQUIRE(parse_kernel_plan("").empty());
  REQUIRE_ERROR(parse_kernel_plan("conv2"), "'conv2' is not LAYER=FORWARD,DATA,FILTER");
  REQUIRE_ERROR(parse_kernel_plan("conv2=tc,cudnn"), "kernel plan, layer conv2");
  REQUIRE_ERROR(parse_kernel_plan("conv2=tc,winograd,tc"), "expected three of direct, tc and");
  REQUIRE_ERROR(parse_kernel_plan("=tc,tc,tc"), "is not LAYER=FORWARD,DATA,FILTER");
  TrainConfig c;
  c.train = "x", c.kernel_plan = "conv1=tc";
  REQUIRE_ERROR(validate_config(c), "--kernel-plan: kernel plan, layer conv1");
}

TEST_CASE("kernel plan: a model takes it layer by layer, and knows its conv layers' names") {
  ModelOptions o;
  o.shapes_only = true;
  auto resnet = build_model(load_model_spec("resnet"), o);
  const std::vector<ConvLayer> convs = resnet->conv_layers();
  REQUIRE(convs.size() == 1 + 6 * 2 + 2);  // the stem, two per block, two shortcuts
  REQUIRE(convs[0].name == "conv1");
  REQUIRE(convs[1].name == "block1.conv1");
  REQUIRE(convs[5].name == "block3.conv1");
  REQUIRE(convs[7].name == "block3.shortcut");
  REQUIRE(convs[5].shape.stride_h == 2);
  resnet->set_kernel_plan(parse_kernel_plan("block3.conv1=tc,cudnn,tc"));
  REQUIRE(*convs[5].chosen);
  REQUIRE(convs[5].choice->data == ConvImpl::cudnn);
  REQUIRE_FALSE(*convs[6].chosen);
  REQUIRE_ERROR(resnet->set_kernel_plan(parse_kernel_plan("block9.conv1=tc,tc,tc")),
                "'block9.conv1', which is not a conv layer of model resnet (conv1, block1.conv1");
}

TEST_CASE("kernel plan: the step's plan runs each named layer on its own kernels") {
  StepPlanOptions o;
  o.batch = 16;
  o.kernel_plan = "conv2=tc,cudnn,cudnn";
  const LaunchPlan p = step_plan(o).plan;
  std::vector<std::string> convs;
  for (const LaunchPlan::Row& r : p.rows())
    if (r.cost.kernel.rfind("conv2d", 0) == 0) convs.push_back(r.cost.kernel);
  // forward conv1..conv5, then backward conv5..conv1 (data, filter; conv1 has no data pass)
  const std::vector<std::string> want = {
      "conv2d_forward tc",          "conv2d_forward tc",          "conv2d_forward tc",
      "conv2d_forward tc",          "conv2d_forward tc",          "conv2d_backward_data tc",
      "conv2d_backward_filter tc",  "conv2d_backward_data tc",    "conv2d_backward_filter tc",
      "conv2d_backward_data tc",    "conv2d_backward_filter tc",  "conv2d_backward_data cudnn",
      "conv2d_backward_filter cudnn", "conv2d_backward_filter tc"};
  REQUIRE(convs == want);
}

TEST_CASE("kernel plan: --kernel-plan RUN copies that run's plan; a plan changes nothing on "
          "the CPU") {
  TempDir dir;
  TrainConfig a = tiny_run_config(dir / "a", 64, 1);
  a.kernel_plan = "conv2=cudnn,cudnn,tc";
  std::filesystem::create_directories(dir / "a");
  std::ofstream(dir / "a/config.json") << config_to_json_text(a);

  TrainConfig b = tiny_run_config(dir / "b", 64, 1);
  b.kernel_plan = dir / "a";
  const std::vector<std::string> notes = resolve_config(b);
  REQUIRE(b.kernel_plan == "conv2=cudnn,cudnn,tc");
  bool said = false;
  for (const std::string& n : notes) said = said || n.find("kernel plan from") != std::string::npos;
  REQUIRE(said);

  TrainConfig none = tiny_run_config(dir / "c", 64, 1);
  none.kernel_plan = dir / "c";  // a folder without a run in it
  std::filesystem::create_directories(dir / "c");
  REQUIRE_ERROR(resolve_config(none), "no config.json there");
  TrainConfig unknown = tiny_run_config(dir / "d", 64, 1);
  unknown.kernel_plan = "conv7=tc,tc,tc";
  REQUIRE_ERROR(resolve_config(unknown), "'conv7', which is not a conv layer of model tiny");

  // The CPU runs its own kernels: the same bits with and without a plan.
  RunDevice cpu;
  cpu.dtype = DType::f32;
  TrainConfig plain = tiny_run_config(dir / "e", 64, 1);
  Trainer x(plain, cpu), y(b, cpu);
  for (int s = 0; s < 2; s++) {
    const StepResult p = x.step(), q = y.step();
    REQUIRE(p.loss == q.loss);
  }
  require_same_state(x.snapshot(), y.snapshot());
}

TEST_CASE("kernel plan: --conv auto chooses nothing on the CPU, on resume, or with a plan given") {
  TempDir dir;
  TrainConfig c = tiny_run_config(dir / "a", 64, 1);
  RunDevice cpu;
  std::vector<std::string> notes;
  choose_conv_kernels(c, cpu, false, notes);
  REQUIRE(c.kernel_plan.empty());
  REQUIRE(notes.empty());
  RunDevice gpu;
  gpu.device = Device::cuda;
  c.kernel_plan = "conv1=tc,tc,tc";
  choose_conv_kernels(c, gpu, false, notes);  // given: kept (no GPU is touched)
  REQUIRE(c.kernel_plan == "conv1=tc,tc,tc");
  c.kernel_plan.clear();
  choose_conv_kernels(c, gpu, true, notes);   // resuming: the checkpoint's (none) stands
  REQUIRE(c.kernel_plan.empty());
  REQUIRE(notes.empty());
}
