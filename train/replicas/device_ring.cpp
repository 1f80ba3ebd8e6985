// DeviceRing: the CUDA ring all-reduce (the algorithm, the copy paths and the orderings are in
// device_ring.h; the schedule is the CPU Ring's, train/replicas/ring.h).
#include "train/replicas/device_ring.h"

#include <sstream>

#include "kernels/check.h"
#include "kernels/ring_reduce.h"
#include "train/replicas/ring.h"

namespace cutrain {

const char* DeviceRing::path_name(Path p) {
  switch (p) {
    case Path::same_device: return "same-device";
    case Path::peer: return "peer";
    case Path::staged: return "staged";
  }
  return "?";
}

#if defined(CUTRAIN_CUDA)

struct DeviceRing::Node {
  int device = 0;
  Path in = Path::same_device;  // the link (r-1) -> r
  Stream comm;
  DeviceBuffer recv;            // one chunk from the left neighbour (reduce-scatter)
  PinnedBuffer out_stage;       // staged link r -> r+1: the chunk r sends, in host memory
  std::vector<Event> step_done; // per ring step t: r's copy (and reduce) of step t finished
  Event entered;                // r's comm stream has passed the bucket's ready event
  Event finished;               // everything queued for r, the right neighbour's reads included
  Event staged;                 // r's latest copy into out_stage
  Event taken;                  // r's latest copy out of the left neighbour's out_stage
  int64_t bytes = 0;
  std::unique_ptr<GpuTimeline> timeline;  // with trace(); destroyed before `comm`

  // Construct with `dev` current: events belong to the device current at their creation.
  Node(int dev, int R) : device(dev), comm(dev) {
    for (int t = 0; t < 2 * (R - 1); t++) step_done.emplace_back(false);
  }
};

DeviceRing::DeviceRing(std::vector<int> devices, DeviceRingOptions options)
    : R_(int(devices.size())) {
  CHECK(R_ >= 1, "DeviceRing: need at least one replica");
  CHECK(gpu_usable(), "DeviceRing: " << gpu_unavailable_reason());
  peers_ = enable_peer_access(devices);  // checks that every device exists
  for (int r = 0; r < R_; r++) {
    DeviceGuard on(devices[size_t(r)]);
    nodes_.push_back(std::make_unique<Node>(devices[size_t(r)], R_));
  }
  for (int r = 0; r < R_; r++) {
    const int left = devices[size_t((r + R_ - 1) % R_)], me = devices[size_t(r)];
    Path& p = nodes_[size_t(r)]->in;
    if (options.force_staged) p = Path::staged;
    else if (left == me) p = Path::same_device;
    else if (peers_.direct(left, me)) p = Path::peer;
    else p = Path::staged;
  }
}

DeviceRing::~DeviceRing() {
  for (auto& node : nodes_) node->comm.synchronize();  // the pinned slots may still be read
}

int DeviceRing::size() const { return R_; }
int DeviceRing::device(int r) const { return nodes_.at(size_t(r))->device; }
cudaStream_t DeviceRing::comm_stream(int r) const { return nodes_.at(size_t(r))->comm.get(); }
DeviceRing::Path DeviceRing::link_path(int r) const { return nodes_.at(size_t(r))->in; }
const PeerMatrix& DeviceRing::peers() const { return peers_; }
int64_t DeviceRing::bytes_received(int r) const { return nodes_.at(size_t(r))->bytes; }

std::string DeviceRing::describe() const {
  std::ostringstream os;
  os << R_ << (R_ == 1 ? " replica" : " replicas") << " on gpu ";
  for (int r = 0; r < R_; r++) os << (r ? "," : "") << device(r);
  if (R_ > 1) {
    int count[3] = {0, 0, 0};
    for (int r = 0; r < R_; r++) count[int(link_path(r))]++;
    os << ", ring links:";
    const char* sep = " ";
    for (Path p : {Path::same_device, Path::peer, Path::staged})
      if (count[int(p)]) os << sep << path_name(p) << " x" << count[int(p)], sep = ", ";
  }
  return os.str();
}

void DeviceRing::wait(int r, cudaStream_t stream) const {
  nodes_.at(size_t(r))->finished.wait(stream);
}

// Receive buffers (device, stream-ordered reuse through the caching allocator: no sync) and
// the pinned staging slots of staged links (grown only on the first buckets; replacing one
// waits for the two comm streams that use it, since pinned memory has no stream order).
void DeviceRing::reserve(size_t chunk_bytes) {
  if (chunk_bytes == 0) return;
  for (int r = 0; r < R_; r++) {
    Node& node = *nodes_[size_t(r)];
    if (node.recv.bytes() < chunk_bytes)
      node.recv = DeviceBuffer(chunk_bytes, node.device, node.comm.get());
    Node& right = *nodes_[size_t((r + 1) % R_)];
    if (right.in == Path::staged && node.out_stage.bytes() < chunk_bytes) {
      node.comm.synchronize();
      right.comm.synchronize();
      node.out_stage = PinnedBuffer(chunk_bytes);
    }
  }
}

void DeviceRing::trace(Tracer* tracer) {
  for (int r = 0; r < R_; r++) {
    Node& node = *nodes_[size_t(r)];
    node.timeline = std::make_unique<GpuTimeline>(
        tracer,
        "comm stream (replica " + std::to_string(r) + ", cuda:" + std::to_string(node.device) + ")",
        node.comm.get());
  }
}

void DeviceRing::collect_trace(bool wait) {
  for (auto& node : nodes_) {
    if (!node->timeline) continue;
    if (wait)
      node->timeline->flush();
    else
      node->timeline->collect();
  }
}

template <typename Reduce>
void DeviceRing::run(const char* what, const std::vector<void*>& data, int64_t n, size_t es,
                     const std::vector<cudaEvent_t>& ready, Reduce&& reduce) {
  const int R = R_;
  CHECK(int(data.size()) == R, "all-reduce: " << data.size() << " buffers for " << R
                                              << " replicas");
  CHECK(ready.empty() || int(ready.size()) == R,
        "all-reduce: " << ready.size() << " ready events for " << R << " replicas");
  CHECK(n >= 0, "all-reduce of " << n << " elements");
  for (int r = 0; r < R; r++) CHECK(n == 0 || data[size_t(r)], "all-reduce: null buffer");
  if (R > 1) reserve(size_t((n + R - 1) / R) * es);  // the largest chunk of ring_chunk
  auto at = [&](int r) -> Node& { return *nodes_[size_t(((r % R) + R) % R)]; };
  auto buf = [&](int r) { return static_cast<unsigned char*>(data[size_t(((r % R) + R) % R)]); };

  for (int r = 0; r < R; r++) {
    Node& me = at(r);
    DeviceGuard on(me.device);
    if (!ready.empty() && ready[size_t(r)])
      CUDA_CHECK(cudaStreamWaitEvent(me.comm.get(), ready[size_t(r)], 0));
    me.entered.record(me.comm.get());
    if (me.timeline) me.timeline->begin(what, {"elements", n});
  }
  const int steps = 2 * (R - 1);
  for (int t = 0; t < steps; t++) {
    // A. staged links: the sender puts the chunk it sends at step t into pinned memory. In
    // its stream order this follows its step t-1, which made the chunk final.
    for (int r = 0; r < R; r++) {
      Node& me = at(r);
      Node& right = at(r + 1);
      if (right.in != Path::staged) continue;
      DeviceGuard on(me.device);
      const auto [b, e] = ring_chunk(n, R, ring_send_chunk(R, r, t));
      right.taken.wait(me.comm.get());  // the previous message was copied out of the slot
      if (e > b)
        CUDA_CHECK(cudaMemcpyAsync(me.out_stage.data(), buf(r) + b * int64_t(es),
                                   size_t(e - b) * es, cudaMemcpyDeviceToHost, me.comm.get()));
      me.staged.record(me.comm.get());
    }
    // B. every receiver copies the chunk from its left neighbour. All waits of step t are
    // queued before any event of step t is recorded, so each captures step t-1's record.
    for (int r = 0; r < R; r++) {
      Node& me = at(r);
      Node& left = at(r - 1);
      DeviceGuard on(me.device);
      cudaStream_t s = me.comm.get();
      const auto [b, e] = ring_chunk(n, R, ring_recv_chunk(R, r, t));
      const size_t bytes = size_t(e - b) * es;
      const bool gather = t >= R - 1;
      if (me.in == Path::staged)
        left.staged.wait(s);
      else
        (t == 0 ? left.entered : left.step_done[size_t(t - 1)]).wait(s);
      // all-gather overwrites r's chunk, which the right neighbour read at its reduce-scatter
      // step t-(R-1): wait until it has. (Implied by the chain of left waits, R-1 hops round
      // the ring lead to the right neighbour at step t-(R-1); explicit so that the order does
      // not rest on that argument.)
      if (gather) at(r + 1).step_done[size_t(t - (R - 1))].wait(s);
      void* dst = gather ? static_cast<void*>(buf(r) + b * int64_t(es)) : me.recv.data();
      const unsigned char* src = buf(r - 1) + b * int64_t(es);
      if (bytes) {
        switch (me.in) {
          case Path::same_device:
            CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
            break;
          case Path::peer:
            CUDA_CHECK(cudaMemcpyPeerAsync(dst, me.device, src, left.device, bytes, s));
            break;
          case Path::staged:
            CUDA_CHECK(cudaMemcpyAsync(dst, left.out_stage.data(), bytes,
                                       cudaMemcpyHostToDevice, s));
            break;
        }
      }
      if (me.in == Path::staged) me.taken.record(s);
      me.bytes += int64_t(bytes);
    }
    // C. reduce-scatter: add the received chunk into r's own (x 1/R at the last step); then
    // step t is done on r.
    for (int r = 0; r < R; r++) {
      Node& me = at(r);
      DeviceGuard on(me.device);
      if (t < R - 1) {
        const auto [b, e] = ring_chunk(n, R, ring_recv_chunk(R, r, t));
        reduce(r, buf(r) + b * int64_t(es), me.recv.data(), e - b, t == R - 2);
      }
      me.step_done[size_t(t)].record(me.comm.get());
    }
  }
  // The right neighbour's last step is its last read of r's buffer: after it, r's compute
  // stream may write the buffer again.
  for (int r = 0; r < R; r++) {
    Node& me = at(r);
    DeviceGuard on(me.device);
    if (R > 1) at(r + 1).step_done[size_t(steps - 1)].wait(me.comm.get());
    me.finished.record(me.comm.get());
    if (me.timeline) me.timeline->end();
  }
}

void DeviceRing::all_reduce(const std::vector<void*>& data, int64_t n, DType dtype,
                            bool average, const std::vector<cudaEvent_t>& ready) {
  CHECK(dtype != DType::i32, "all_reduce: i32 buffers are not reduced (use any)");
  const double last_scale = average ? 1.0 / R_ : 1.0;
  run("all-reduce", data, n, dtype_size(dtype), ready,
      [&](int r, void* dst, const void* src, int64_t elems, bool last) {
        const double scale = last ? last_scale : 1.0;
        cudaStream_t s = comm_stream(r);
        switch (dtype) {
          case DType::f32:
            ring_reduce_gpu<float>(elems, static_cast<float*>(dst),
                                   static_cast<const float*>(src), scale, s);
            break;
          case DType::f16:
            ring_reduce_gpu<half_t>(elems, static_cast<half_t*>(dst),
                                    static_cast<const half_t*>(src), scale, s);
            break;
          case DType::f64:
            ring_reduce_gpu<double>(elems, static_cast<double*>(dst),
                                    static_cast<const double*>(src), scale, s);
            break;
          case DType::i32: break;  // refused above
        }
      });
}

void DeviceRing::any(const std::vector<int32_t*>& flags, int64_t n,
                     const std::vector<cudaEvent_t>& ready) {
  std::vector<void*> data(flags.begin(), flags.end());
  run("overflow OR", data, n, sizeof(int32_t), ready,
      [&](int r, void* dst, const void* src, int64_t elems, bool) {
        ring_or_gpu(elems, static_cast<int32_t*>(dst), static_cast<const int32_t*>(src),
                    comm_stream(r));
      });
}

#else  // CPU-only build: the type exists, constructing one says why it cannot

struct DeviceRing::Node {};

DeviceRing::DeviceRing(std::vector<int>, DeviceRingOptions) {
  throw Error("DeviceRing: " + gpu_unavailable_reason());
}
DeviceRing::~DeviceRing() = default;
int DeviceRing::size() const { return R_; }
int DeviceRing::device(int) const { return 0; }
cudaStream_t DeviceRing::comm_stream(int) const { return nullptr; }
DeviceRing::Path DeviceRing::link_path(int) const { return Path::same_device; }
const PeerMatrix& DeviceRing::peers() const { return peers_; }
std::string DeviceRing::describe() const { return "no GPU ring (CPU-only build)"; }
void DeviceRing::all_reduce(const std::vector<void*>&, int64_t, DType, bool,
                            const std::vector<cudaEvent_t>&) {}
void DeviceRing::any(const std::vector<int32_t*>&, int64_t, const std::vector<cudaEvent_t>&) {}
void DeviceRing::wait(int, cudaStream_t) const {}
int64_t DeviceRing::bytes_received(int) const { return 0; }
void DeviceRing::trace(Tracer*) {}
void DeviceRing::collect_trace(bool) {}

#endif

}  // namespace cutrain
