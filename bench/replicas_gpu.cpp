// bench_replicas_gpu: data-parallel replicas on GPUs (CUDA builds only; exits 0 saying why
// without a GPU). Prints, in one run:
//
//   1. the peer-access matrix and the copy bandwidth of every pair of the listed devices
//      (what a run prints at start), then the CUDA ring all-reduce (train/replicas/device_ring.h)
//      for R = the listed replicas, at the default model's gradient size and at 64 MB, fp32: its
//      time, its bus bandwidth (bytes x 2(R-1)/R / time: what each replica actually copies per
//      second) and the ratio to the slowest ring link's measured copy bandwidth (target >= 0.8).
//      Validates before timing: every replica's result equals the CPU Ring's bit for bit.
//   2. training the default model on Fashion-MNIST in fp16 with 1, 2 and 4 GPU replicas (the
//      trainer's own path, `--devices`): images/s and the speed-up over one replica, the step
//      time, the all-reduce time per step (StepResult::comm_s, from events), the part of it
//      backward did not hide and the fraction hidden (1 - exposed / all-reduce), the time
//      launch() waited for the loader, and the trainer's peer report
//      (Trainer::peer_report()). Timed with bench/replica_training.h, as bench_replicas times
//      CPU replicas: warm-up steps, then launch() x steps and results(true) at the end of the
//      window (a GPU step is queued, not run, by launch()). One replica is timed twice: with
//      its kernels launched one by one, and with its step replayed from CUDA graphs
//      (--cuda-graph): its "x one" is the graphs' gain.
//   3. --sync-bn's cost: the default and resnet models on the first two replica devices,
//      without and with synchronised BatchNorm: the step time and its ratio.
//
//   bin/bench_replicas_gpu [--devices 0,0] [--reps 10] [--staged] [--steps 30] [--batch 256]
//
// On one GPU (--devices 0,0) the R replicas' copies and reduces share the one device's memory
// bandwidth, and the copy they are compared with is a device-to-device copy on that GPU, so
// the ratio is taken for the device's total (bus bw x the replicas per device): it says how
// close the ring's steps (event waits, copies, reduce kernels) come to a plain copy, not what
// a multi-GPU host reaches over NVLink or PCIe (for that, list distinct devices). The note the
// program prints after the training table says the same for training.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "kernels/check.h"
#include "kernels/gpu.h"
#include "kernels/rng.h"
#include "nn/model.h"
#include "train/engine/trainer.h"
#include "train/replicas/device_ring.h"
#include "train/replicas/peer_access.h"
#include "train/replicas/ring.h"

#include "bench/replica_training.h"

#ifndef CUTRAIN_COMMIT  // the Makefile passes `git describe --always --dirty`
#define CUTRAIN_COMMIT "unknown"
#endif

using namespace cutrain;

namespace {

// The GPU ordinals of --devices, repeats allowed ("0,0": two replicas on GPU 0).
std::vector<int> device_ordinals(const std::string& s) {
  std::vector<int> d;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) d.push_back(std::stoi(item));
  CHECK(!d.empty(), "--devices: no device in '" << s << "'");
  return d;
}

// R buffers of n floats, replica r's on devices[r], filled from the RNG; host copies in `host`.
struct Buffers {
  std::vector<DeviceBuffer> dev;
  std::vector<std::vector<float>> host;
  Buffers(const std::vector<int>& devices, int64_t n, uint64_t salt) {
    for (size_t r = 0; r < devices.size(); r++) {
      std::vector<float> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; i++) v[size_t(i)] = float(rng_uniform(salt + r, 0, uint64_t(i)));
      dev.emplace_back(size_t(n) * 4, devices[r]);
      copy_sync(dev.back().data(), v.data(), size_t(n) * 4);
      host.push_back(std::move(v));
    }
    for (int d : devices) {  // the uploads have landed (the ring's streams are non-blocking)
      set_device(d);
      CUDA_CHECK(cudaDeviceSynchronize());
    }
    set_device(devices[0]);
  }
  std::vector<void*> ptrs() {
    std::vector<void*> p;
    for (auto& b : dev) p.push_back(b.data());
    return p;
  }
};

// The GPU ring's result against the CPU Ring's, bit for bit, on every replica.
void validate(DeviceRing& ring, const std::vector<int>& devices, int64_t n) {
  Buffers b(devices, n, 7);
  ring.all_reduce(b.ptrs(), n, DType::f32, true);
  const int R = int(devices.size());
  Ring cpu(R);
  std::vector<std::thread> threads;
  for (int r = 0; r < R; r++)
    threads.emplace_back([&, r] { cpu.all_reduce(r, b.host[size_t(r)].data(), n, DType::f32, true); });
  for (auto& t : threads) t.join();
  std::vector<float> got(static_cast<size_t>(n));
  for (int r = 0; r < R; r++) {
    Stream s(devices[size_t(r)]);
    ring.wait(r, s.get());
    s.synchronize();
    copy_sync(got.data(), b.dev[size_t(r)].data(), size_t(n) * 4);
    CHECK(std::memcmp(got.data(), b.host[size_t(r)].data(), size_t(n) * 4) == 0,
          "validation failed: replica " << r << " differs from the CPU ring");
  }
}

// Median ms of one all-reduce of n floats (all replicas done), over `reps` timed runs.
double time_allreduce(DeviceRing& ring, const std::vector<int>& devices, int64_t n, int reps) {
  Buffers b(devices, n, 11);
  const int R = int(devices.size());
  Stream host0(devices[0]);  // the timing stream: starts every run, waits for every replica
  std::vector<double> ms;
  for (int k = 0; k <= reps; k++) {  // k = 0: warm-up (buffers grow, peers wake up)
    Event start(true), stop(true), go(false);
    start.record(host0.get());
    go.record(host0.get());
    ring.all_reduce(b.ptrs(), n, DType::f32, true, std::vector<cudaEvent_t>(size_t(R), go.get()));
    for (int r = 0; r < R; r++) ring.wait(r, host0.get());
    stop.record(host0.get());
    stop.synchronize();
    if (k > 0) ms.push_back(double(stop.ms_since(start)));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The devices of R replicas for the training table: the --devices list repeated, or cut, to
// R entries. The table always compares 1, 2 and 4 replicas, whatever the host has: 0,0 gives
// 0 | 0,0 | 0,0,0,0 (all on one GPU); 0,1 gives 0 | 0,1 | 0,1,0,1 (two replicas a GPU at
// R = 4); 0,1,2,3,4,5,6,7 gives 0 | 0,1 | 0,1,2,3. Where entries repeat, replicas share a
// GPU, which measures the path (its overheads, its correctness), not a speed-up.
std::vector<int> replica_devices(const std::vector<int>& devices, int R) {
  std::vector<int> d;
  for (int r = 0; r < R; r++) d.push_back(devices[size_t(r) % devices.size()]);
  return d;
}

std::string join(const std::vector<int>& d) {
  std::string s;
  for (size_t i = 0; i < d.size(); i++) s += (i ? "," : "") + std::to_string(d[i]);
  return s;
}

// 2. The trainer with 1, 2 and 4 replicas on `devices` (repeated or cut, above), fp16.
void bench_training(const std::vector<int>& devices, int batch, int steps) {
  CHECK(batch % 4 == 0, "--batch " << batch << ": must be divisible by 4 (up to 4 replicas)");
  CHECK(steps >= 1, "--steps must be >= 1");
  const int warmup = 3;  // loaders started, allocator and kernels (and cuDNN) warm, scaler settled
  const std::string idx = fashion_mnist_idx_dir();
  if (!std::filesystem::exists(idx + "/train-images-idx3-ubyte.gz")) {
    std::printf("\n2. training: skipped: no Fashion-MNIST IDX files in %s (set "
                "CUTRAIN_FASHION_MNIST_DIR)\n", idx.c_str());
    return;
  }
  const std::string dir =
      (std::filesystem::temp_directory_path() / "bench_replicas_gpu_fmnist").string();
  const int cores = int(std::max(2u, std::thread::hardware_concurrency()));
  const ImportSummary fm = bench_fashion_mnist(dir, cores);
  std::printf("\n2. training the default model, fp16, batch %d (split over the replicas), %d "
              "timed steps after %d\n", batch, steps, warmup);
  print_replica_header();
  double one = 0;
  std::string description, peers;
  for (int R : {1, 2, 4}) {
    const std::vector<int> d = replica_devices(devices, R);
    // The decode threads split over the replicas' loaders, one core left for the host thread
    // that queues every replica's kernels.
    const int threads = std::max(1, (cores - 1) / R);
    // One replica is the plain single-GPU run on devices[0] (--devices N: no ring, no buckets).
    Trainer t(bench_replica_config(fm.train_list, dir + "/run", batch, warmup, steps, join(d),
                                   threads),
              choose_device("cuda", "fp16"));
    if (R == 4) {  // the largest: every listed device that takes part (before timing: it syncs)
      description = t.replicas_description();
      peers = t.peer_report();
    }
    ReplicaTiming m = time_replica_training(t, warmup, steps);
    if (R == 1) one = m.images_per_s();
    print_replica_row(m, one, steps);
    if (R == 1) {
      // The same run with its step replayed from CUDA graphs (train's default,
      // captured during the warm-up): "x one" is the graph's gain over launching each kernel.
      TrainConfig c = bench_replica_config(fm.train_list, dir + "/run-graph", batch, warmup,
                                           steps, join(d), threads);
      c.cuda_graph = true;
      Trainer tg(c, choose_device("cuda", "fp16"));
      std::string refused;
      tg.notice = [&](const std::string& line) {
        if (line.find("refused") != std::string::npos) refused = line;
      };
      ReplicaTiming g = time_replica_training(tg, warmup, steps);
      g.devices = (g.devices.empty() ? std::string("-") : g.devices) + ", CUDA graph (" +
                  std::to_string(g.graph) + " of " + std::to_string(steps) + " steps)";
      print_replica_row(g, one, steps);
      if (!refused.empty()) std::printf("(%s)\n", refused.c_str());
    }
  }
  std::printf("\nthe trainer at R = 4: %s\n%s", description.c_str(), peers.c_str());

  // 3. --sync-bn's cost on the first two replica devices: three small all-reduces per BatchNorm
  // layer and micro-batch, latency-bound, each the replicas' forward or backward waits for.
  const std::vector<int> d2 = replica_devices(devices, 2);
  std::printf("\n3. --sync-bn: 2 replicas on %s, fp16, batch %d, without and with synchronised "
              "BatchNorm, %d timed steps after %d\n", join(d2).c_str(), batch, steps, warmup);
  bench_sync_bn({"default", "resnet"}, 2,
                [&](const std::string& model, bool sync_bn) {
                  return bench_replica_config(fm.train_list, dir + "/run-sync", batch, warmup,
                                              steps, join(d2), std::max(1, (cores - 1) / 2),
                                              model, sync_bn);
                },
                choose_device("cuda", "fp16"), warmup, steps);
  std::filesystem::remove_all(dir);

  // What the table predicts.
  const std::vector<int> d4 = replica_devices(devices, 4);
  const std::set<int> distinct(d4.begin(), d4.end());
  if (distinct.size() == 1)
    std::printf(
        "\nnote: every replica ran on GPU %d, so adding replicas adds no compute: they share\n"
        "its SMs and memory bandwidth. Images/s across R shows what splitting the batch costs\n"
        "(smaller kernels on R streams, which may also fill the GPU better), what the ring\n"
        "costs (event waits, copies, reduce kernels) and whether one host thread keeps R\n"
        "replicas' kernels queued. Same-device copies (part 1, the matrix's diagonal) stand\n"
        "in for NVLink (~100-450 GB/s a direction) or PCIe (~25-50 GB/s), so this all-reduce\n"
        "is faster than one between GPUs, and the hidden fraction says how the replicas'\n"
        "kernels interleave on one GPU, not how a link overlaps backward. It predicts\n"
        "correctness and per-step overheads, not the speed-up of a multi-GPU host: for that,\n"
        "list distinct GPUs (--devices 0,1,2,3); part 1's bus bandwidth over real links and\n"
        "train/replicas/REPLICAS.md's model of the step estimate it.\n",
        d4[0]);
  else if (distinct.size() < d4.size())
    std::printf("\nnote: at R = 4 some replicas shared a GPU (--devices %s): that row measures "
                "the path, not a speed-up; list 4 distinct GPUs for one.\n",
                join(d4).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_replicas_gpu: the CUDA ring all-reduce against the copy bandwidth, and "
               "training with 1, 2 and 4 GPU replicas"};
  std::string devices_arg = "0,0";
  int reps = 10, steps = 30, batch = 256;
  bool staged = false;
  app.add_option("--devices", devices_arg, "Replica devices, repeats allowed (0,0: one GPU)");
  app.add_option("--reps", reps, "Timed all-reduces per size (median reported)");
  app.add_flag("--staged", staged, "Every ring link through pinned host memory");
  app.add_option("--steps", steps, "Timed training steps per replica count (after 3 warm-up)");
  app.add_option("--batch", batch, "Global training batch (divisible by 4)");
  CLI11_PARSE(app, argc, argv);
  if (!gpu_usable()) {
    std::printf("bench_replicas_gpu: skipped: %s\n", gpu_unavailable_reason().c_str());
    return 0;
  }
  try {
    const std::vector<int> devices = device_ordinals(devices_arg);
    const int R = int(devices.size());
    set_device(devices[0]);  // the timing stream's events are created here
    int share = 1;           // the most replicas on one device
    for (int d : devices) share = std::max(share, int(std::count(devices.begin(), devices.end(), d)));
    CHECK(R >= 2, "--devices: the ring needs at least two replicas");
    std::printf("bench_replicas_gpu, commit %s, %s\n", CUTRAIN_COMMIT, gpu_name(devices[0]).c_str());
    DeviceRingOptions opt;
    opt.force_staged = staged;
    DeviceRing ring(devices, opt);
    PeerMatrix peers = ring.peers();
    measure_copy_bandwidth(peers);
    std::printf("%s\n%s", ring.describe().c_str(), format_peer_matrix(peers).c_str());
    double link_bw = 1e30;  // the slowest ring link's copy bandwidth, GB/s
    for (int r = 0; r < R; r++) {
      const int from = devices[size_t((r + R - 1) % R)], to = devices[size_t(r)];
      link_bw = std::min(link_bw, peers.gb_per_s[size_t(peers.index(from))][size_t(peers.index(to))]);
    }

    ModelOptions mo;
    mo.H = mo.W = 28, mo.C = 1, mo.classes = 10;
    const int64_t grad_n = build_model(load_model_spec("default"), mo)->parameter_count();
    std::printf("\n1. ring all-reduce, fp32, R = %d (bus bw = bytes x 2(R-1)/R / time; target >= 0.8 "
                "of the slowest link's copy bandwidth, %.1f GB/s)\n", R, link_bw);
    std::printf("| size | time | bus bw | bus x %d / copy |\n| --- | --- | --- | --- |\n", share);
    for (const int64_t n : {grad_n, int64_t(16) << 20}) {
      validate(ring, devices, n);
      const double ms = time_allreduce(ring, devices, n, reps);
      const double bus = double(n) * 4 * 2.0 * (R - 1) / R / (ms * 1e-3) / 1e9;
      std::printf("| %.2f MB%s | %.3f ms | %.1f GB/s | %.2f |\n", double(n) * 4 / 1e6,
                  n == grad_n ? " (default model)" : "", ms, bus, bus * share / link_bw);
      std::fflush(stdout);
    }

    bench_training(devices, batch, steps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_replicas_gpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
