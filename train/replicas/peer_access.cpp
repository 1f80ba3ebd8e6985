// The peer-access matrix and the copy bandwidths (peer_access.h).
#include "train/replicas/peer_access.h"

#include <algorithm>
#include <cstdio>

#include "kernels/check.h"
#include "kernels/gpu.h"

namespace cutrain {

int PeerMatrix::index(int device) const {
  const auto it = std::find(devices.begin(), devices.end(), device);
  CHECK(it != devices.end(), "device " << device << " is not in the peer matrix");
  return int(it - devices.begin());
}

bool PeerMatrix::direct(int a, int b) const {
  if (a == b) return true;
  const size_t i = size_t(index(a)), j = size_t(index(b));
  return access[i][j] && access[j][i];
}

std::string format_peer_matrix(const PeerMatrix& m) {
  const size_t n = m.devices.size();
  auto header = [&](std::string& s) {
    s += "          ";
    char cell[32];
    for (int d : m.devices) {
      std::snprintf(cell, sizeof cell, "%8s", ("gpu" + std::to_string(d)).c_str());
      s += cell;
    }
    s += "\n";
  };
  auto row_label = [&](std::string& s, size_t i) {
    char cell[32];
    std::snprintf(cell, sizeof cell, "  %-8s", ("gpu" + std::to_string(m.devices[i])).c_str());
    s += cell;
  };
  std::string s = "peer access (row reads column's memory):\n";
  header(s);
  for (size_t i = 0; i < n; i++) {
    row_label(s, i);
    for (size_t j = 0; j < n; j++) {
      char cell[32];
      std::snprintf(cell, sizeof cell, "%8s", i == j ? "self" : m.access[i][j] ? "yes" : "no");
      s += cell;
    }
    s += "\n";
  }
  if (m.gb_per_s.size() == n && n > 0) {
    s += "copy bandwidth, GB/s (row -> column; diagonal: within one device):\n";
    header(s);
    for (size_t i = 0; i < n; i++) {
      row_label(s, i);
      for (size_t j = 0; j < n; j++) {
        char cell[32];
        std::snprintf(cell, sizeof cell, "%8.1f", m.gb_per_s[i][j]);
        s += cell;
      }
      s += "\n";
    }
  }
  return s;
}

#if defined(CUTRAIN_CUDA)

namespace {
std::vector<int> distinct(std::vector<int> devices) {
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  return devices;
}
}  // namespace

PeerMatrix enable_peer_access(const std::vector<int>& devices) {
  CHECK(gpu_usable(), "peer access: " << gpu_unavailable_reason());
  PeerMatrix m;
  m.devices = distinct(devices);
  const size_t n = m.devices.size();
  for (int d : m.devices)
    CHECK(d >= 0 && d < gpu_count(), "device " << d << " does not exist (" << gpu_count()
                                                 << " usable)");
  m.access.assign(n, std::vector<bool>(n, false));
  const DeviceGuard restore(current_device());  // the loop below changes it
  for (size_t i = 0; i < n; i++) {
    m.access[i][i] = true;
    for (size_t j = 0; j < n; j++) {
      if (i == j) continue;
      int can = 0;
      CUDA_CHECK(cudaDeviceCanAccessPeer(&can, m.devices[i], m.devices[j]));
      if (!can) continue;
      CUDA_CHECK(cudaSetDevice(m.devices[i]));
      const cudaError_t e = cudaDeviceEnablePeerAccess(m.devices[j], 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // an answer, not a failure: clear it
      } else {
        CUDA_CHECK(e);
      }
      m.access[i][j] = true;
    }
  }
  return m;
}

void measure_copy_bandwidth(PeerMatrix& m, size_t bytes, int reps) {
  CHECK(bytes > 0 && reps > 0, "measure_copy_bandwidth: " << bytes << " bytes x " << reps);
  const size_t n = m.devices.size();
  m.gb_per_s.assign(n, std::vector<double>(n, 0.0));
  const DeviceGuard restore(current_device());  // the loop below changes it
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) {
      const int src_dev = m.devices[i], dst_dev = m.devices[j];
      CUDA_CHECK(cudaSetDevice(dst_dev));  // the stream and events live on the destination
      Stream stream(dst_dev);
      Event start(true), stop(true);
      DeviceBuffer src(bytes, src_dev, stream.get()), dst(bytes, dst_dev, stream.get());
      CUDA_CHECK(cudaSetDevice(src_dev));
      CUDA_CHECK(cudaMemset(src.data(), 1, bytes));
      CUDA_CHECK(cudaDeviceSynchronize());
      CUDA_CHECK(cudaSetDevice(dst_dev));
      auto copy = [&] {
        if (src_dev == dst_dev)
          CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice,
                                     stream.get()));
        else
          CUDA_CHECK(cudaMemcpyPeerAsync(dst.data(), dst_dev, src.data(), src_dev, bytes,
                                         stream.get()));
      };
      copy();  // warm-up
      start.record(stream.get());
      for (int k = 0; k < reps; k++) copy();
      stop.record(stream.get());
      stop.synchronize();
      const double ms = stop.ms_since(start);
      m.gb_per_s[i][j] = ms > 0 ? double(bytes) * reps / (ms * 1e-3) / 1e9 : 0.0;
    }
}

#else  // CPU-only build

PeerMatrix enable_peer_access(const std::vector<int>&) {
  throw Error("peer access: " + gpu_unavailable_reason());
}
void measure_copy_bandwidth(PeerMatrix&, size_t, int) {
  throw Error("copy bandwidth: " + gpu_unavailable_reason());
}

#endif

}  // namespace cutrain
