// `cutrain` itself on a GPU, as a user runs it: `cutrain train` of the tiny model on one GPU
// with CUDA graphs (the GPU default) and on two replicas (`--devices 0,1`, or 0,0 on a host with
// one GPU) with --sync-bn and --ema, each step's loss against the same run on the CPU (CPU
// replicas for the replicas); `describe --step --measure`; and what every place that shows the
// device says. Under the GPU simulator (sim/README.md) these are the trainer's first end-to-end
// runs on simulated GPUs, and every place says "simulated": `cutrain info`, the run's header,
// metrics.jsonl, the report page and the measured step's times (the host's, meaningless for a
// GPU). On a real GPU none of them says it. They skip when no GPU is usable (REQUIRE_GPU).
#include <cmath>
#include <string>
#include <vector>

#include "kernels/gpu.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/train_fixture.h"
#include "train/report/report.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

bool says_simulated(const std::string& text) { return text.find("simulated") != std::string::npos; }

// 96 images of kTinyModel in batches of 32: 3 steps, a record each, one evaluation of 64 images.
// fp32 and the direct kernels on both sides, so that only the order of the sums differs.
std::vector<std::string> tiny_train(const TempDir& dir, const std::string& run,
                                    const std::vector<std::string>& more) {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  write_text(dir / "tiny.model", kTinyModel);
  std::vector<std::string> a = {
      "train", "--train", fm.train, "--val", fm.test, "--limit-train", "96", "--limit-val", "64",
      "--model", dir / "tiny.model", "--batch", "32", "--epochs", "1", "--threads",
      "2", "--compute-threads", "1", "--log-every", "1", "--precision", "fp32", "--conv",
      "direct", "--linear", "direct", "--no-tensorboard", "--out", run};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// `cutrain train` of tiny_train(dir, run, more) to its end; its metrics.jsonl.
RunRecords train_ok(const TempDir& dir, const std::string& name,
                    const std::vector<std::string>& more) {
  const Ran r = run_cutrain(tiny_train(dir, dir / name, more), dir / (name + ".log"));
  INFO("cutrain train (" << name << ") printed:\n" << r.output);
  REQUIRE(r.status == 0);
  return parse_metrics(read_text(dir / (name + "/metrics.jsonl")));
}

// The GPU run's losses follow the CPU run's, step by step, within the trainer's GPU tests'
// bound (tests/train/engine/trainer_gpu_test.cpp: fp32, only the order of the sums differs).
void require_same_losses(const RunRecords& cpu, const RunRecords& gpu) {
  REQUIRE(cpu.steps.size() == 3);
  REQUIRE(gpu.steps.size() == cpu.steps.size());
  for (size_t i = 0; i < cpu.steps.size(); i++) {
    INFO("step " << cpu.steps[i].step << ": cpu " << cpu.steps[i].loss << ", gpu "
                 << gpu.steps[i].loss);
    REQUIRE(gpu.steps[i].step == cpu.steps[i].step);
    REQUIRE(std::isfinite(gpu.steps[i].loss));
    REQUIRE(std::abs(gpu.steps[i].loss - cpu.steps[i].loss) <= 1e-3 * std::abs(cpu.steps[i].loss));
  }
  REQUIRE(gpu.evals.size() == 1);
  REQUIRE(cpu.evals.size() == 1);
  REQUIRE(std::abs(gpu.evals[0].loss - cpu.evals[0].loss) <= 1e-3 * std::abs(cpu.evals[0].loss));
}

}  // namespace

TEST_CASE("cutrain info [gpu]: each device, named as simulated exactly when it is") {
  REQUIRE_GPU();
  TempDir dir;
  const Ran r = run_cutrain({"info"}, dir / "log");
  INFO(r.output);
  REQUIRE(r.status == 0);
  for (int d = 0; d < gpu_count(); d++) {
    const std::string line = "cuda:" + std::to_string(d) + "  " + gpu_name(d);
    REQUIRE(r.output.find(line) != std::string::npos);
  }
  REQUIRE(says_simulated(r.output) == kSimulated);
}

TEST_CASE("cutrain train [gpu]: one GPU with CUDA graphs (the default) follows the CPU run; "
          "the header, metrics.jsonl and the report name the device") {
  REQUIRE_GPU();
  TempDir dir;
  const RunRecords cpu = train_ok(dir, "cpu", {"--device", "cpu"});
  const Ran r = run_cutrain(tiny_train(dir, dir / "gpu", {"--device", "cuda"}), dir / "gpu.log");
  INFO("printed:\n" << r.output);
  REQUIRE(r.status == 0);
  // CUDA graphs are the GPU's default: the run says it replays its step.
  REQUIRE(r.output.find("CUDA graph") != std::string::npos);
  const RunRecords gpu = parse_metrics(read_text(dir / "gpu/metrics.jsonl"));
  require_same_losses(cpu, gpu);

  // Where the device shows: the header the run prints, metrics.jsonl's start record, the report
  // page (written at the run's end, and again by `cutrain report`).
  REQUIRE(gpu.starts.size() == 1);
  const std::string device = gpu.starts[0].device;
  INFO("device: " << device);
  REQUIRE(device.find("cuda:0 (" + gpu_name(0) + ")") == 0);
  REQUIRE(says_simulated(device) == kSimulated);
  REQUIRE(r.output.find(device) != std::string::npos);
  REQUIRE(says_simulated(r.output) == kSimulated);
  const Ran report = run_cutrain({"report", dir / "gpu"}, dir / "report.log");
  INFO("report printed:\n" << report.output);
  REQUIRE(report.status == 0);
  const std::string page = read_text(dir / "gpu/report.html");
  REQUIRE(page.find(gpu_name(0)) != std::string::npos);
  REQUIRE(says_simulated(page) == kSimulated);
}

TEST_CASE("cutrain train [gpu]: two GPU replicas with --sync-bn and --ema follow two CPU "
          "replicas") {
  REQUIRE_GPU();
  TempDir dir;
  const std::string gpus = gpu_count() >= 2 ? "0,1" : "0,0";
  const std::vector<std::string> common = {"--sync-bn", "--ema", "0.9"};
  std::vector<std::string> c = common, g = common;
  c.insert(c.end(), {"--devices", "cpu,cpu"});
  g.insert(g.end(), {"--devices", gpus});
  const RunRecords cpu = train_ok(dir, "cpu", c);
  const RunRecords gpu = train_ok(dir, "gpu", g);
  require_same_losses(cpu, gpu);
  // the average's evaluation too (--ema)
  REQUIRE(std::isfinite(gpu.evals[0].ema_loss));
  REQUIRE(std::abs(gpu.evals[0].ema_loss - cpu.evals[0].ema_loss) <=
          1e-3 * std::abs(cpu.evals[0].ema_loss));
  REQUIRE(says_simulated(gpu.starts.at(0).device) == kSimulated);
}

TEST_CASE("cutrain describe --step --measure [gpu]: times every launch; under the simulator "
          "they are labelled the host's") {
  REQUIRE_GPU();
  TempDir dir;
  const Ran r = run_cutrain({"describe", "--step", "--measure", "--batch", "8"}, dir / "log");
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE(r.output.find("Measured: ") != std::string::npos);
  REQUIRE(says_simulated(r.output) == kSimulated);
}
