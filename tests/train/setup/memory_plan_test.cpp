// The memory plan (train/setup/memory_plan.h): its numbers from the shapes, a run too big for the
// machine refused before it allocates (in the library and by the program), and the messages.
#include "data/units.h"
#include "nn/model.h"
#include "nn/model_spec.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/train_fixture.h"
#include "train/cli/cli.h"
#include "train/setup/memory_plan.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {
int64_t bytes_of(const std::vector<MemoryItem>& items, const std::string& what) {
  for (const MemoryItem& i : items)
    if (i.what == what) return i.bytes;
  return -1;
}
}  // namespace

TEST_CASE("memory plan: the batch ring, activations and parameters, from the shapes alone") {
  TempDir dir;
  const TrainConfig c = tiny_run_config(dir / "run");  // 28x28x1, batch 32 in 2 micro-batches
  const MemoryPlan p = plan_memory(c, Device::cpu, DType::f32);
  REQUIRE(p.device.empty());
  // The training ring holds uncut images: the 28x28 window and --pad 3 on each side.
  REQUIRE(bytes_of(p.host, "batch ring") == 4 * 32 * 34 * 34);
  REQUIRE(bytes_of(p.host, "evaluation ring") == 4 * 256 * 28 * 28);
  // A shapes-only model has the real one's rows and parameter count, and no parameter memory.
  ModelOptions mo;
  mo.H = mo.W = 28, mo.C = 1, mo.classes = c.classes;
  const auto real = build_model(parse_model_spec(c.model_text, c.model), mo);
  mo.shapes_only = true;
  const auto plan = build_model(parse_model_spec(c.model_text, c.model), mo);
  REQUIRE(plan->table() == real->table());
  REQUIRE(plan->parameter_count() == real->parameter_count());
  for (const VarPtr& v : plan->parameters()) REQUIRE(!v->value.defined());
  REQUIRE(bytes_of(p.host, "parameters") == 16 * real->parameter_count());
  // Activations: the larger of training (16 images, x3) and evaluation (256 images, x1).
  int64_t per_image = 28 * 28;
  for (const TableRow& r : real->rows()) per_image += int64_t(r.out.H) * r.out.W * r.out.C;
  REQUIRE(bytes_of(p.host, "activations") == std::max(3 * 16, 256) * per_image * 4);
  // fp16 on a GPU: the same ring on the host (pinned) and the device, half the activations.
  const MemoryPlan g = plan_memory(c, Device::cuda, DType::f16);
  REQUIRE(bytes_of(g.device, "batch ring") == 4 * 32 * 34 * 34);
  REQUIRE(bytes_of(g.device, "activations") == 256 * per_image * 2);
  REQUIRE(bytes_of(g.host, "activations") == -1);
}

TEST_CASE("memory plan: a run that cannot fit is refused, naming what is big and what to lower") {
  TempDir dir;
  TrainConfig c = tiny_run_config(dir / "run");
  c.size = 4096, c.batch = 4096, c.accum = 1, c.val.clear();  // a batch ring of 256 GiB
  c.augment = false;  // no margin: the ring's images are 4096x4096
  REQUIRE_USER_ERROR(check_run_memory(c, RunDevice{}), "batch ring 256.0 GiB (4 slots of 4096 images of 4096x4096x1)");
  REQUIRE_USER_ERROR(check_run_memory(c, RunDevice{}), "available: lower --batch or --size");
  // The numbers of the message, with a given amount available.
  const MemoryPlan small = plan_memory(tiny_run_config(dir / "run"), Device::cpu, DType::f32);
  REQUIRE_USER_ERROR(check_memory(small, 1000, {}, {}), "this machine has 1000 bytes available");
  check_memory(small, MemoryPlan::total(small.host), {}, {});  // exactly enough
  // Two replicas on one GPU need its memory twice.
  const MemoryPlan gpu = plan_memory(tiny_run_config(dir / "run"), Device::cuda, DType::f16);
  const int64_t one = MemoryPlan::total(gpu.device);
  check_memory(gpu, -1, {one}, {0});
  REQUIRE_USER_ERROR(check_memory(gpu, -1, {one, one}, {0, 0}),
                     "cuda:0 needs about " + bytes_str(2 * one) + " for the run (its replicas each need");
  REQUIRE(host_memory_available() > 0);
}

TEST_CASE("cutrain train: a run too big for memory exits 2 at once, before it allocates") {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  TempDir dir;
  const Ran r = run_cutrain({"train", "--train", fm.train, "--size", "4096", "--batch", "4096",
                             "--device", "cpu", "--out", dir / "run"},
                            dir / "log");
  INFO("exit " << r.status << ", printed:\n" << r.output);
  REQUIRE(r.status == kExitUsage);
  REQUIRE(r.output.find("the run needs about") != std::string::npos);
  REQUIRE(r.output.find("lower --batch or --size") != std::string::npos);
  REQUIRE(!names_source_location(r.output));
}
