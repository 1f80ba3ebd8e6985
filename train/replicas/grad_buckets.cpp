// GradBuckets: the flat gradient buffers and their buckets (see grad_buckets.h).
#include "train/replicas/grad_buckets.h"

#include <algorithm>
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
  // Where the parameters were made: on a GPU their device and stream (the replica's).
  for (size_t b = 0; b < dtypes.size(); b++)
    flat_.push_back(Tensor::zeros({int(sizes[b])}, dtypes[b], order[0]->value.home()));

  // Buckets: walk in backward order, each dtype's buffer on its own: a parameter joins the
  // open bucket of its dtype, which closes at a new layer once it holds min_bytes. Then the
  // buckets are listed in the order backward completes them (by their last parameter), the
  // order they are all-reduced in.
  struct Forming {
    GradBucket bucket;
    size_t last = 0;  // the position of its last parameter in `order`
    std::vector<const Var*> params;
  };
  std::vector<Forming> formed;
  std::vector<int> open(dtypes.size(), -1);           // per buffer: its open bucket
  std::vector<std::string> open_layer(dtypes.size());  // and that bucket's latest layer
  for (size_t i = 0; i < order.size(); i++) {
    const VarPtr& p = order[i];
    const auto [b, offset] = place[i];
    p->grad = flat_[size_t(b)].flat_view(offset, p->value.shape());
    const std::string layer = layer_of(p->name);
    const size_t es = dtype_size(p->value.dtype());
    int& k = open[size_t(b)];
    if (k >= 0 && layer != open_layer[size_t(b)] &&
        size_t(formed[size_t(k)].bucket.numel) * es >= min_bytes)
      k = -1;  // full: the next layer starts a bucket
    if (k < 0) {
      Forming f;
      f.bucket.dtype = p->value.dtype();
      f.bucket.data = p->grad.raw();
      f.bucket.layers = layer;
      formed.push_back(f);
      k = int(formed.size()) - 1;
    } else if (layer != open_layer[size_t(b)]) {
      // "a..b": keep the first layer and the latest
      std::string& layers = formed[size_t(k)].bucket.layers;
      layers = layers.substr(0, layers.find("..")) + ".." + layer;
    }
    open_layer[size_t(b)] = layer;
    Forming& f = formed[size_t(k)];
    f.bucket.numel += slot_elements(p->value);  // with its padding: buckets tile the buffer
    f.bucket.params++;
    f.last = i;
    CHECK(std::find(f.params.begin(), f.params.end(), p.get()) == f.params.end() &&
              !bucket_of_.count(p.get()),
          "GradBuckets: parameter " << p->name << " given twice");
    f.params.push_back(p.get());
    bucket_of_[p.get()] = -1;  // numbered below
  }
  std::stable_sort(formed.begin(), formed.end(),
                   [](const Forming& a, const Forming& b) { return a.last < b.last; });
  for (const Forming& f : formed) {
    for (const Var* v : f.params) bucket_of_[v] = int(buckets_.size());
    buckets_.push_back(f.bucket);
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
