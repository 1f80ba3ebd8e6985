// defines: DType, Device, Shape, Tensor: an n-dimensional array on the CPU or a GPU.
//
// A Tensor is a cheap handle (shape, dtype, device, shared storage); copying it shares the
// data, like a shared_ptr. Activations are NHWC (channels last): x(n,h,w,c) lives at
// ((n*H + h)*W + w)*C + c. Conv weights are KRSC, linear weights (K, C).
//
// dtypes: f32 and f16 are the training types; f64 exists on the CPU only, so gradient checks
// can run the very same ops in double; i32 holds labels.
//
// A tensor is made in a Context (nn/context.h): on the CPU, or on a GPU's stream. A GPU tensor
// remembers that stream: its own work (clone, cast, zero_, copies) is queued there, and reading
// it on the host waits for what that stream has queued before. Work on another stream orders
// itself with events (train/replicas/device_ring.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/half.h"
#include "nn/context.h"

namespace cutrain {

enum class DType : uint8_t { f32, f16, f64, i32 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<half_t>() { return DType::f16; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }

// The dtype a kernel on `t` accumulates in, and the dtype of BatchNorm parameters and
// statistics for activations of type `t`: f32 for f16 and f32, f64 for f64.
DType acc_dtype(DType t);

using Shape = std::vector<int>;
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "(2,28,28,1)"

struct Storage;

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false

  static Tensor empty(const Shape& shape, DType dtype, const Context& in = Context::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, const Context& in = Context::cpu());
  // A CPU tensor holding `values` converted to `dtype` (f16 rounds to nearest even).
  static Tensor from_floats(const std::vector<float>& values, const Shape& shape,
                            DType dtype = DType::f32);
  static Tensor from_doubles(const std::vector<double>& values, const Shape& shape,
                             DType dtype = DType::f64);
  static Tensor from_ints(const std::vector<int32_t>& values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int rank() const { return int(shape_.size()); }
  int dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  // Where the tensor was made: its device, and on a GPU its ordinal and stream (with the
  // default kernel choices: a tensor does not run ops).
  Context home() const;
  std::string str() const;  // "f16 cuda (256,28,28,32)"

  // Typed pointer to the first element; throws if T does not match dtype().
  template <typename T> T* data() const;
  void* raw() const;

  // No other tensor shares this one's storage (no copy, reshape or view of it alive) and it is
  // no view: writing it writes nothing anyone else sees.
  bool owns_alone() const;
  Tensor reshape(const Shape& shape) const;  // shares storage; numel must match
  // A tensor of `shape` whose elements are elements [offset, offset + numel) of this one
  // (counted flat), sharing its storage: writing either writes both, and the view keeps the
  // storage alive. How the gradients of data-parallel replicas live in one flat buffer.
  Tensor flat_view(int64_t offset, const Shape& shape) const;
  // A copy in context `in` (the same object if already on its device). To a GPU: queued on
  // in's stream and waited for. To the CPU: after the work queued on this tensor's stream.
  Tensor to(const Context& in) const;
  Tensor to(DType dtype) const;              // a converted copy (same object if already that)
  // A copy on the same device. On cuda it is queued on this tensor's stream and not waited
  // for: later work on that stream sees it.
  Tensor clone() const;
  // Copies src's elements into this tensor's own storage (same shape and dtype, any two
  // devices), ordered on the GPU tensor's stream (this one's, if both are) and waited for.
  // Tensors sharing the storage see the new values (an fp32 parameter and its optimizer
  // master are one storage).
  void copy_from(const Tensor& src);
  void zero_();                              // on cuda: queued on this tensor's stream
  void fill_(double value);                  // CPU only

  // All elements as double / float on the host (copied back from a device if needed).
  // On a GPU: after the work queued on this tensor's stream.
  std::vector<double> to_doubles() const;
  std::vector<float> to_floats() const;
  double item() const;  // the single element of a one-element tensor

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
};

// The flat index of the first inf or NaN element of a tensor (on a GPU: read from a copy on
// the host), or -1 when every element is finite or the tensor holds integers. Checkpoints and
// the trainer's stop on a diverged run use it.
int64_t first_nonfinite(const Tensor& t);

}  // namespace cutrain
