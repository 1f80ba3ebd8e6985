// Engine: what concerns its replicas as a group: describing them and their links, averaging
// their BatchNorm statistics, finding where their weights differ (train/replicas/replica.h has the
// per-replica pieces).
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

void Engine::average_batchnorm() {
  // Once per state: evaluating and then saving the same step averages once (a second pass
  // could move a statistic by an ulp: the sum of R equal values times 1/R need not be exact).
  if (world_ == 1 || bn_averaged_) return;
  bn_averaged_ = true;
  // After the steps queued so far; every replica's queue waits for it (a GPU's host does not).
  const int R = replicas();  // in this process: the collective reaches the others
  for (auto& rep : replicas_) {
    const OnDevice on(rep->lane->context());
    collective_->mark(rep->rank, stats_tag());
  }
  const size_t layers = model().batchnorm_states().size();
  for (size_t i = 0; i < layers; i++)
    for (Tensor BatchNormState::*field : {&BatchNormState::running_mean,
                                          &BatchNormState::running_var}) {
      std::vector<void*> data;
      for (int r = 0; r < R; r++)
        data.push_back((model(r).batchnorm_states()[i].second->*field).raw());
      const Tensor& t0 = model(0).batchnorm_states()[i].second->*field;
      collective_->all_reduce(stats_tag(), data, t0.numel(), t0.dtype());
    }
  for (auto& rep : replicas_) {
    const OnDevice on(rep->lane->context());
    collective_->wait(rep->rank);
  }
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
