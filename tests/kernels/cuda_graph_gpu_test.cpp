// CudaGraph (kernels/gpu.h) on the GPU: a captured graph replays its work on what its buffers
// hold at each launch, its temporaries come from its private pool and stay its own, and a
// capture CUDA refuses says why and leaves the stream as it was. (The trainer's use of it:
// tests/train/engine/trainer_gpu_test.cpp.) CUDA builds only; skipped without a device.
#include <string>

#include "kernels/gpu.h"
#include "kernels/step_state.h"
#include "tests/test_util.h"

using namespace cutrain;

TEST_CASE("gpu [gpu]: a CUDA graph replays what it captured on what its buffers hold then, and "
          "its temporaries stay its own") {
  REQUIRE_GPU();
  Stream s(0);
  DeviceBuffer in(sizeof(float), 0, s.get()), acc(sizeof(double), 0, s.get());
  PinnedBuffer host(sizeof(float)), host_acc(sizeof(double));
  float* h = static_cast<float*>(host.data());
  double* ha = static_cast<double*>(host_acc.data());
  *ha = 7;
  copy_async(acc.data(), host_acc.data(), sizeof(double), s.get());
  s.synchronize();
  CudaGraph g;
  void* temp_at = nullptr;
  const std::string why = g.capture(s.get(), [&] {
    memset_async(acc.data(), 0, sizeof(double), s.get());
    DeviceBuffer temp(sizeof(float), 0, s.get());  // from the graph's private pool
    temp_at = temp.data();
    copy_async(temp.data(), in.data(), sizeof(float), s.get());
    const float* t = static_cast<const float*>(temp.data());
    double* a = static_cast<double*>(acc.data());
    scalar_accumulate_gpu(t, 2.0, a, s.get());  // acc = 2 in + in = 3 in
    scalar_accumulate_gpu(static_cast<const float*>(in.data()), 1.0, a, s.get());
  });
  INFO(why);
  REQUIRE(why.empty());
  REQUIRE(g.captured());
  REQUIRE(g.nodes() == 4);  // memset, copy, two kernels
  copy_async(host_acc.data(), acc.data(), sizeof(double), s.get());
  s.synchronize();
  REQUIRE(*ha == 7);  // capture ran nothing
  for (const float x : {1.5f, -4.0f, 0.25f}) {
    *h = x;
    copy_async(in.data(), host.data(), sizeof(float), s.get());
    g.launch(s.get());
    copy_async(host_acc.data(), acc.data(), sizeof(double), s.get());
    s.synchronize();
    REQUIRE(*ha == 3 * double(x));
  }
  // The temporary's block is the graph's for as long as it lives: the stream's next buffer of
  // that size is another one, and neither emptying the cache nor anything else frees it.
  device_allocator(0).empty_cache();
  DeviceBuffer eager(sizeof(float), 0, s.get());
  REQUIRE(eager.data() != temp_at);
  *h = 2;
  copy_async(in.data(), host.data(), sizeof(float), s.get());
  g.launch(s.get());
  copy_async(host_acc.data(), acc.data(), sizeof(double), s.get());
  s.synchronize();
  REQUIRE(*ha == 6);
}

TEST_CASE("gpu [gpu]: a capture CUDA refuses says why, runs nothing and leaves the stream working") {
  REQUIRE_GPU();
  Stream s(0);
  DeviceBuffer buf(sizeof(float), 0, s.get());
  memset_async(buf.data(), 0, sizeof(float), s.get());
  CudaGraph g;
  const std::string why = g.capture(s.get(), [&] {
    memset_async(buf.data(), 0xff, sizeof(float), s.get());
    Event e;
    e.record(s.get());
    e.synchronize();  // waiting for a stream under capture: CUDA says no
  });
  INFO(why);
  REQUIRE(!why.empty());
  REQUIRE(!g.captured());
  REQUIRE_ERROR(g.launch(s.get()), "launch before a successful capture");
  REQUIRE_ERROR(g.capture(s.get(), [] {}), "called once per graph");
  PinnedBuffer host(sizeof(float));
  copy_async(host.data(), buf.data(), sizeof(float), s.get());
  s.synchronize();  // the stream works, and the memset in the failed capture never ran
  REQUIRE(*static_cast<const float*>(host.data()) == 0.0f);
}
