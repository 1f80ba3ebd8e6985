// GradBuckets: the flat gradient buffers and their buckets (see grad_buckets.h).
#include "train/grad_buckets.h"

#include <cstdio>
#include <cstring>

#include "kernels/check.h"

namespace cutrain {

namespace {
// "block2.conv1.w" -> "block2.conv1"; an unnamed parameter is a layer of its own.
std::string layer_of(const std::string& param) {
  const size_t dot = param.rfind('.');
  return dot == std::string::npos ? param : param.substr(0, dot);
}

// Every gradient starts kAlignBytes into its buffer: cuDNN wants at least 4-byte aligned
// pointers, and the vector loads of the kernels and cuBLAS 16 (an fp16 bias of 10 classes
// would leave the next gradient 4-byte aligned). The elements a parameter's gradient takes in
// its buffer: its own, rounded up to that. The padding stays zero (nothing writes it; zero()
// clears it with the rest), so all-reducing it is harmless.
constexpr size_t kAlignBytes = 16;
int64_t slot_elements(const Tensor& t) {
  const int64_t per = int64_t(kAlignBytes / dtype_size(t.dtype()));
  return (t.numel() + per - 1) / per * per;
}
}  // namespace

GradBuckets::GradBuckets(const std::vector<VarPtr>& params, size_t min_bytes) {
  CHECK(!params.empty(), "GradBuckets: no parameters");
  // Reverse parameter order: the order backward completes them.
  std::vector<VarPtr> order(params.rbegin(), params.rend());
  std::vector<DType> dtypes;
  std::vector<int64_t> sizes;  // elements per dtype buffer
  std::vector<std::pair<int, int64_t>> place;  // per parameter (in `order`): buffer, offset
  const Device device = order[0]->value.device();
  for (const VarPtr& p : order) {
    CHECK(p->value.device() == device, "GradBuckets: parameter " << p->name << " is on "
                                           << device_name(p->value.device()) << ", "
                                           << order[0]->name << " on " << device_name(device));
    size_t b = 0;
    while (b < dtypes.size() && dtypes[b] != p->value.dtype()) b++;
    if (b == dtypes.size()) {
      dtypes.push_back(p->value.dtype());
      sizes.push_back(0);
    }
    place.emplace_back(int(b), sizes[b]);
    sizes[b] += slot_elements(p->value);
    gradients_ += p->value.numel();
  }
  // On a GPU: on the current device, zeroed on this thread's stream (nn/gpu_context.h).
  for (size_t b = 0; b < dtypes.size(); b++)
    flat_.push_back(Tensor::zeros({int(sizes[b])}, dtypes[b], device));

  // Buckets: walk in backward order; a new bucket at a dtype change, or at a new layer once
  // the current bucket has min_bytes.
  int current = -1;
  std::string current_layer;
  for (size_t i = 0; i < order.size(); i++) {
    const VarPtr& p = order[i];
    const auto [b, offset] = place[i];
    p->grad = flat_[size_t(b)].flat_view(offset, p->value.shape());
    const std::string layer = layer_of(p->name);
    const size_t es = dtype_size(p->value.dtype());
    bool fresh = current < 0 || buckets_[size_t(current)].dtype != p->value.dtype();
    if (!fresh && layer != current_layer) {
      const GradBucket& c = buckets_[size_t(current)];
      const bool contiguous = static_cast<char*>(c.data) + size_t(c.numel) * es ==
                              static_cast<char*>(p->grad.raw());
      fresh = !contiguous || size_t(c.numel) * es >= min_bytes;
    }
    if (fresh) {
      GradBucket nb;
      nb.dtype = p->value.dtype();
      nb.data = p->grad.raw();
      nb.layers = layer;
      buckets_.push_back(nb);
      current = int(buckets_.size()) - 1;
    } else if (layer != current_layer) {
      // "a..b": keep the first layer and the latest
      GradBucket& c = buckets_[size_t(current)];
      c.layers = c.layers.substr(0, c.layers.find("..")) + ".." + layer;
    }
    current_layer = layer;
    GradBucket& c = buckets_[size_t(current)];
    c.numel += slot_elements(p->value);  // with its padding: buckets tile the buffer
    c.params++;
    CHECK(!bucket_of_.count(p.get()), "GradBuckets: parameter " << p->name << " given twice");
    bucket_of_[p.get()] = current;
  }
  pending_.assign(buckets_.size(), 0);
}

int64_t GradBuckets::numel() const { return gradients_; }

size_t GradBuckets::bytes() const {
  size_t n = 0;
  for (const Tensor& t : flat_) n += t.bytes();
  return n;
}

std::string GradBuckets::describe() const {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%zu buckets, %lld gradients (%.1f KiB):", buckets_.size(),
                (long long)numel(), double(bytes()) / 1024.0);
  std::string s = buf;
  for (size_t k = 0; k < buckets_.size(); k++) {
    const GradBucket& b = buckets_[k];
    std::snprintf(buf, sizeof buf, "%s %s (%.1f KiB %s)", k ? "," : "", b.layers.c_str(),
                  double(b.numel) * double(dtype_size(b.dtype)) / 1024.0, dtype_name(b.dtype));
    s += buf;
  }
  return s;
}

void GradBuckets::arm() {
  for (size_t k = 0; k < buckets_.size(); k++) pending_[k] = buckets_[k].params;
}

int GradBuckets::ready(const Var& v) {
  auto it = bucket_of_.find(&v);
  if (it == bucket_of_.end()) return -1;
  const int k = it->second;
  if (pending_[size_t(k)] <= 0) return -1;  // already counted complete
  return --pending_[size_t(k)] == 0 ? k : -1;
}

std::vector<int> GradBuckets::finish() {
  std::vector<int> late;
  for (size_t k = 0; k < buckets_.size(); k++)
    if (pending_[k] > 0) {
      pending_[k] = 0;
      late.push_back(int(k));
    }
  return late;
}

void GradBuckets::zero() {
  for (Tensor& t : flat_) t.zero_();
}

}  // namespace cutrain
