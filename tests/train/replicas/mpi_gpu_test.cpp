// mpirun on GPUs (train/replicas/mpi_gpu.h): processes that share one GPU average through the
// host-staged MPI ring, whose additions are the GPU ring's, so two of them train exactly as one
// process with --devices 0,0; processes on GPUs of their own use NCCL, whose sums are its own,
// so they train as --devices 0,1 to rounding. Real mpirun and bin/cutrain; skipped without a
// GPU (or two, for NCCL) or without mpirun.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/gpu.h"
#include "tests/test_util.h"
#include "tests/train/cli_fixture.h"
#include "tests/train/replicas/mpi_fixture.h"
#include "tests/train/train_fixture.h"
#include "train/checkpoint/checkpoint.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

// 6 steps of 32 on 200 Fashion-MNIST images (every collective: buckets, flags, the BatchNorm
// step sums), a validation set, a checkpoint every 3 steps.
std::vector<std::string> gpu_run(const std::string& model, const std::vector<std::string>& more) {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  std::vector<std::string> args = {
      "train", "--train", fm.train, "--limit-train", "200", "--val", fm.test, "--limit-val",
      "100", "--model", model, "--batch", "32", "--epochs", "1", "--optimizer", "adamw",
      "--lr", "0.003", "--seed", "7", "--checkpoint-every", "3", "--keep", "10",
      "--log-every", "1"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// Why the ranks take the host-staged ring: the GPU they share, or a build without NCCL (the
// GPU simulator's) where there is no other.
#if defined(CUTRAIN_NCCL)
constexpr const char* kWhyStaged = "ranks 0 and 1 share GPU";
#else
constexpr const char* kWhyStaged = "this cutrain was built without NCCL";
#endif

}  // namespace

TEST_CASE("mpirun [gpu]: 2 processes sharing one GPU (the host-staged MPI ring) train exactly as "
          "--devices 0,0, in fp16 and fp32, and with --sync-bn") {
  REQUIRE_GPU();
  if (no_mpirun()) return;
  TempDir dir;
  const std::string model = tiny_model(dir);
  for (const auto& [precision, sync_bn] : {std::pair{"fp16", false}, std::pair{"fp32", false},
                                           std::pair{"fp32", true}}) {
    INFO(precision << (sync_bn ? ", --sync-bn" : ""));
    const std::string name = std::string(precision) + (sync_bn ? "_sync" : "");
    const std::string a = dir / ("mpi_" + name), b = dir / ("local_" + name);
    const std::vector<std::string> sync_arg = sync_bn ? std::vector<std::string>{"--sync-bn"}
                                                      : std::vector<std::string>{};
    // --devices 0 on each rank: both on GPU 0 however many the machine has.
    std::vector<std::string> more = {"--devices", "0", "--precision", precision, "--out", a};
    more.insert(more.end(), sync_arg.begin(), sync_arg.end());
    const Ran ran = run_mpirun(2, gpu_run(model, more), dir / "mpi.log");
    INFO(ran.output);
    REQUIRE(ran.status == 0);
    REQUIRE(ran.output.find(std::string("on the MPI ring through host memory (") + kWhyStaged) !=
            std::string::npos);
    more = {"--devices", "0,0", "--precision", precision, "--out", b};
    more.insert(more.end(), sync_arg.begin(), sync_arg.end());
    const Ran local = run_cutrain(gpu_run(model, more), dir / "local.log");
    INFO(local.output);
    REQUIRE(local.status == 0);
    const std::vector<std::string> la = step_losses(a + "/metrics.jsonl");
    REQUIRE(la.size() == 6);
    REQUIRE(la == step_losses(b + "/metrics.jsonl"));
    for (const char* file : {"/step-00000003.h5", "/step-00000006.h5"}) {
      INFO(file);
      require_same_state(read_checkpoint(a + file), read_checkpoint(b + file));
    }
  }
}

TEST_CASE("mpirun [gpu]: 2 processes on GPUs of their own (NCCL) train as --devices 0,1, to "
          "rounding") {
  REQUIRE_GPU();
  if (kSimulated) {  // the GPU simulator's build has no NCCL (sim/README.md)
    skip("NCCL is not simulated (the GPU simulator's build)");
    return;
  }
  if (no_mpirun()) return;
  if (gpu_count() < 2) {
    skip("NCCL between processes needs two GPUs (" + std::to_string(gpu_count()) + " here)");
    return;
  }
  TempDir dir;
  const std::string model = tiny_model(dir);
  const std::string a = dir / "mpi", b = dir / "local";
  const Ran ran = run_mpirun(2, gpu_run(model, {"--device", "cuda", "--precision", "fp32", "--out", a}),
                             dir / "mpi.log");
  INFO(ran.output);
  REQUIRE(ran.status == 0);
  if (ran.output.find("through host memory") != std::string::npos) {
    skip("NCCL is not usable here (the run's replicas line says why)");
    return;
  }
  REQUIRE(ran.output.find("on NCCL") != std::string::npos);
  const Ran local = run_cutrain(
      gpu_run(model, {"--devices", "0,1", "--precision", "fp32", "--out", b}), dir / "local.log");
  INFO(local.output);
  REQUIRE(local.status == 0);
  const std::vector<std::string> la = step_losses(a + "/metrics.jsonl");
  const std::vector<std::string> lb = step_losses(b + "/metrics.jsonl");
  REQUIRE(la.size() == 6);
  REQUIRE(lb.size() == 6);
  // The same data and steps; only the order of the gradients' sums differs (NCCL's against the
  // ring's), a few fp32 ulps a step, grown by 6 AdamW steps.
  for (size_t i = 0; i < la.size(); i++) {
    INFO("step " << i << ": " << la[i] << " against " << lb[i]);
    REQUIRE(std::fabs(std::stod(la[i]) - std::stod(lb[i])) <= 1e-3 * std::fabs(std::stod(lb[i])));
  }
}
