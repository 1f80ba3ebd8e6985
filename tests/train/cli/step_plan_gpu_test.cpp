// The step plan (train/cli/step_plan.h) against the GPU itself: the step walked on a GPU notes
// the same launches as the step walked on the CPU, and their count is what CUDA captured in the
// step's two graphs (cudaGraphGetNodes) plus the launches queued outside them. A kernel entry
// point whose stated cost (kernels/*.h) misses a launch fails here. Skips without a GPU.
#include <string>

#include "tests/test_util.h"
#include "train/cli/step_plan.h"

using namespace cutrain;

namespace {

// Launches a step queues outside its graphs (train/engine/engine_graph.h): the loader's copy
// on the copy stream, the learning rate into the step state, the record's copy to the host.
int outside_graphs(const LaunchPlan& p) {
  int n = 0;
  for (const LaunchPlan::Row& r : p.rows()) {
    const std::string& k = r.cost.kernel;
    if (k == "step_set_lr" || k.rfind("copy (batch to the device", 0) == 0 ||
        k.rfind("copy (record to the host", 0) == 0)
      n += r.cost.launches;
  }
  return n;
}

void require_same_rows(const LaunchPlan& a, const LaunchPlan& b) {
  REQUIRE(a.rows().size() == b.rows().size());
  for (size_t i = 0; i < a.rows().size(); i++) {
    INFO("row " << i << ": " << a.rows()[i].cost.kernel);
    REQUIRE(a.rows()[i].phase == b.rows()[i].phase);
    REQUIRE(a.rows()[i].cost.kernel == b.rows()[i].cost.kernel);
    REQUIRE(a.rows()[i].cost.launches == b.rows()[i].cost.launches);
  }
}

// The plan and the captured graphs are compared at one batch, whichever it is: on the simulator
// a small one (its steps are the host's, a thousand times slower).
constexpr int kBatch = cutrain_test::sim_or(128, 2);

// One step's graphs against its plan, with the given kernels and precision.
void require_plan_is_graph(const char* conv, const char* linear, const char* precision) {
  StepPlanOptions o;
  o.batch = kBatch;
  o.conv = conv;
  o.linear = linear;
  o.precision = precision;
  o.device = Device::cuda;
  o.cuda_graph = true;
  const StepPlan gpu = step_plan(o);
  REQUIRE(gpu.graph_nodes > 0);
  REQUIRE(int(gpu.graph_nodes) == gpu.plan.launches() - outside_graphs(gpu.plan));
}

}  // namespace

TEST_CASE("step plan [gpu]: the plan is the captured step's node count, on both models") {
  REQUIRE_GPU();
  for (const char* model : {"default", "resnet"})
    for (const char* optimizer : {"sgd", "adamw"}) {
      INFO(model << ", " << optimizer);
      StepPlanOptions o;
      o.model = model;
      o.optimizer = optimizer;
      o.batch = kBatch;
      const StepPlan cpu = step_plan(o);
      o.device = Device::cuda;
      o.cuda_graph = true;
      const StepPlan gpu = step_plan(o);
      require_same_rows(cpu.plan, gpu.plan);
      REQUIRE(gpu.graph_nodes > 0);
      REQUIRE(int(gpu.graph_nodes) == gpu.plan.launches() - outside_graphs(gpu.plan));
    }
}

TEST_CASE("step plan [gpu]: an fp32 step with the direct kernels too") {
  REQUIRE_GPU();
  require_plan_is_graph("direct", "direct", "fp32");
}

TEST_CASE("step plan [gpu]: a cuDNN and cuBLAS step too") {
  REQUIRE_CUDNN();
  // cuDNN's and cuBLAS's launches are estimates (kernels/launch_plan.h): this check is the
  // profile that confirms or corrects them.
  require_plan_is_graph("cudnn", "cublas", "fp16");
}

TEST_CASE("step plan [gpu]: --measure times every launch of the step's stream") {
  REQUIRE_GPU();
  StepPlanOptions o;
  o.batch = kBatch;
  o.device = Device::cuda;
  o.measure = true;
  const StepPlan m = step_plan(o);
  REQUIRE(m.held);  // nothing in the step waited for the device
  double total = 0;
  for (const LaunchPlan::Row& r : m.plan.rows()) {
    INFO(r.cost.kernel);
    if (r.cost.other_stream) {
      REQUIRE(r.measured_s < 0);
    } else {
      REQUIRE(r.measured_s >= 0);
      total += r.measured_s;
    }
  }
  REQUIRE(total > 0);
  const std::string text = step_plan_text(m.plan, o, roofline_of("h100"));
  REQUIRE(text.find("By kind of kernel") != std::string::npos);
  REQUIRE(text.find("Measured: ") != std::string::npos);
}
