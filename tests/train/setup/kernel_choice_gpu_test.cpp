// --conv auto on a GPU (train/setup/kernel_choice.h): every conv layer's passes timed against
// cuDNN and a choice made for each (the first layer has no data gradient); a run on the plan
// trains, and two runs on one plan give the same bits. Skips without a GPU or without cuDNN.
#include <string>
#include <vector>

#include "kernels/vendor.h"
#include "nn/model.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/train_fixture.h"
#include "train/engine/trainer.h"
#include "train/setup/kernel_choice.h"

using namespace cutrain;
using namespace cutrain_test;

TEST_CASE("kernel choice [gpu]: --conv auto times each layer's passes and keeps a choice each") {
  REQUIRE_GPU();
#if defined(CUTRAIN_SIM)  // the GPU simulator's build (sim/README.md)
  if (!cudnn_built()) return skip("cuDNN is not simulated: nothing to choose between");
#else
  if (!cudnn_built()) return skip("this build has no cuDNN: nothing to choose between");
#endif
  TempDir dir;
  RunDevice gpu;
  gpu.device = Device::cuda;
  gpu.dtype = DType::f16;
  TrainConfig c = tiny_run_config(dir / "a", 64, 1);
  std::vector<std::string> notes;
  choose_conv_kernels(c, gpu, false, notes);
  INFO(c.kernel_plan);
  const KernelPlan plan = parse_kernel_plan(c.kernel_plan);
  REQUIRE(plan.size() == 2);  // the tiny model's conv1 and conv2
  REQUIRE(plan.at("conv1").data == ConvImpl::tc);  // no data gradient there: the own kernel
  for (const auto& [name, choice] : plan)
    for (ConvImpl i : {choice.forward, choice.data, choice.filter})
      REQUIRE((i == ConvImpl::tc || i == ConvImpl::cudnn));
  REQUIRE(notes.size() == 3);  // the heading and a line per layer
  REQUIRE(notes[1].find("conv1: forward tc") != std::string::npos);
  REQUIRE(notes[1].find("data -") != std::string::npos);

  Trainer x(c, gpu), y(c, gpu);
  for (int s = 0; s < 3; s++) {
    const StepResult p = x.step(), q = y.step();
    REQUIRE(p.loss == q.loss);
  }
  require_same_state(x.snapshot(), y.snapshot());
}
