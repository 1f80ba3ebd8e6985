// Engine: what concerns its replicas as a group: describing them and their links, finding where
// their weights differ (train/replicas/replica.h has the per-replica pieces).
#include <sstream>
#include <vector>

#include "train/replicas/peer_access.h"
#include "train/replicas/replica.h"
#include "train/engine/engine.h"
#include "kernels/xxhash64.h"
#include "train/replicas/device_ring.h"
#include "train/replicas/mpi.h"

namespace cutrain {

std::string Engine::description() const {
  const int R = world_;
  if (R == 1) return "";
  std::ostringstream os;
  if (device_.mpi)
    os << R << " replicas (mpirun: one per process)";
  else
    os << R << " replicas (--devices " << cfg_.devices << ")";
  os << ", " << cfg_.batch / R << " images each of every batch of " << cfg_.batch
     << ", ring all-reduce of " << replicas_[0]->grads->describe();
  if (device_.device == Device::cuda || device_.mpi) os << "; " << collective_->describe();
  if (sync_bn_) os << "; BatchNorm synchronised over the replicas (--sync-bn)";
  return os.str();
}

std::string Engine::peer_report() const {
  DeviceRing* ring = collective_ ? device_ring(*collective_) : nullptr;
  if (!ring) return "";
  PeerMatrix m = ring->peers();
  // ~2 ms a pair over PCIe; its buffers go back to cudaFree with its streams.
  measure_copy_bandwidth(m, size_t(16) << 20, 5);
  return format_peer_matrix(m);
}

std::string Engine::replicas_difference() const {
  std::vector<Replica*> all;
  for (auto& rep : replicas_) all.push_back(rep.get());
  if (!device_.mpi) return replica_difference(all);
  // Under mpirun each process holds one replica: the xxh64 of each of its tensors, gathered,
  // against rank 0's.
  const Mpi& mpi = *device_.mpi;
  std::vector<std::string> names;
  std::vector<uint64_t> mine;
  for (const auto& [name, t] : replica_tensors(*all[0])) {
    const Tensor h = t->to(Context::cpu());
    names.push_back(name);
    mine.push_back(xxh64(h.raw(), h.bytes()));
  }
  std::vector<uint64_t> every(mine.size() * size_t(mpi.size()));
  mpi.all_gather(mine.data(), mine.size() * sizeof(uint64_t), every.data());
  for (int r = 1; r < mpi.size(); r++)
    for (size_t i = 0; i < mine.size(); i++) {
      const uint64_t ha = every[i], hb = every[size_t(r) * mine.size() + i];
      if (ha == hb) continue;
      char buf[64];
      std::snprintf(buf, sizeof buf, " (xxh64 %016llx against %016llx)", (unsigned long long)hb,
                    (unsigned long long)ha);
      return "replica " + std::to_string(r) + " differs from replica 0 in '" + names[i] + "'" +
             buf;
    }
  return "";
}

}  // namespace cutrain
