// The collective timeout between GPU processes: two mpirun ranks sharing one GPU average through
// the host-staged MPI ring (train/replicas/mpi_gpu.h), whose host-side waits are Mpi's; rank 1
// stopped with SIGSTOP mid-run makes rank 0 say so, and the job ends. NCCL's path (two GPUs:
// Engine::await_records polling ncclCommGetAsyncError) is compiled, not run here. Skipped
// without a GPU (REQUIRE_GPU) or without mpirun.
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"
#include "tests/train/replicas/mpi_fixture.h"
#include "tests/train/train_fixture.h"

using namespace cutrain;
using namespace cutrain_test;

TEST_CASE("timeout [gpu]: mpirun -np 2 on one GPU, rank 1 stopped: rank 0 says so, the job ends") {
  REQUIRE_GPU();
  if (no_mpirun()) return;
  TempDir dir;
  const std::string run = dir / "run";
  const StoppedRank s = stop_rank_1(
      {"train", "--train", fashion_mnist_jpegs().train, "--limit-train", "128", "--model",
       tiny_model(dir), "--batch", "32", "--epochs", "1000000", "--device", "cuda", "--threads",
       "1", "--checkpoint-every", "2", "--log-every", "1000", "--collective-timeout", "2",
       "--out", run},
      run, dir / "log");
  require_timeout_reported(s, 2);
  REQUIRE(s.output.find("on the MPI ring through host memory") != std::string::npos);
}
