// The two collectives of train/replicas/collective.h: the CPU ring on threads, the GPU ring on comm
// streams.
#include "train/replicas/collective.h"

#include <algorithm>
#include <map>

#include "kernels/check.h"
#include "train/replicas/device_ring.h"
#include "train/replicas/replica_threads.h"
#include "train/replicas/ring.h"

namespace cutrain {

namespace {

// train/replicas/ring.h's Ring is a collective each rank enters from its own thread: the R ranks run on
// ReplicaThreads (rank 0 on the calling thread), and the call returns when all are done.
class CpuRing : public Collective {
 public:
  explicit CpuRing(int R)
      : ring_(R), threads_(R, [this](const std::string& why) { ring_.abort(why); }) {}
  int size() const override { return ring_.size(); }
  void mark(int, int) override {}  // the CPU's work is done when queued
  void all_reduce(int, const std::vector<void*>& data, int64_t n, DType dtype,
                  bool average) override {
    CHECK(int(data.size()) == size(), "all_reduce: " << data.size() << " buffers for "
                                                    << size() << " replicas");
    threads_.run([&](int r) { ring_.all_reduce(r, data[size_t(r)], n, dtype, average); });
  }
  void any(int, const std::vector<int32_t*>& flags, int64_t n) override {
    // A few dozen ints in host memory: OR-ed where they are, then the same bits everywhere.
    for (int64_t i = 0; i < n; i++) {
      int32_t v = 0;
      for (int32_t* f : flags) v |= f[i];
      for (int32_t* f : flags) f[i] = v;
    }
  }
  void wait(int) override {}
  std::string describe() const override {
    return std::to_string(size()) + " replicas on the CPU ring (a thread each)";
  }
  void set_timeout(double seconds) override { ring_.set_timeout(seconds); }
  void at_step(int64_t step) override { ring_.at_step(step); }

 private:
  Ring ring_;
  ReplicaThreads threads_;
};

class GpuRing : public Collective {
 public:
  GpuRing(const std::vector<int>& devices, const std::vector<cudaStream_t>& streams)
      : ring_(devices), devices_(devices), streams_(streams) {}
  ~GpuRing() override = default;  // the ring synchronises its comm streams
  int size() const override { return ring_.size(); }
  void mark(int rank, int tag) override {
    std::vector<Event>& e = events_[tag];
    if (e.empty())
      for (int d : devices_) {
        const DeviceGuard on(d);
        e.emplace_back(false);
      }
    e[size_t(rank)].record(streams_[size_t(rank)]);
  }
  void all_reduce(int tag, const std::vector<void*>& data, int64_t n, DType dtype,
                  bool average) override {
    ring_.all_reduce(data, n, dtype, average, ready(tag));
  }
  void any(int tag, const std::vector<int32_t*>& flags, int64_t n) override {
    ring_.any(flags, n, ready(tag));
  }
  void wait(int rank) override { ring_.wait(rank, streams_[size_t(rank)]); }
  std::string describe() const override { return ring_.describe(); }
  void trace(Tracer* tracer) override { ring_.trace(tracer); }
  void collect_trace(bool wait) override { ring_.collect_trace(wait); }
  DeviceRing& ring() { return ring_; }

 private:
  std::vector<cudaEvent_t> ready(int tag) {
    std::vector<cudaEvent_t> out;
    for (const Event& e : events_.at(tag)) out.push_back(e.get());
    CHECK(int(out.size()) == size(), "collective " << tag << ": marked on " << out.size()
                                                   << " of " << size() << " replicas");
    return out;
  }
  DeviceRing ring_;
  std::vector<int> devices_;
  std::vector<cudaStream_t> streams_;
  std::map<int, std::vector<Event>> events_;  // per tag, per rank: re-recorded each step
};

}  // namespace

std::unique_ptr<Collective> make_cpu_ring(int replicas) {
  return std::make_unique<CpuRing>(replicas);
}

std::unique_ptr<Collective> make_gpu_ring(const std::vector<int>& devices,
                                          const std::vector<cudaStream_t>& streams) {
  return std::make_unique<GpuRing>(devices, streams);
}

DeviceRing* device_ring(Collective& c) {
  auto* g = dynamic_cast<GpuRing*>(&c);
  return g ? &g->ring() : nullptr;
}

}  // namespace cutrain
