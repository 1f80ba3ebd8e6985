// DeviceRing (train/replicas/device_ring.h) on one GPU with R = 2, 3, 4 replicas (--devices
// 0,0,...): every replica's all-reduced bucket equals the CPU Ring's (train/replicas/ring.h) on the
// same inputs bit for bit, in f32 and f16, at sizes below, around and far above R; the replicas
// equal each other; buckets queued back to back (one buffer twice) give the same bits as the CPU
// doing the same sequence; the staged path through pinned host memory (forced) gives the same bits;
// the overflow flags are OR-ed; and the peer matrix and bandwidths of one device.
#include <thread>
#include <vector>

#include "kernels/gpu.h"
#include "tests/kernels/gpu_compare.h"
#include "tests/test_util.h"
#include "train/replicas/device_ring.h"
#include "train/replicas/peer_access.h"
#include "train/replicas/ring.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

template <typename T> constexpr DType dtype_of() {
  return std::is_same<T, half_t>::value ? DType::f16 : DType::f32;
}

// The CPU Ring over `bufs` (one thread per replica), in place.
template <typename T> void cpu_all_reduce(std::vector<std::vector<T>>& bufs, bool average) {
  const int R = int(bufs.size());
  Ring ring(R);
  std::vector<std::thread> threads;
  for (int r = 0; r < R; r++)
    threads.emplace_back([&, r] {
      ring.all_reduce(r, bufs[size_t(r)].data(), int64_t(bufs[size_t(r)].size()), dtype_of<T>(),
                      average);
    });
  for (auto& t : threads) t.join();
}

// R replicas of one bucket on device 0: their compute streams, buffers and ready events.
template <typename T> struct Replicas {
  std::vector<Stream> compute;
  std::vector<DeviceBuffer> buf;
  std::vector<Event> ready;
  Replicas(const std::vector<std::vector<T>>& init) {
    for (const auto& v : init) {
      compute.emplace_back(0);
      buf.push_back(upload(v));
      ready.emplace_back(false);
    }
    // a copy from pageable memory may return before its DMA lands, and the comm streams do
    // not order with the legacy default stream
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<void*> data() {
    std::vector<void*> d;
    for (auto& b : buf) d.push_back(b.data());
    return d;
  }
  // "backward is done": an event recorded on each compute stream
  std::vector<cudaEvent_t> mark_ready() {
    std::vector<cudaEvent_t> e;
    for (size_t r = 0; r < ready.size(); r++) {
      ready[r].record(compute[r].get());
      e.push_back(ready[r].get());
    }
    return e;
  }
  // The compute streams wait for the ring, then the host for them.
  std::vector<std::vector<T>> results(DeviceRing& ring, size_t n) {
    std::vector<std::vector<T>> out;
    for (int r = 0; r < int(buf.size()); r++) {
      ring.wait(r, compute[size_t(r)].get());
      compute[size_t(r)].synchronize();
      out.push_back(download<T>(buf[size_t(r)], n));
    }
    return out;
  }
};

template <typename T>
std::vector<std::vector<T>> inputs(int R, int64_t n, uint64_t salt) {
  std::vector<std::vector<T>> v;
  for (int r = 0; r < R; r++)
    v.push_back(random_values<T>(size_t(n), 1000 * salt + 17 * uint64_t(r) + uint64_t(n)));
  return v;
}

template <typename T> void require_like_cpu(int R, bool staged) {
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(R - 1), int64_t(R + 1), int64_t(1000003)})
    for (bool average : {true, false}) {
      INFO("R = " << R << ", n = " << n << ", average " << average << ", staged " << staged);
      std::vector<std::vector<T>> want = inputs<T>(R, n, 1);
      Replicas<T> reps(want);
      DeviceRingOptions opt;
      opt.force_staged = staged;
      DeviceRing ring(std::vector<int>(size_t(R), 0), opt);
      REQUIRE(ring.link_path(0) ==
              (staged ? DeviceRing::Path::staged : DeviceRing::Path::same_device));
      ring.all_reduce(reps.data(), n, dtype_of<T>(), average, reps.mark_ready());
      const auto got = reps.results(ring, size_t(n));
      cpu_all_reduce(want, average);
      for (int r = 0; r < R; r++) {
        require_same_bits(got[size_t(r)], want[size_t(r)], "replica vs CPU ring");
        require_same_bits(got[size_t(r)], got[0], "replica vs replica 0");
      }
    }
}

}  // namespace

TEST_CASE_TEMPLATE("device ring [gpu]: R = 2, 3, 4 on one GPU equal the CPU ring bit for bit", T,
                   float, half_t) {
  REQUIRE_GPU();
  for (int R : {2, 3, 4}) require_like_cpu<T>(R, false);
}

TEST_CASE_TEMPLATE("device ring [gpu]: the staged path (pinned host memory) gives the same bits",
                   T, float, half_t) {
  REQUIRE_GPU();
  for (int R : {2, 3}) require_like_cpu<T>(R, true);
}

TEST_CASE("device ring [gpu]: buckets queued back to back, one buffer twice, like the CPU") {
  REQUIRE_GPU();
  for (bool staged : {false, true}) {
    INFO("staged " << staged);
    const int R = 3;
    const int64_t na = 4099, nb = 17;
    std::vector<std::vector<float>> a = inputs<float>(R, na, 2), b = inputs<float>(R, nb, 3);
    Replicas<float> ra(a), rb(b);
    DeviceRingOptions opt;
    opt.force_staged = staged;
    DeviceRing ring({0, 0, 0}, opt);
    ring.all_reduce(ra.data(), na, DType::f32, true, ra.mark_ready());
    ring.all_reduce(rb.data(), nb, DType::f32, true, rb.mark_ready());
    ring.all_reduce(ra.data(), na, DType::f32, false);  // no ready events: the ring's order
    const auto got_a = ra.results(ring, size_t(na));
    const auto got_b = rb.results(ring, size_t(nb));
    cpu_all_reduce(a, true);
    cpu_all_reduce(b, true);
    cpu_all_reduce(a, false);
    for (int r = 0; r < R; r++) {
      require_same_bits(got_a[size_t(r)], a[size_t(r)], "bucket a");
      require_same_bits(got_b[size_t(r)], b[size_t(r)], "bucket b");
    }
    // replica 0 receives every chunk but its own (reduce-scatter) and but chunk 1 (all-gather)
    auto received = [&](int64_t n) {
      const auto [b0, e0] = ring_chunk(n, R, 0);
      const auto [b1, e1] = ring_chunk(n, R, 1);
      return 2 * n - (e0 - b0) - (e1 - b1);
    };
    REQUIRE(ring.bytes_received(0) ==
            int64_t(sizeof(float)) * (2 * received(na) + received(nb)));
  }
}

TEST_CASE("device ring [gpu]: the overflow flags are OR-ed over the replicas") {
  REQUIRE_GPU();
  // One flag per parameter, as the trainer ORs them: 1 (one parameter) and 37 (a model's
  // worth, more than R so that every chunk holds flags, not a multiple of R).
  for (bool staged : {false, true})
    for (int R : {2, 3, 4})
      for (int64_t n : {int64_t(1), int64_t(37)}) {
        INFO("R = " << R << ", staged " << staged << ", " << n << " flags");
        DeviceRingOptions opt;
        opt.force_staged = staged;
        DeviceRing ring(std::vector<int>(size_t(R), 0), opt);
        for (int bad : {-1, 0, R - 1}) {  // none, the first, the last
          // replica `bad` flags parameter n-1 and, with 37 flags, also parameter 5 + bad:
          // different replicas' flags land in different chunks of the ring
          std::vector<std::vector<int32_t>> flags(size_t(R), std::vector<int32_t>(size_t(n), 0));
          std::vector<int32_t> want(size_t(n), 0);
          if (bad >= 0) {
            flags[size_t(bad)][size_t(n - 1)] = want[size_t(n - 1)] = 1;
            if (n > 1) flags[size_t(bad)][size_t(5 + bad)] = want[size_t(5 + bad)] = 1;
          }
          Replicas<int32_t> reps(flags);
          std::vector<int32_t*> f;
          for (auto& buf : reps.buf) f.push_back(ptr<int32_t>(buf));
          ring.any(f, n, reps.mark_ready());
          for (const auto& got : reps.results(ring, size_t(n))) REQUIRE(got == want);
        }
      }
}

TEST_CASE("device ring [gpu]: one replica is a no-op; the peer matrix of one device") {
  REQUIRE_GPU();
  std::vector<std::vector<float>> x = inputs<float>(1, 1001, 4);
  Replicas<float> reps(x);
  DeviceRing ring({0});
  ring.all_reduce(reps.data(), 1001, DType::f32, true, reps.mark_ready());
  require_same_bits(reps.results(ring, 1001)[0], x[0], "R = 1");
  REQUIRE(ring.describe() == "1 replica on gpu 0");
  REQUIRE(DeviceRing({0, 0}).describe() == "2 replicas on gpu 0,0, ring links: same-device x2");
  REQUIRE_ERROR(DeviceRing({0, gpu_count()}), "does not exist");

  PeerMatrix m = enable_peer_access({0, 0});
  REQUIRE(m.devices == std::vector<int>{0});
  measure_copy_bandwidth(m, size_t(1) << 20, 2);
  REQUIRE(m.gb_per_s[0][0] > 0);
  REQUIRE(format_peer_matrix(m).find("gpu0") != std::string::npos);
}
