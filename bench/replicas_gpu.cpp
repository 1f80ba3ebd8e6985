// bench_replicas_gpu: the CUDA ring all-reduce (train/device_ring.h) against the measured
// device-to-device / peer copy bandwidth (CUDA builds only; exits 0 saying why without a GPU).
//
// Prints: the peer-access matrix and the copy bandwidth of every pair of the listed devices
// (what a run prints at start), then for R = the listed replicas, at the default model's
// gradient size and at 64 MB, fp32: the all-reduce time, its bus bandwidth (bytes x 2(R-1)/R
// / time: what each replica actually copies per second) and the ratio to the slowest ring
// link's measured copy bandwidth (target >= 0.8). Validates before timing: every replica's
// result equals the CPU Ring's bit for bit.
//
//   bin/bench_replicas_gpu [--devices 0,0] [--reps 10] [--staged]
//
// On one GPU (--devices 0,0) the R replicas' copies and reduces share the one device's memory
// bandwidth, and the copy they are compared with is a device-to-device copy on that GPU, so
// the ratio is taken for the device's total (bus bw x the replicas per device): it says how
// close the ring's steps (event waits, copies, reduce kernels) come to a plain copy, not what
// a multi-GPU host reaches over NVLink or PCIe (for that, list distinct devices).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "kernels/check.h"
#include "kernels/gpu.h"
#include "kernels/rng.h"
#include "nn/model.h"
#include "train/device_ring.h"
#include "train/peer_access.h"
#include "train/ring.h"

#ifndef CUTRAIN_COMMIT  // the Makefile passes `git describe --always --dirty`
#define CUTRAIN_COMMIT "unknown"
#endif

using namespace cutrain;

namespace {

std::vector<int> parse_devices(const std::string& s) {
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_replicas_gpu: the CUDA ring all-reduce against the copy bandwidth"};
  std::string devices_arg = "0,0";
  int reps = 10;
  bool staged = false;
  app.add_option("--devices", devices_arg, "Replica devices, repeats allowed (0,0: one GPU)");
  app.add_option("--reps", reps, "Timed all-reduces per size (median reported)");
  app.add_flag("--staged", staged, "Every ring link through pinned host memory");
  CLI11_PARSE(app, argc, argv);
  if (!gpu_usable()) {
    std::printf("bench_replicas_gpu: skipped: %s\n", gpu_unavailable_reason().c_str());
    return 0;
  }
  try {
    const std::vector<int> devices = parse_devices(devices_arg);
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
    std::printf("\nring all-reduce, fp32, R = %d (bus bw = bytes x 2(R-1)/R / time; target >= 0.8 "
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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_replicas_gpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
