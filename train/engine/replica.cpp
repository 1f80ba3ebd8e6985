// The replica helpers (see replica.h).
#include "train/engine/replica.h"

#include <cstdio>
#include <cstring>

#include "kernels/xxhash64.h"

namespace cutrain {

namespace {
// A replica's tensor on the host: itself on the CPU; from a GPU, a copy ordered after the work
// queued for the replica (on its compute stream, where its tensors were made), waited for.
Tensor on_host(const Replica& rep, const Tensor& t) {
  if (t.device() == Device::cpu) return t;
  const OnDevice on(rep.lane->context());
  return t.to(Context::cpu());
}
}  // namespace

std::string overflow_name(const std::vector<char>& overflowed,
                          const std::function<std::string(int)>& param) {
  const int R = int(overflowed.size());
  int first = -1, count = 0;
  for (int r = 0; r < R; r++)
    if (overflowed[size_t(r)]) {
      if (first < 0) first = r;
      count++;
    }
  if (first < 0) return "";
  return count < R ? "replica " + std::to_string(first) + ": " + param(first) : param(first);
}

std::vector<std::pair<std::string, Tensor*>> state_tensors(Model& model, Optimizer& opt) {
  std::vector<std::pair<std::string, Tensor*>> all;
  for (const VarPtr& p : model.parameters()) all.emplace_back(p->name, &p->value);
  for (auto& t : opt.state_tensors()) all.push_back(t);
  // BatchNorm's statistics are equal on every replica too: one update a step
  for (auto& t : model.batchnorm_tensors()) all.push_back(t);
  return all;
}

std::string replica_difference(const std::vector<Replica*>& replicas) {
  const auto ref = replica_tensors(*replicas[0]);
  std::vector<Tensor> ref_host;  // replica 0's, copied once
  for (const auto& named : ref) ref_host.push_back(on_host(*replicas[0], *named.second));
  for (size_t r = 1; r < replicas.size(); r++) {
    const auto other = replica_tensors(*replicas[r]);
    for (size_t i = 0; i < ref.size(); i++) {
      const Tensor& a = ref_host[i];
      const Tensor b = on_host(*replicas[r], *other[i].second);
      const uint64_t ha = xxh64(a.raw(), a.bytes()), hb = xxh64(b.raw(), b.bytes());
      if (ha != hb || std::memcmp(a.raw(), b.raw(), a.bytes()) != 0) {
        char buf[64];
        std::snprintf(buf, sizeof buf, " (xxh64 %016llx against %016llx)",
                      (unsigned long long)hb, (unsigned long long)ha);
        return "replica " + std::to_string(r) + " differs from replica 0 in '" + ref[i].first +
               "'" + buf;
      }
    }
  }
  return "";
}

}  // namespace cutrain
