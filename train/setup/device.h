// defines: RunDevice and choose_device: where a run computes (CPU or a GPU) and in which
// precision, from --device and --precision.
//
//   --device auto   GPU 0 when one is usable (a CUDA build, a driver, a device); otherwise the
//                   CPU, with one line saying why ("cutrain: running on the CPU: ...").
//   --device cuda   the GPU, or a cutrain::Error naming what is missing.
//   --device cpu    the CPU.
//   --precision auto: fp16 on a GPU, fp32 on the CPU. fp16 on the CPU is allowed: it stores
//                   activations, gradients and working weights as IEEE half (emulated), which
//                   is how CI tests mixed precision without a GPU; it is slow.
#pragma once
#include <string>

#include "nn/tensor.h"

namespace cutrain {

class Mpi;

struct RunDevice {
  Device device = Device::cpu;
  int gpu = 0;               // on cuda: the GPU of a run with one replica (--devices N)
  DType dtype = DType::f32;  // activations, gradients and working weights
  std::string notice;        // the one line to print when auto fell back to the CPU; else ""
  // A run that mpirun started: this process's place among its processes (train/replicas/mpi.h),
  // each one replica; null: one process.
  const Mpi* mpi = nullptr;
  std::string describe() const;  // "cpu fp32", "cuda:0 (NVIDIA H100) fp16"
};

RunDevice choose_device(const std::string& device, const std::string& precision);

struct TrainConfig;
// A run's compute threads (--compute-threads; kernels/parallel.h): the option when given,
// else (0) the process's default (OMP_NUM_THREADS, else its cores) shared out among the
// replicas of this machine that compute on the CPU at the same time: the processes mpirun
// started beside this one, and with --sync-bn this process's CPU replicas, each on a thread
// of its own (without it they take turns on one). In [1, kMaxThreads].
int run_compute_threads(const TrainConfig& cfg, const RunDevice& device);
// Its rule on plain numbers: `cores` (the process's default), at most the machine's `hw`
// hardware threads shared among mpirun's `processes` here (a process mpirun bound to fewer
// cores has fewer already), then shared among `side_by_side` replicas; in [1, kMaxThreads].
int share_compute_threads(int cores, int hw, int processes, int side_by_side);
// This process's replicas that compute on the CPU at the same moment: with --sync-bn each on
// a thread of its own, else one (they take turns).
int cpu_replicas_side_by_side(const TrainConfig& cfg, const RunDevice& device);
// The compute threads of `cutrain eval` and `predict` on a run's checkpoint: the run's count
// (so that on its machine they repeat its evaluation bit for bit), at most the default here.
int inference_compute_threads(const TrainConfig& cfg);
// The decode threads of each of this machine's `loaders` loaders for --threads `threads`,
// shared out among them, at least 1 each. 0: every hardware thread when the CPU computes (its
// compute threads are busy only while a step runs, and the decode threads sleep once the ring
// of batches is full), one fewer on a GPU (the thread that queues the GPU's work keeps one).
int run_decode_threads(int threads, const RunDevice& device, int loaders);

}  // namespace cutrain
