// Trainer: what concerns its replicas as a group: describing them and their links, averaging
// their BatchNorm statistics, finding where their weights differ (train/replica.h has the
// per-replica pieces).
#include <sstream>
#include <vector>

#include "train/peer_access.h"
#include "train/replica.h"
#include "train/trainer.h"
#include "train/trainer_gpu.h"

namespace cutrain {

std::string Trainer::replicas_description() const {
  const int R = replicas();
  if (R == 1) return "";
  std::ostringstream os;
  os << R << " replicas (--devices " << cfg_.devices << "), " << cfg_.batch / R
     << " images each of every batch of " << cfg_.batch << ", ring all-reduce of "
     << replicas_[0]->grads->describe();
  if (gpu_) os << "; " << gpu_->ring->describe();
  return os.str();
}

std::string Trainer::peer_report() const {
  if (!gpu_ || !gpu_->ring) return "";
  PeerMatrix m = gpu_->ring->peers();
  // ~2 ms a pair over PCIe; its buffers go back to cudaFree with its streams.
  measure_copy_bandwidth(m, size_t(16) << 20, 5);
  return format_peer_matrix(m);
}

void Trainer::average_batchnorm() {
  // Once per state: evaluating and then saving the same step averages once (a second pass
  // could move a statistic by an ulp: the sum of R equal values times 1/R need not be exact).
  if (replicas() == 1 || bn_averaged_) return;
  bn_averaged_ = true;
  if (gpu_) {
    average_batchnorm_gpu();
    return;
  }
  std::vector<Replica*> all;
  for (auto& rep : replicas_) all.push_back(rep.get());
  average_batchnorm_stats(all);
}

std::string Trainer::replicas_difference() const {
  std::vector<Replica*> all;
  for (auto& rep : replicas_) all.push_back(rep.get());
  return replica_difference(all);
}

}  // namespace cutrain
