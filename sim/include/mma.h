// The simulator's <mma.h>: WMMA 16x16x16 fragments (fp16 in, fp32 accumulate). Each lane holds
// the whole tile (hardware spreads it over the warp: x[] here is not the hardware's per-lane
// slice, but an operation applied to every x[t] is the same operation). Every operation is a
// warp collective: the 32 lanes meet (sim/collectives.cpp) before it, as the hardware requires.
// mma_sync adds the 16 products of each output in k order in fp32, one rounding per addition
// (a product of two halves is exact in fp32); tensor cores add in an order of their own.
#pragma once
#include "cuda_fp16.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
  static constexpr int rows = std::is_same<Use, matrix_b>::value ? K : M;
  static constexpr int cols = std::is_same<Use, matrix_a>::value ? K : N;
  static constexpr int num_elements = rows * cols;
  T x[num_elements];  // row-major (rows x cols)
};

namespace detail {
inline void meet(const char* what) {
  ::cutrain_sim::warp_collective(::cutrain_sim::Collective::WarpSync, 0xffffffffu, 0, 0, 32,
                                 what, what);
}
}  // namespace detail

template <class Use, int M, int N, int K, class T, class L, class V>
__attribute__((noinline, no_sanitize_thread)) void fill_fragment(fragment<Use, M, N, K, T, L>& f, const V& v) {
  detail::meet("wmma::fill_fragment");
  for (int i = 0; i < f.num_elements; i++) f.x[i] = T(v);
}

// Loads and stores: a warp reads (or writes) each element of the tile once, each lane its
// share; here every lane copies the whole tile into its fragment (copies not instrumented:
// fragments are registers), and lane l checks the elements t with t % 32 == l (on shared memory
// a store marks them written). So an access outside an allocation, or a read of unwritten
// shared memory, is reported once, by the lane that makes it, at the cost of one warp's
// accesses rather than 32 lanes' whole tiles.
namespace detail {
template <bool Write, class T> void check_share(T* p, int rows, int cols, size_t row_stride,
                                                 size_t col_stride) {
  const int lane = ::cutrain_sim::lane_id();
  for (int t = lane; t < rows * cols; t += 32)
    ::cutrain_sim::check_memory(p + size_t(t / cols) * row_stride + size_t(t % cols) * col_stride,
                                sizeof(T), Write);
}
}  // namespace detail

// Operand tiles: the layout is the fragment's own.
template <class Use, int M, int N, int K, class T, class L>
__attribute__((noinline, no_sanitize_thread)) void load_matrix_sync(
    fragment<Use, M, N, K, T, L>& f, const T* p, unsigned ldm) {
  detail::meet("wmma::load_matrix_sync");
  using F = fragment<Use, M, N, K, T, L>;
  constexpr bool row = std::is_same<L, row_major>::value;
  detail::check_share<false>(p, F::rows, F::cols, row ? ldm : 1, row ? 1 : ldm);
  for (int r = 0; r < F::rows; r++)
    for (int c = 0; c < F::cols; c++)
      f.x[r * F::cols + c] = row ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r];
}

// Accumulator tiles: the layout is the call's.
template <int M, int N, int K, class T>
__attribute__((noinline, no_sanitize_thread)) void load_matrix_sync(
    fragment<accumulator, M, N, K, T>& f, const T* p, unsigned ldm, layout_t layout) {
  detail::meet("wmma::load_matrix_sync");
  const bool row = layout == mem_row_major;
  detail::check_share<false>(p, M, N, row ? ldm : 1, row ? 1 : ldm);
  for (int r = 0; r < M; r++)
    for (int c = 0; c < N; c++) f.x[r * N + c] = row ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r];
}
template <int M, int N, int K, class T>
__attribute__((noinline, no_sanitize_thread)) void store_matrix_sync(
    T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout) {
  detail::meet("wmma::store_matrix_sync");
  const bool row = layout == mem_row_major;
  detail::check_share<true>(p, M, N, row ? ldm : 1, row ? 1 : ldm);
  for (int r = 0; r < M; r++)
    for (int c = 0; c < N; c++) (row ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r]) = f.x[r * N + c];
}

// d = a b + c. Fragments are registers on a GPU, not memory: no access checks here. Every lane
// holds the same tiles, so the 32 lanes of a warp ask for the same product (in a random order,
// between the lanes of the block's other warps): the host thread keeps each warp's last product
// with its operands, and a lane whose operands are byte for byte its warp's last ones takes it
// (one product per warp instead of 32; a lane with other operands computes its own).
template <int M, int N, int K, class TA, class LA, class LB, class TC>
__attribute__((noinline, no_sanitize_thread)) void mma_sync(
    fragment<accumulator, M, N, K, TC>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
    const fragment<matrix_b, M, N, K, TA, LB>& b, const fragment<accumulator, M, N, K, TC>& c) {
  detail::meet("wmma::mma_sync");
  struct Last {  // no initialisers: zero-initialised, so no guard that code writes at first use
    bool valid;
    fragment<matrix_a, M, N, K, TA, LA> a;
    fragment<matrix_b, M, N, K, TA, LB> b;
    fragment<accumulator, M, N, K, TC> c, d;
  };
  thread_local Last per_warp[32];  // per host thread: the blocks it runs (32 warps at most)
  Last& last = per_warp[::cutrain_sim::warp_id()];
  if (last.valid && std::memcmp(&last.a, &a, sizeof a) == 0 &&
      std::memcmp(&last.b, &b, sizeof b) == 0 && std::memcmp(&last.c, &c, sizeof c) == 0) {
    d = last.d;
    return;
  }
  float fa[M * K], fb[K * N];  // the operands widened once (exact)
  for (int t = 0; t < M * K; t++) fa[t] = float(a.x[t]);
  for (int t = 0; t < K * N; t++) fb[t] = float(b.x[t]);
  last.a = a, last.b = b, last.c = c;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      TC s = c.x[i * N + j];
      for (int k = 0; k < K; k++) s += TC(fa[i * K + k] * fb[k * N + j]);
      last.d.x[i * N + j] = s;
    }
  last.valid = true;
  d = last.d;
}

}  // namespace wmma
}  // namespace nvcuda
