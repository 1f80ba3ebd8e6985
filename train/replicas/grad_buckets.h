// defines: GradBuckets, one replica's parameter gradients as views into flat buffers, grouped
// into per-layer buckets in the order backward completes them, and the tracking of which
// buckets backward has finished (so each can be all-reduced while backward goes on).
//
// Layout: one flat buffer per gradient dtype (one in fp32 training; in fp16 training the conv
// and linear gradients are fp16 and the BatchNorm ones fp32, so two), each holding its
// parameters' gradients in *reverse* parameter order: backward reaches the last layer first,
// so the buckets it completes first come first, and every bucket is one contiguous range.
// Each parameter's Var::grad is a Tensor::flat_view into its buffer, so backward accumulates
// straight into the buffer: nothing is copied in or out around the all-reduce. Each gradient
// starts on a 16-byte boundary (zero padding between them, inside the buckets).
//
// Buckets: one per layer (the parameters "<layer>.w", "<layer>.b" share "<layer>"), merged with
// the layers after it in backward order while the bucket is smaller than min_bytes: per-layer
// buckets start communication early, but a BatchNorm's 2C values are too small to be worth a
// round of the ring on their own. Each dtype's buffer is cut on its own (a bucket holds one
// dtype), so in fp16 training the fp32 BatchNorm gradients of all layers make one small
// bucket instead of one between every two conv layers; the buckets are listed in the order
// backward completes them (by their last parameter), the order they go round the ring.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "nn/autograd.h"

namespace cutrain {

struct GradBucket {
  DType dtype = DType::f32;
  void* data = nullptr;   // the first gradient element (in a flat buffer)
  int64_t numel = 0;      // elements to all-reduce: its gradients and the padding between them
  int params = 0;         // how many parameters' gradients it holds
  std::string layers;     // "conv3" or "linear1..bn4": the layers it covers, in backward order
};

class GradBuckets {
 public:
  // params: the model's parameters, in model order, all on one device. The flat buffers are
  // made where the first was (Tensor::home: on a GPU its device and stream). Their gradients
  // become views (any existing gradient is replaced by zeros).
  GradBuckets(const std::vector<VarPtr>& params, size_t min_bytes);

  size_t size() const { return buckets_.size(); }
  const GradBucket& operator[](size_t k) const { return buckets_[k]; }
  int64_t numel() const;  // gradient elements (the parameters' count)
  size_t bytes() const;   // of the flat buffers, padding included
  std::string describe() const;  // "7 buckets, 24,714 gradients (96.5 KiB): linear1, ..."

  // Before the backward that completes the step's gradients (the last micro-batch): every
  // bucket waits for all of its parameters again.
  void arm();
  // Called from Tape::grad_ready: the index of the bucket v completed, or -1 when v is not one
  // of the parameters or its bucket still waits for others.
  int ready(const Var& v);
  // After backward: the buckets still waiting (parameters backward never reached, whose
  // gradient is zero), in order; they count as complete from now on.
  std::vector<int> finish();

  void zero();  // every gradient to zero: one memset per flat buffer

 private:
  std::vector<Tensor> flat_;                    // one per dtype
  std::vector<GradBucket> buckets_;
  std::unordered_map<const Var*, int> bucket_of_;
  std::vector<int> pending_;                    // per bucket: parameters not yet complete
  int64_t gradients_ = 0;
};

}  // namespace cutrain
