// defines: DeviceRing, the ring all-reduce of R data-parallel replicas that each live on a CUDA
// device (the GPU twin of the CPU Ring, train/replicas/ring.h), and DeviceRingOptions.
//
// The algorithm and the schedule are the CPU Ring's (ring_chunk, ring_send_chunk,
// ring_recv_chunk): the same chunks, added in the same order by the same reduce
// (ring_reduce_gpu, bit-identical to ring_reduce_cpu), so a DeviceRing gives exactly the bits
// of a Ring on the same inputs, on every replica.
//
// Per replica r: a comm stream on its device, a receive buffer of one chunk, and events. Each
// ring step t (2(R-1) of them) of replica r, all on its comm stream:
//   1. wait for the left neighbour's step t-1 (its chunk is final), and in the all-gather also
//      for the right neighbour's step t-(R-1) (it has read the chunk r is about to overwrite);
//   2. copy chunk ring_recv_chunk(R, r, t) from the left neighbour's buffer: into the receive
//      buffer (reduce-scatter) or straight into r's own buffer (all-gather). The copy is
//        same device          cudaMemcpyAsync, device to device (--devices 0,0);
//        peer access          cudaMemcpyPeerAsync (NVLink or PCIe peer to peer);
//        neither (or forced)  staged: the left's comm stream copies the chunk into pinned host
//                             memory and records an event; r's stream waits for it and copies
//                             it to the device (the left waits for r's previous host-to-device
//                             copy before it overwrites the pinned slot);
//   3. reduce-scatter only: ring_reduce_gpu(own chunk += received) (x 1/R at the last step);
//   4. record "step t done".
// The data flow is pulled (r reads from r-1), so each replica's buffers are written only by
// its own streams; the cross-replica orderings are all cudaStreamWaitEvent, never a host sync.
// At the end r's comm stream also waits for the right neighbour's last step (the last read of
// r's buffer), so a compute stream that waited for r may overwrite the buffer at once.
//
// Threading: all_reduce and any queue the work of every replica and return; call them from
// one host thread (e.g. a ring driver thread), each after every replica's "bucket ready"
// event was recorded on the host side (a wait captures an event's latest record, as
// cudaStreamWaitEvent does). Buckets queued one after another run one after another on the
// comm streams, in the same order on every replica.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/gpu_timeline.h"
#include "kernels/gpu.h"
#include "nn/tensor.h"
#include "train/replicas/peer_access.h"

namespace cutrain {

struct DeviceRingOptions {
  // Every link through pinned host memory, even on one device or between peers: tests the
  // fallback path on a single GPU (it must give the same bits).
  bool force_staged = false;
};

class DeviceRing {
 public:
  enum class Path { same_device, peer, staged };

  // devices[r]: replica r's device ordinal; repeats allowed (--devices 0,0). Enables peer
  // access between the distinct devices (enable_peer_access) and picks every link's path.
  // Throws when no GPU is usable (and always in a CPU-only build).
  explicit DeviceRing(std::vector<int> devices, DeviceRingOptions options = {});
  ~DeviceRing();  // synchronises the comm streams (shutdown)
  DeviceRing(const DeviceRing&) = delete;
  DeviceRing& operator=(const DeviceRing&) = delete;

  int size() const;
  int device(int r) const;
  cudaStream_t comm_stream(int r) const;
  Path link_path(int r) const;           // the link (r-1) -> r
  const PeerMatrix& peers() const;
  static const char* path_name(Path p);  // "same-device", "peer", "staged"
  // "3 replicas on gpu 0,0,0, ring links: same-device x3"
  std::string describe() const;

  // Queues the all-reduce of one bucket: data[r] is replica r's device pointer (on
  // device(r)) to n elements of dtype f32, f16 or f64, the same n on every replica. ready[r]
  // (may be empty, or hold nullptr) is an event recorded on replica r's compute stream when
  // the bucket is complete; r's comm stream waits for it first. When the comm streams get
  // there, every data[r] holds the sum over the replicas, times 1/R when `average`: the bits
  // Ring::all_reduce gives for the same inputs. Returns at once.
  void all_reduce(const std::vector<void*>& data, int64_t n, DType dtype, bool average,
                  const std::vector<cudaEvent_t>& ready = {});

  // Queues the OR of the optimizer step's overflow flags: flags[r] is n int32 on device(r)
  // (one per parameter); afterwards every replica's flag i holds the bitwise OR of all flags
  // i (nonzero on every replica when nonzero on any).
  void any(const std::vector<int32_t*>& flags, int64_t n,
           const std::vector<cudaEvent_t>& ready = {});

  // Makes `stream` (replica r's compute stream, on device(r)) wait, on the device, for
  // everything queued for replica r so far, including the right neighbour's last read of
  // r's buffers. No host block.
  void wait(int r, cudaStream_t stream) const;

  // Bytes copied into replica r (from its left neighbour) by the work queued so far.
  int64_t bytes_received(int r) const;

  // With a tracer: a row per comm stream ("comm stream (replica r, cuda:D)", data/
  // gpu_timeline.h) with a span per collective from when its inputs are ready to when
  // replica r's part is done ("all-reduce" with its element count, "overflow OR"). Call once,
  // before the collectives to trace; collect_trace(false) now and then moves the finished
  // spans into the tracer, collect_trace(true) waits for all of them.
  void trace(Tracer* tracer);
  void collect_trace(bool wait);

 private:
  struct Node;  // ring position r: replica r's comm stream, receive buffer, stage and events
  // The ring over data[r] (elem_size bytes an element); reduce(r, dst, src, elems, last)
  // queues the reduce-scatter's reduce on replica r's comm stream.
  template <typename Reduce>
  void run(const char* what, const std::vector<void*>& data, int64_t n, size_t elem_size,
           const std::vector<cudaEvent_t>& ready, Reduce&& reduce);
  void reserve(size_t chunk_bytes);

  int R_ = 0;
  PeerMatrix peers_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

}  // namespace cutrain
