// defines: the training table that bench_replicas (CPU threads) and bench_replicas_gpu (GPUs)
// share: bench_fashion_mnist() (the Fashion-MNIST lists, imported into a folder from the IDX
// files), bench_replica_config() (the default model, one epoch of exactly the steps run),
// ReplicaTiming and time_replica_training() (images/s, all-reduce time and its exposed part per
// step), print_replica_header() and print_replica_row() (one markdown row per replica count).
//
// Timing: `warmup` steps first (loaders started, allocator and caches warm), waited for; then
// the timed window from the first timed launch() to the end of results(true). On the CPU
// launch() runs the whole step; on a GPU it only queues it, and the host runs ahead of the
// device, so the window must end with results(true): when the device has finished the last
// step. What the window holds: the steps' compute, the all-reduce backward did not hide, and
// whatever the host made the device wait for (the loader's next batch, queueing the kernels).
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "data/fashion_mnist.h"
#include "train/engine/trainer.h"
#include "train/setup/resolve.h"

namespace cutrain {

// Fashion-MNIST as JPEG lists under `dir`, from the IDX files. Reused when the folder already
// holds a complete import. Throws, naming the file, when the IDX files are not there.
inline ImportSummary bench_fashion_mnist(const std::string& dir, int threads) {
  ImportOptions io;
  io.threads = threads;
  return import_fashion_mnist(fashion_mnist_idx_dir(), dir, io);
}

// `model` (the default model unless said) on `train_list`, batch `batch`, one epoch of exactly
// warmup + steps steps, one replica per entry of `devices` ("" : one replica, the plain run),
// every kernel launched by the host (no CUDA graphs: the replicas cannot have them, so the
// rows compare like with like; bench_replicas_gpu adds a graph row of its own). Resolved.
inline TrainConfig bench_replica_config(const std::string& train_list, const std::string& out,
                                        int batch, int warmup, int steps,
                                        const std::string& devices, int threads,
                                        const std::string& model = "default",
                                        bool sync_bn = false) {
  TrainConfig c;
  c.train = train_list;
  c.model = model;
  c.sync_bn = sync_bn;
  c.limit_train = int64_t(batch) * (warmup + steps);
  c.batch = batch, c.epochs = 1, c.threads = threads, c.lr = 0.05, c.warmup = 0;
  c.out = out;
  c.devices = devices;
  c.cuda_graph = false;
  resolve_config(c);
  return c;
}

struct ReplicaTiming {
  int replicas = 1;
  std::string devices;      // --devices ("" for one replica)
  int images = 0;           // in the timed window
  double seconds = 0;       // the timed window
  // Means per timed step:
  double comm_s = 0;        // all-reduce time of the step's buckets
  double exposed_s = 0;     // the part of it the compute waited for
  double data_wait_s = 0;   // launch() waiting for the loader's next batch
  double sync_s = 0;        // --sync-bn: in BatchNorm's synchronisation (StepResult::sync_s)
  int skipped = 0;          // steps skipped (fp16 overflow while the scaler finds its scale)
  int graph = 0;            // steps replayed from the CUDA graph (--cuda-graph)
  double images_per_s() const { return images / seconds; }
};

inline ReplicaTiming time_replica_training(Trainer& t, int warmup, int steps) {
  using Clock = std::chrono::steady_clock;
  for (int s = 0; s < warmup; s++) t.launch();
  t.results(true);
  std::vector<StepResult> got;
  const auto t0 = Clock::now();
  for (int s = 0; s < steps; s++) {
    t.launch();
    for (const StepResult& r : t.results()) got.push_back(r);
  }
  for (const StepResult& r : t.results(true)) got.push_back(r);
  ReplicaTiming m;
  m.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  m.replicas = t.replicas();
  m.devices = t.config().devices;
  for (const StepResult& r : got) {
    m.images += r.images;
    m.comm_s += r.comm_s, m.exposed_s += r.comm_exposed_s, m.data_wait_s += r.data_wait_s;
    m.sync_s += std::max(0.0, r.sync_s);
    m.skipped += r.taken ? 0 : 1;
    m.graph += r.graph ? 1 : 0;
  }
  const double n = std::max<double>(1, double(got.size()));
  m.comm_s /= n, m.exposed_s /= n, m.data_wait_s /= n, m.sync_s /= n;
  return m;
}

inline void print_replica_header() {
  std::printf("| replicas | devices | images/s | x one | step | all-reduce / step | exposed / step "
              "| hidden | data wait / step | skipped |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
}

// `one`: images/s of one replica (the speed-up's base).
inline void print_replica_row(const ReplicaTiming& m, double one, int steps) {
  const double step_s = m.seconds / steps;
  char hidden[16] = "-";
  if (m.replicas > 1 && m.comm_s > 0)
    std::snprintf(hidden, sizeof hidden, "%d%%",
                  int(std::lround(100 * (1 - m.exposed_s / m.comm_s))));
  std::printf("| %d | %s | %.1f | %.2f | %.2f ms | %.3f ms | %.3f ms | %s | %.2f ms | %d |\n",
              m.replicas, m.devices.empty() ? "-" : m.devices.c_str(), m.images_per_s(),
              m.images_per_s() / one, step_s * 1e3, m.comm_s * 1e3, m.exposed_s * 1e3, hidden,
              m.data_wait_s * 1e3, m.skipped);
  std::fflush(stdout);
}

// --sync-bn's cost: each model of `models` on R replicas, without and with synchronised
// BatchNorm, side by side (the same steps, one after the other in this process): images/s, the
// step time, the host's time per step in BatchNorm's synchronisation (StepResult::sync_s: on
// CPU replicas the all-reduces and the waits for the slowest replica; on GPUs only the
// queuing, so there the step time's ratio is the measure). config(model, sync_bn) makes each
// run's configuration.
inline void bench_sync_bn(const std::vector<std::string>& models, int replicas,
                          const std::function<TrainConfig(const std::string&, bool)>& config,
                          const RunDevice& where, int warmup, int steps) {
  std::printf("| model | replicas | sync-bn | images/s | step | sync-bn / step | step x plain |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  for (const std::string& model : models) {
    double plain_step = 0;
    for (const bool sync_bn : {false, true}) {
      Trainer t(config(model, sync_bn), where);
      const ReplicaTiming m = time_replica_training(t, warmup, steps);
      const double step_s = m.seconds / steps;
      if (!sync_bn) plain_step = step_s;
      char sync[32] = "-", ratio[32] = "1.00";
      if (sync_bn) {
        std::snprintf(sync, sizeof sync, "%.2f ms (%.0f%%)", m.sync_s * 1e3,
                      100 * m.sync_s / step_s);
        std::snprintf(ratio, sizeof ratio, "%.2f", step_s / plain_step);
      }
      std::printf("| %s | %d | %s | %.1f | %.2f ms | %s | %s |\n", model.c_str(), replicas,
                  sync_bn ? "on" : "off", m.images_per_s(), step_s * 1e3, sync, ratio);
      std::fflush(stdout);
    }
  }
}

}  // namespace cutrain
