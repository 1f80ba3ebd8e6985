#include "nn/tensor.h"

#include <malloc.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "kernels/cast.h"
#include "kernels/check.h"
#include "kernels/gpu.h"
#include "nn/dispatch.h"

namespace cutrain {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::f64: return 8;
    case DType::i32: return 4;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
  }
  return "?";
}

DType acc_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < s.size(); i++) os << (i ? "," : "") << s[i];
  os << ")";
  return os.str();
}

namespace {
// Host memory for tensors, 64-byte aligned. A training step frees and allocates the same few
// MB-sized activations and gradients every step. glibc serves blocks that large with mmap and
// returns them with munmap, so each step would fault in fresh zeroed pages from the kernel
// (measured: 11% of a CPU training step). Raising its thresholds keeps freed blocks in the
// process heap for the next step instead: set once, for the whole process.
void* host_alloc(size_t n) {
  // Only both or neither: M_TRIM_THRESHOLD alone would freeze glibc's adaptive mmap threshold
  // at its 128 KB start (an older glibc refuses an mmap threshold above 32 MB).
  static const bool tuned = [] {
    return mallopt(M_MMAP_THRESHOLD, 512 << 20) == 1 &&  // blocks under 512 MB from the heap
           mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;       // keep up to 1 GB of freed heap
  }();
  (void)tuned;
  return std::aligned_alloc(64, (n + 63) / 64 * 64 + 64);
}
}  // namespace

// The bytes behind a tensor: 64-byte aligned host memory (host_alloc), or a block of a device's
// caching allocator (returned to the pool, not to cudaFree, when the last tensor lets go) ordered
// on the stream it was made for, or a part of another Storage (flat_view), which it keeps alive
// and does not free.
struct Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  Device device = Device::cpu;
  int gpu = -1;                    // on cuda: the device's ordinal
  cudaStream_t stream = nullptr;   // on cuda: the stream it was made on (Tensor::home)
  LaunchPlan* plan = nullptr;      // where its own work is noted (Context::plan)
  DeviceBuffer dev;
  std::shared_ptr<Storage> parent;  // set for a view: the owner of ptr

  Storage(size_t n, const Context& in)
      : bytes(n), device(in.device), stream(in.stream), plan(in.plan) {
    if (device == Device::cpu) {
      ptr = host_alloc(n);
      CHECK(ptr, "out of host memory allocating " << n << " bytes");
    } else {
      CHECK(gpu_usable(), "cannot place a tensor on cuda: " << gpu_unavailable_reason());
      gpu = in.gpu >= 0 ? in.gpu : current_device();
      dev = DeviceBuffer(n > 0 ? n : 1, gpu, stream);
      ptr = dev.data();
    }
  }
  Storage(std::shared_ptr<Storage> owner, size_t offset_bytes, size_t n)
      : ptr(static_cast<char*>(owner->ptr) + offset_bytes), bytes(n), device(owner->device),
        gpu(owner->gpu), stream(owner->stream), plan(owner->plan), parent(std::move(owner)) {}
  ~Storage() {
    if (device == Device::cpu && !parent) std::free(ptr);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

// A copy to or from a device, queued on `stream` and waited for: so it comes after the kernels
// queued there before. (A plain cudaMemcpy runs on the legacy default stream, which does not
// wait for the non-blocking streams cutrain uses.)
static void copy_ordered(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  copy_async(dst, src, bytes, stream);
  Event done;
  done.record(stream);
  done.synchronize();
}

Tensor Tensor::empty(const Shape& shape, DType dtype, const Context& in) {
  for (int d : shape) CHECK(d >= 0, "negative dimension in shape " << shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = in.device;
  t.storage_ = std::make_shared<Storage>(t.bytes(), in);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, const Context& in) {
  Tensor t = empty(shape, dtype, in);
  t.zero_();
  return t;
}

Tensor Tensor::from_doubles(const std::vector<double>& v, const Shape& shape, DType dtype) {
  CHECK(int64_t(v.size()) == shape_numel(shape),
        v.size() << " values do not fill shape " << shape_str(shape));
  Tensor t = empty(shape, dtype);
  if (dtype == DType::i32) {
    for (size_t i = 0; i < v.size(); i++) t.data<int32_t>()[i] = int32_t(v[i]);
  } else {
    dispatch_float(dtype, [&](auto tag) {
      using T = decltype(tag);
      cast_cpu<double, T>(int64_t(v.size()), v.data(), t.data<T>());
    });
  }
  return t;
}

Tensor Tensor::from_floats(const std::vector<float>& v, const Shape& shape, DType dtype) {
  return from_doubles(std::vector<double>(v.begin(), v.end()), shape, dtype);
}

Tensor Tensor::from_ints(const std::vector<int32_t>& v, const Shape& shape) {
  return from_doubles(std::vector<double>(v.begin(), v.end()), shape, DType::i32);
}

int Tensor::dim(int i) const {
  const int r = rank();
  CHECK(i >= -r && i < r, "dimension " << i << " out of range for shape " << shape_str(shape_));
  return shape_[size_t(i < 0 ? i + r : i)];
}

std::string Tensor::str() const {
  if (!defined()) return "undefined";
  std::ostringstream os;
  os << dtype_name(dtype_) << " " << device_name(device_) << " " << shape_str(shape_);
  return os.str();
}

template <typename T> T* Tensor::data() const {
  CHECK(defined(), "data() of an undefined tensor");
  CHECK(dtype_of<T>() == dtype_, "tensor is " << dtype_name(dtype_) << ", asked for "
                                             << dtype_name(dtype_of<T>()));
  return static_cast<T*>(storage_->ptr);
}
template float* Tensor::data<float>() const;
template half_t* Tensor::data<half_t>() const;
template double* Tensor::data<double>() const;
template int32_t* Tensor::data<int32_t>() const;

void* Tensor::raw() const {
  CHECK(defined(), "raw() of an undefined tensor");
  return storage_->ptr;
}

Tensor Tensor::reshape(const Shape& shape) const {
  CHECK(shape_numel(shape) == numel(),
        "cannot reshape " << shape_str(shape_) << " to " << shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

bool Tensor::owns_alone() const {
  return storage_ && storage_.use_count() == 1 && !storage_->parent;
}

Tensor Tensor::flat_view(int64_t offset, const Shape& shape) const {
  CHECK(defined(), "flat_view of an undefined tensor");
  for (int d : shape) CHECK(d >= 0, "negative dimension in shape " << shape_str(shape));
  CHECK(offset >= 0 && offset + shape_numel(shape) <= numel(),
        "flat_view: elements [" << offset << ", " << offset + shape_numel(shape)
                                << ") are outside " << str());
  Tensor t = *this;
  t.shape_ = shape;
  t.storage_ = std::make_shared<Storage>(storage_, size_t(offset) * dtype_size(dtype_), t.bytes());
  return t;
}

Context Tensor::home() const {
  CHECK(defined(), "home() of an undefined tensor");
  Context c = device_ == Device::cpu
                  ? Context::cpu()
                  : Context::cuda(storage_->stream, ConvImpl::tc, LinearImpl::tc, storage_->gpu);
  c.plan = storage_->plan;
  return c;
}

Tensor Tensor::to(const Context& in) const {
  if (in.device == device_) return *this;
  Tensor t = empty(shape_, dtype_, in);
  // To a GPU: on the new tensor's stream; to the CPU: on this tensor's.
  copy_ordered(t.raw(), raw(), bytes(), in.device == Device::cuda ? in.stream : storage_->stream);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor t = empty(shape_, dtype, home());
  const int64_t n = numel();
  note_launch(storage_->plan, cast_gpu_cost(n, dtype_size(dtype_), dtype_size(dtype)));
  if (device_ == Device::cuda) {
    if (dtype_ == DType::f32 && dtype == DType::f16)
      cast_f32_to_f16_gpu(n, data<float>(), t.data<half_t>(), storage_->stream);
    else if (dtype_ == DType::f16 && dtype == DType::f32)
      cast_f16_to_f32_gpu(n, data<half_t>(), t.data<float>(), storage_->stream);
    else
      CHECK(false, "no GPU cast from " << dtype_name(dtype_) << " to " << dtype_name(dtype));
    return t;
  }
  CHECK(dtype_ != DType::i32 && dtype != DType::i32,
        "cast between " << dtype_name(dtype_) << " and " << dtype_name(dtype)
                        << ": labels (i32) are not converted");
  dispatch_float(dtype_, [&](auto stag) {
    using S = decltype(stag);
    dispatch_float(dtype, [&](auto dtag) {
      using D = decltype(dtag);
      cast_cpu<S, D>(n, data<S>(), t.data<D>());
    });
  });
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, home());
  note_launch(storage_->plan, copy_cost("copy (clone)", bytes()));
  if (device_ == Device::cpu)
    std::memcpy(t.raw(), raw(), bytes());
  else
    copy_async(t.raw(), raw(), bytes(), storage_->stream);  // device to device: no wait
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  CHECK(defined() && src.defined() && src.shape_ == shape_ && src.dtype_ == dtype_,
        "copy_from: " << src.str() << " into " << str() << ": shapes and dtypes must match");
  if (device_ == Device::cpu && src.device_ == Device::cpu)
    std::memcpy(raw(), src.raw(), bytes());
  else
    copy_ordered(raw(), src.raw(), bytes(),
                 device_ == Device::cuda ? storage_->stream : src.storage_->stream);
}

void Tensor::zero_() {
  note_launch(storage_->plan, memset_cost(bytes()));
  if (device_ == Device::cpu)
    std::memset(raw(), 0, bytes());  // all-zero bits are +0 in every dtype
  else
    memset_async(raw(), 0, bytes(), storage_->stream);
}

void Tensor::fill_(double value) {
  CHECK(device_ == Device::cpu, "fill_ on " << str() << ": CPU tensors only");
  const int64_t n = numel();
  if (dtype_ == DType::i32) {
    for (int64_t i = 0; i < n; i++) data<int32_t>()[i] = int32_t(value);
    return;
  }
  dispatch_float(dtype_, [&](auto tag) {
    using T = decltype(tag);
    T* p = data<T>();
    const T v = T(value);
    for (int64_t i = 0; i < n; i++) p[i] = v;
  });
}

std::vector<double> Tensor::to_doubles() const {
  const Tensor h = to(Context::cpu());
  std::vector<double> out(static_cast<size_t>(numel()));
  if (dtype_ == DType::i32) {
    for (size_t i = 0; i < out.size(); i++) out[i] = h.data<int32_t>()[i];
    return out;
  }
  dispatch_float(dtype_, [&](auto tag) {
    using T = decltype(tag);
    cast_cpu<T, double>(numel(), h.data<T>(), out.data());
  });
  return out;
}

std::vector<float> Tensor::to_floats() const {
  const std::vector<double> d = to_doubles();
  return std::vector<float>(d.begin(), d.end());
}

double Tensor::item() const {
  CHECK(numel() == 1, "item() of a tensor with " << numel() << " elements " << str());
  return to_doubles()[0];
}

int64_t first_nonfinite(const Tensor& t) {
  if (!t.defined() || t.dtype() == DType::i32) return -1;
  const Tensor h = t.to(Context::cpu());
  int64_t bad = -1;
  dispatch_float(h.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = h.template data<T>();
    for (int64_t i = 0; i < h.numel() && bad < 0; i++)
      if (!std::isfinite(static_cast<double>(p[i]))) bad = i;
  });
  return bad;
}

}  // namespace cutrain
