// elementwise on the GPU: relu, relu backward, add, accumulate, average.
//
// Math: elementwise.h. One kernel, map_kernel, applies a per-element function of up to three
//   inputs: out[i] = op(in[0][i], ..., in[kIn-1][i]) for i in [0, n).
// Launch: grid-stride loop, 256 threads a block, grid capped (cuda_util.cuh: grid_size).
//   Vector path (every pointer 16-byte aligned): each thread takes 16 bytes at a time (4
//   floats or 8 halves) from every input and writes 16 bytes; the last n % (16/sizeof(T))
//   elements are done one per thread after it. Unaligned pointers (a view starting at an odd
//   offset) take the scalar loop for all n.
// Bytes: (kIn + 1) * sizeof(T) per element (elementwise.h's relu_forward_gpu_cost and the
//   four beside it). Memory bound: the target is the device-to-device copy bandwidth.
// Flops: one add or compare per element (average: two; relu_forward_gpu_cost and the others).
// Precision: each op widens to fp32, does one operation and rounds to T once, exactly like
//   relu_forward_cpu / relu_backward_cpu / add_forward_cpu / accumulate_cpu / average_cpu, so
//   the results are equal bit for bit (a single add cannot be contracted into an FMA).
#include <initializer_list>

#include "kernels/cuda_util.cuh"
#include "kernels/elementwise.h"

namespace cutrain {

namespace {

template <typename S, int kIn> struct Inputs {
  const S* p[kIn];
};

template <int kIn, typename S, typename Op>
__global__ void map_kernel(int64_t n, bool vectorised, Op op, Inputs<S, kIn> in, S* out) {
  constexpr int V = Pack128<S>::size;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t nvec = vectorised ? n / V : 0;
  // Vector part: elements [0, nvec*V), one Pack128 per input per step.
  for (int64_t i = first; i < nvec; i += stride) {
    Pack128<S> pk[kIn], r;
#pragma unroll
    for (int k = 0; k < kIn; k++) pk[k] = load128(in.p[k] + i * V);
#pragma unroll
    for (int j = 0; j < V; j++) {
      S v[kIn];
#pragma unroll
      for (int k = 0; k < kIn; k++) v[k] = pk[k].v[j];
      r.v[j] = op(v);
    }
    store128(out + i * V, r);
  }
  // Scalar part: the tail [nvec*V, n), or everything when not vectorised.
  for (int64_t i = nvec * V + first; i < n; i += stride) {
    S v[kIn];
#pragma unroll
    for (int k = 0; k < kIn; k++) v[k] = in.p[k][i];
    out[i] = op(v);
  }
}

// v = {x}: max(x, 0), keeping x's own bits when positive (as relu_forward_cpu).
struct ReluOp {
  template <typename S> __device__ S operator()(const S* v) const {
    return to_acc(v[0]) > 0.0f ? v[0] : from_acc<S>(0.0f);
  }
};
// v = {y, dy, dx}: dx + dy where y > 0, else dx unchanged (relu_backward_cpu).
struct ReluBackwardOp {
  template <typename S> __device__ S operator()(const S* v) const {
    return to_acc(v[0]) > 0.0f ? from_acc<S>(to_acc(v[2]) + to_acc(v[1])) : v[2];
  }
};
// v = {a, b}: a + b (add_forward_cpu).
struct AddOp {
  template <typename S> __device__ S operator()(const S* v) const {
    return from_acc<S>(to_acc(v[0]) + to_acc(v[1]));
  }
};
// v = {dy, dx}: dx + dy (accumulate_cpu).
struct AccumulateOp {
  template <typename S> __device__ S operator()(const S* v) const {
    return from_acc<S>(to_acc(v[1]) + to_acc(v[0]));
  }
};

// v = {a, b}: (a + b) * 0.5 (average_cpu): two roundings in fp32, in the CPU's order.
struct AverageOp {
  template <typename S> __device__ S operator()(const S* v) const {
    return from_acc<S>(__fmul_rn(__fadd_rn(to_acc(v[0]), to_acc(v[1])), 0.5f));
  }
};

template <int kIn, typename T, typename Op>
void launch_map(int64_t n, Op op, std::initializer_list<const T*> in, T* out,
                cudaStream_t stream) {
  if (n <= 0) return;
  using S = storage_t<T>;
  Inputs<S, kIn> ins;
  bool vectorised = aligned16(out);
  int k = 0;
  for (const T* p : in) {
    ins.p[k++] = dev(p);
    vectorised = vectorised && aligned16(p);
  }
  constexpr int V = Pack128<S>::size;
  const int64_t threads = vectorised ? (n + V - 1) / V : n;
  map_kernel<kIn><<<grid_size(threads, 256), 256, 0, stream>>>(n, vectorised, op, ins,
                                                               dev(out));
  LAUNCH_CHECK();
}

}  // namespace

template <typename T> void relu_forward_gpu(int64_t n, const T* x, T* y, cudaStream_t stream) {
  launch_map<1, T>(n, ReluOp{}, {x}, y, stream);
}

template <typename T>
void relu_backward_gpu(int64_t n, const T* y, const T* dy, T* dx, cudaStream_t stream) {
  launch_map<3, T>(n, ReluBackwardOp{}, {y, dy, dx}, dx, stream);
}

template <typename T>
void add_forward_gpu(int64_t n, const T* a, const T* b, T* y, cudaStream_t stream) {
  launch_map<2, T>(n, AddOp{}, {a, b}, y, stream);
}

template <typename T> void accumulate_gpu(int64_t n, const T* dy, T* dx, cudaStream_t stream) {
  launch_map<2, T>(n, AccumulateOp{}, {dy, dx}, dx, stream);
}

template <typename T>
void average_gpu(int64_t n, const T* a, const T* b, T* y, cudaStream_t stream) {
  launch_map<2, T>(n, AverageOp{}, {a, b}, y, stream);
}

#define CUTRAIN_INSTANTIATE(T)                                                          \
  template void relu_forward_gpu<T>(int64_t, const T*, T*, cudaStream_t);               \
  template void relu_backward_gpu<T>(int64_t, const T*, const T*, T*, cudaStream_t);    \
  template void add_forward_gpu<T>(int64_t, const T*, const T*, T*, cudaStream_t);      \
  template void accumulate_gpu<T>(int64_t, const T*, T*, cudaStream_t);                \
  template void average_gpu<T>(int64_t, const T*, const T*, T*, cudaStream_t);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
