// defines: PeerMatrix (which of the replicas' GPUs can read each other's memory, and the
// measured copy bandwidth between every pair), enable_peer_access, measure_copy_bandwidth and
// format_peer_matrix (the table the run prints at start, [replicas] issue).
//
// Why it matters: the CUDA ring (train/replicas/device_ring.h) copies each chunk from the left
// neighbour's memory. Between two GPUs that can access each other (NVLink, or PCIe peer to
// peer under one root complex) that is one cudaMemcpyPeerAsync; otherwise the chunk goes
// through pinned host memory, two copies over PCIe, at well under half the speed. The matrix
// says which links a run gets, the bandwidths what the all-reduce can reach at best.
//
// format_peer_matrix is a pure function of a PeerMatrix, so it is tested on the CPU with a
// made-up matrix; the other two need CUDA (they throw in a CPU-only build).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace cutrain {

struct PeerMatrix {
  std::vector<int> devices;              // the distinct device ordinals, ascending
  // access[i][j]: devices[i] can read and write devices[j]'s memory (peer access enabled);
  // true on the diagonal (a device's own memory).
  std::vector<std::vector<bool>> access;
  // gb_per_s[i][j]: measured copy bandwidth from devices[i] to devices[j] in GB/s (1e9 B/s);
  // the diagonal is a copy within one device. Empty until measure_copy_bandwidth.
  std::vector<std::vector<double>> gb_per_s;

  int index(int device) const;           // position of `device` in devices; throws if absent
  // Can a copy between devices a and b go direct (same device, or peer access both ways)?
  bool direct(int a, int b) const;
};

// The distinct devices of `devices` (repeats allowed, as in --devices 0,0), with peer access
// enabled between every pair where cudaDeviceCanAccessPeer allows it, in both directions.
// Enabling is idempotent (an already enabled pair counts as enabled).
PeerMatrix enable_peer_access(const std::vector<int>& devices);

// Fills m.gb_per_s: for every ordered pair (and every device with itself), `reps` copies of
// `bytes` (after one warm-up copy) timed with events on a stream of the destination device;
// cudaMemcpyPeerAsync between two devices (the driver stages it through the host where peer
// access is off), cudaMemcpyAsync within one. Synchronises: call it at start, not in a step.
void measure_copy_bandwidth(PeerMatrix& m, size_t bytes = size_t(64) << 20, int reps = 5);

// The table, e.g. for devices 0 and 1 with peer access and measured bandwidths:
//   peer access (row reads column's memory):
//             gpu0    gpu1
//     gpu0    self     yes
//     gpu1     yes    self
//   copy bandwidth, GB/s (row -> column; diagonal: within one device):
//             gpu0    gpu1
//     gpu0  1480.3    45.1
//     gpu1    44.9  1479.8
// The bandwidth part only when gb_per_s is filled.
std::string format_peer_matrix(const PeerMatrix& m);

}  // namespace cutrain
