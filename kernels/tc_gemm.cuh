// defines: tc_gemm(), the one tiled tensor-core GEMM behind conv2d's and linear's tc paths,
// and Dense<>, the operand that is a plain row-major matrix.
//
// Math:  C (M x N) = A (M x Kd) * B (Kd x N), fp16 in, fp32 accumulate; then, for every
//        (m, n), epi(m, n, C[m][n]) stores the result (adds a bias, or accumulates into an
//        existing output, and rounds to fp16 once).
// plain-loop meaning:
//   for m < M: for n < N: { float acc = 0; for kd < Kd: acc += A(m,kd) * B(kd,n); epi(m,n,acc); }
//
// A and B are never materialised: each is an "operand", a small device struct that knows where
// element (mn, kd) lives (mn = the row m of A, or the column n of B) and returns 0 outside the
// matrix. That is what makes a convolution a GEMM without an im2col buffer (conv2d.cu). An
// operand has
//   static constexpr bool kContigKd;   // true: its memory is contiguous along kd, else along mn
//   __device__ void load8(int64_t mn, int64_t kd, __half* dst) const;
//   __device__ __half at(int64_t mn, int64_t kd) const;
// at returns the one element (mn, kd), 0 outside the matrix: the operand's definition as a
// plain expression, which the ladder's v2 (kernels/ladder/gemm_plain.cuh) reads element by
// element. load8 writes 8 consecutive elements along the contiguous direction, (mn, kd..kd+7) or
// (mn..mn+7, kd), into shared memory (dst is 16-byte aligned): one 16-byte load when the 8
// are inside the matrix, contiguous and aligned, else 8 scalar reads with zeros outside. The
// 16-byte load goes through the operand's `copy` argument (Copy8: a load and a store; the
// pipelined rung of kernels/ladder/ passes an asynchronous copy instead).
//
// This kernel is the conv ladder's v4 (kernels/ladder/README.md). What changed from v3
// (kernels/ladder/gemm_fma.cuh: the same tiles in shared memory, each thread a 4 x 8 piece of
// fp32 multiply-adds on CUDA cores): each warp computes a 32 x 32 piece as 2 x 2 WMMA
// 16x16x16 fragments, fp16 in and fp32 out, so the multiply-adds run on tensor cores.
// Why it should be faster than v3: with the operands in shared memory v3 is bound by its
// multiply-adds, and an H100's tensor cores do them 15 times as fast (989 fp16 TFLOP/s
// against 67 fp32 on its CUDA cores: known_gpus, kernels/launch_plan.cpp). What it leaves to
// v5: a block's loads and its MMAs take turns (the end of Launch below).
//
// Launch: one block computes one BM x BN tile of C (128x64, 64x64, 128x32 or 32x64);
//   one warp computes a 32 x 32 piece of it as 2 x 2 WMMA 16x16x16 fragments (half x half ->
//   float); (BM/32) x (BN/32) warps. The block walks kd in steps of BK = 32: all threads copy
//   the A tile (BM x 32) and the B tile (32 x BN) into shared memory, sync, each warp does
//   2 (kd halves) x 2 x 2 mma_sync, sync. At the end the fragments go through shared memory
//   (as floats) so that each thread hands consecutive n to the epilogue (coalesced stores).
//   split-K: when the tiles alone cannot fill the GPU (a weight gradient: M*N small, Kd = N*P*Q
//   huge) blockIdx.z takes one slice of kd (enough slices for ~16 warps an SM), fp32 partial
//   tiles go to a scratch buffer, and a second kernel sums the slices pairwise
//   (kernels/blocked_sum.h) and calls epi: the same
//   bits on every run, and on every GPU of one architecture (the split depends on the shape,
//   not the SM count; WMMA's own accumulation order may differ between architectures).
//   blocked sums (tc_gemm<true>, the weight gradients, whose kd runs over the whole batch: N*P*Q
//   or N): a slice is long (thousands of kd for a large batch), so the WMMA accumulators take
//   kSumBlock kd at a time (2 steps), then are added into a second set of fragments and start
//   again from 0 (kernels/blocked_sum.h). A product meets ~kSumBlock + slice/kSumBlock
//   roundings instead of ~slice. (The second level runs in order, not pairwise: a fragment per
//   level would not fit in registers.) The second set costs ~30 registers a thread (ptxas,
//   sm_90: 66 -> 94..97), so about 20 warps fit an SM instead of 30; split-K aims at 16. The
//   forward and dgrad sum over a filter (R*S*C or R*S*K, short) and keep one set.
//   No cp.async double buffering here: a block's loads and MMAs do not overlap; the other
//   blocks resident on the SM (3-6 of them) hide the latency instead. The ladder's v5 rung
//   (kernels/ladder/tc_gemm_async.cuh, tc::AsyncKernel) is this kernel with its loads
//   pipelined through cp.async; training runs it once a GPU has measured it ahead.
// Bytes: tc_gemm_cost (tc_plan.h; conv2d.h's and linear.h's tc costs count from it): the
//   operands once and the output as the epilogue moves it, + 2 * splits * M * N * 4 for the
//   split-K partials. Each block reads (BM + BN) * Kd halves: A is read N/BN times and B M/BM
//   times (from L2 mostly), C written once. With 128x64 tiles a kd step moves 12 KiB from
//   global memory for 512 kflop (~43 flops a byte); the layers of the default models are
//   small, so the gathers (index arithmetic, padding) rather than the MMAs set the pace.
// Flops: tc_gemm_cost: 2*M*N*Kd, on tensor cores.
// Precision: products of halves are exact in fp32; sums in fp32 (WMMA accumulators), in an
//   order that differs from the CPU's (weight gradients: blocked, above); rounded to fp16
//   once, in epi.
// bounds: any M, N, Kd (no multiple of any tile needed); element offsets are int64_t.
#pragma once
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/blocked_sum.h"
#include "kernels/check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/gpu.h"
#include "kernels/tc_plan.h"

namespace cutrain {
namespace tc {

// BK (the kd step, 32) and kWarpFinish: kernels/tc_plan.h, with the host-side choices.
constexpr int PAD = 8;  // halves added to each shared-memory row: spreads rows over banks and
                        // keeps every row 16-byte aligned (WMMA wants ldm % 8 == 0)

// --- small helpers for operands ---------------------------------------------------------

__device__ __forceinline__ void zero8(__half* dst) {
  *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
}
__device__ __forceinline__ void copy8(__half* dst, const __half* src) {  // 16 bytes, aligned
  *reinterpret_cast<uint4*>(dst) = __ldg(reinterpret_cast<const uint4*>(src));
}
// The operands' 16-byte copy into shared memory, as a policy: this one loads and stores.
struct Copy8 {
  __device__ __forceinline__ void operator()(__half* dst, const __half* src) const {
    copy8(dst, src);
  }
};
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// A plain matrix as an operand. ContigKd: element (mn, kd) at p[mn * ld + kd] (rows of mn,
// contiguous along kd); otherwise at p[kd * ld + mn] (contiguous along mn). Out of range -> 0.
template <bool ContigKd>
struct Dense {
  static constexpr bool kContigKd = ContigKd;
  const __half* p;
  int64_t MN, Kd, ld;
  bool vec;  // 16-byte loads allowed: p aligned and ld % 8 == 0

  static Dense make(const __half* p, int64_t MN, int64_t Kd, int64_t ld) {
    return {p, MN, Kd, ld, aligned16(p) && ld % 8 == 0};
  }
  __device__ __half at(int64_t mn, int64_t kd) const {
    if (mn >= MN || kd >= Kd) return __half(0.0f);
    return ContigKd ? p[mn * ld + kd] : p[kd * ld + mn];
  }
  template <class Copy = Copy8>
  __device__ void load8(int64_t mn, int64_t kd, __half* dst, Copy copy = {}) const {
    if constexpr (ContigKd) {
      if (mn >= MN) return zero8(dst);
      const __half* row = p + mn * ld;
      if (vec && kd + 8 <= Kd) return copy(dst, row + kd);
      for (int j = 0; j < 8; j++) dst[j] = kd + j < Kd ? row[kd + j] : __half(0.0f);
    } else {
      if (kd >= Kd) return zero8(dst);
      const __half* row = p + kd * ld;
      if (vec && mn + 8 <= MN) return copy(dst, row + mn);
      for (int j = 0; j < 8; j++) dst[j] = mn + j < MN ? row[mn + j] : __half(0.0f);
    }
  }
};

// --- the kernel --------------------------------------------------------------------------

// Copies the ROWS x BK tile of `op` at (mn0, kd0) into shared memory: [ROWS][BK+PAD] when the
// operand is contiguous along kd, else [BK][ROWS+PAD]. Every thread of the block takes runs of
// 8 in turn, so neighbouring threads read neighbouring 16 bytes. copy: the operands' 16-byte
// copy (Copy8 above).
template <int ROWS, int THREADS, class Op, class Copy = Copy8>
__device__ __forceinline__ void load_tile(const Op& op, int64_t mn0, int64_t kd0, __half* s,
                                          Copy copy = {}) {
  if constexpr (Op::kContigKd) {
    constexpr int runs_per_row = BK / 8;
    for (int i = threadIdx.x; i < ROWS * runs_per_row; i += THREADS) {
      const int r = i / runs_per_row, k8 = (i % runs_per_row) * 8;
      op.load8(mn0 + r, kd0 + k8, s + r * (BK + PAD) + k8, copy);
    }
  } else {
    constexpr int runs_per_row = ROWS / 8;
    for (int i = threadIdx.x; i < BK * runs_per_row; i += THREADS) {
      const int k = i / runs_per_row, r8 = (i % runs_per_row) * 8;
      op.load8(mn0 + r8, kd0 + k, s + k * (ROWS + PAD) + r8, copy);
    }
  }
}

// Halves of shared memory that load_tile fills for a ROWS x BK tile.
template <int ROWS, bool ContigKd>
__host__ __device__ constexpr int tile_halves() {
  return ContigKd ? ROWS * (BK + PAD) : BK * (ROWS + PAD);
}

// a.x[t] += b.x[t]: two accumulator fragments of one type hold the same elements of their
// tiles in the same places, so they add element by element.
template <class Frag> __device__ __forceinline__ void add_fragment(Frag& a, const Frag& b) {
  for (int t = 0; t < a.num_elements; t++) a.x[t] += b.x[t];
}

// What a block of a tile kernel works on: its tile's first row m0 and column n0 of C, and its
// slice [kd_begin, kd_end) of kd (slice blockIdx.z of kd_chunk; kd_chunk a multiple of BK, so a
// tile never straddles two slices).
struct BlockRange {
  int64_t m0, n0, kd_begin, kd_end;
};
template <int BM, int BN> __device__ __forceinline__ BlockRange block_range(int64_t Kd,
                                                                            int64_t kd_chunk) {
  const int64_t kd_begin = int64_t(blockIdx.z) * kd_chunk;
  return {int64_t(blockIdx.x) * BM, int64_t(blockIdx.y) * BN, kd_begin,
          kd_begin + kd_chunk < Kd ? kd_begin + kd_chunk : Kd};
}

// The shared memory of a tile kernel, in halves and bytes: Stages copies of the A and B tiles
// (load_tile's layouts) during the main loop, then the fp32 C tile (rows of kLdc floats: WMMA
// wants ldm % 4 == 0) in the same bytes. A's halves * 2 bytes is a multiple of 32, so B (and
// each stage) starts WMMA-aligned.
template <int BM, int BN, class OpA, class OpB, int Stages = 1> struct TileSmem {
  static constexpr int kA = tile_halves<BM, OpA::kContigKd>();
  static constexpr int kB = tile_halves<BN, OpB::kContigKd>();
  static constexpr int kStage = kA + kB;
  static constexpr int kLdc = BN + 4;
  static constexpr int kBytes = Stages * kStage * 2 > BM * kLdc * 4 ? Stages * kStage * 2
                                                                     : BM * kLdc * 4;
};

// The C tile in shared memory (fp32, BM x BN, rows of ldc) through epi, each thread handing it
// consecutive n (coalesced stores), skipping what lies outside C. Called by every thread of the
// block after a __syncthreads.
template <int BM, int BN, int THREADS, class Epi>
__device__ __forceinline__ void epilogue(int64_t M, int64_t N, int64_t m0, int64_t n0,
                                         const float* sC, int ldc, const Epi& epi) {
  for (int i = threadIdx.x; i < BM * BN; i += THREADS) {
    const int r = i / BN, c = i % BN;
    const int64_t m = m0 + r, n = n0 + c;
    if (m < M && n < N) epi(m, n, int(blockIdx.z), sC[r * ldc + c]);
  }
}

// One warp's 32 x 32 piece of the C tile: 2 x 2 WMMA accumulators (and with Blocked a second
// set, the finished blocks of the sum), fed from the A and B tiles in shared memory. The main
// loops of the tensor-core kernels (tc_gemm_kernel below, and the ladder's pipelined rung)
// differ in how the tiles get there, not in this.
template <int BM, int BN, bool Blocked, class OpA, class OpB>
struct WarpTile {
  // A tile [BM][BK+PAD] is row-major A; [BK][BM+PAD] is column-major A. B tile [BN][BK+PAD]
  // holds B^T row-major, i.e. column-major B; [BK][BN+PAD] is row-major B.
  using LayoutA = std::conditional_t<OpA::kContigKd, nvcuda::wmma::row_major,
                                     nvcuda::wmma::col_major>;
  using LayoutB = std::conditional_t<OpB::kContigKd, nvcuda::wmma::col_major,
                                     nvcuda::wmma::row_major>;
  using Acc = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;
  static_assert(kSumBlock % BK == 0, "a block of the sum is whole kd steps");

  int wm, wn;         // the piece's first row and column in the tile
  Acc acc[2][2], sum[2][2];  // sum: Blocked
  int steps = 0;      // kd steps in acc since it was last added into sum (Blocked)

  __device__ explicit WarpTile(int warp) {
    wm = (warp / (BN / 32)) * 32, wn = (warp % (BN / 32)) * 32;
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++) {
        nvcuda::wmma::fill_fragment(acc[i][j], 0.0f);
        nvcuda::wmma::fill_fragment(sum[i][j], 0.0f);
      }
  }
  // The MMAs of one kd step (BK = 2 x 16) from the tiles at sA, sB; then, Blocked, a whole
  // block goes into sum and acc starts from 0 again.
  __device__ void step(const __half* sA, const __half* sB) {
    using namespace nvcuda;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, LayoutA> fa[2];
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, LayoutB> fb[2];
    for (int kk = 0; kk < BK; kk += 16) {
      for (int i = 0; i < 2; i++) {
        const int row = wm + 16 * i;
        if constexpr (OpA::kContigKd)
          wmma::load_matrix_sync(fa[i], sA + row * (BK + PAD) + kk, BK + PAD);
        else
          wmma::load_matrix_sync(fa[i], sA + kk * (BM + PAD) + row, BM + PAD);
      }
      for (int j = 0; j < 2; j++) {
        const int col = wn + 16 * j;
        if constexpr (OpB::kContigKd)
          wmma::load_matrix_sync(fb[j], sB + col * (BK + PAD) + kk, BK + PAD);
        else
          wmma::load_matrix_sync(fb[j], sB + kk * (BN + PAD) + col, BN + PAD);
      }
      for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    if (Blocked && ++steps == kSumBlock / BK) {  // a whole block: into sum, acc from 0 again
      for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
          add_fragment(sum[i][j], acc[i][j]);
          nvcuda::wmma::fill_fragment(acc[i][j], 0.0f);
        }
      steps = 0;
    }
  }
  // After the last step: the piece (Blocked: the blocks' sum + the last, shorter, block) into
  // the fp32 C tile sC (rows of ldc floats).
  __device__ void store(float* sC, int ldc) {
    if (Blocked)
      for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) add_fragment(acc[i][j], sum[i][j]);
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++)
        nvcuda::wmma::store_matrix_sync(sC + (wm + 16 * i) * ldc + wn + 16 * j, acc[i][j], ldc,
                                        nvcuda::wmma::mem_row_major);
  }
};

// Block (BM/32)*(BN/32) warps; grid (ceil(M/BM), ceil(N/BN), splits). Slice z covers kd in
// [z*kd_chunk, min(Kd, (z+1)*kd_chunk)); kd_chunk is a multiple of BK, so a tile never
// straddles two slices. Calls epi(m, n, z, acc) for every (m, n) inside C. Blocked: the sums
// over kd in blocks of kSumBlock (above).
template <int BM, int BN, bool Blocked, class OpA, class OpB, class Epi>
__global__ void __launch_bounds__((BM / 32) * (BN / 32) * 32)
    tc_gemm_kernel(int64_t M, int64_t N, int64_t Kd, int64_t kd_chunk, OpA a, OpB b, Epi epi) {
  constexpr int THREADS = (BM / 32) * (BN / 32) * 32;
  using Smem = TileSmem<BM, BN, OpA, OpB>;
  __shared__ __align__(128) unsigned char smem[Smem::kBytes];
  __half* sA = reinterpret_cast<__half*>(smem);
  __half* sB = sA + Smem::kA;
  float* sC = reinterpret_cast<float*>(smem);
  const BlockRange blk = block_range<BM, BN>(Kd, kd_chunk);
  WarpTile<BM, BN, Blocked, OpA, OpB> tile(threadIdx.x / 32);

  for (int64_t kd0 = blk.kd_begin; kd0 < blk.kd_end; kd0 += BK) {
    // kd >= Kd reads as 0 inside the operands; kd in [kd_end, Kd) only happens in the last
    // slice's last tile, where kd_end == Kd.
    load_tile<BM, THREADS>(a, blk.m0, kd0, sA);
    load_tile<BN, THREADS>(b, blk.n0, kd0, sB);
    __syncthreads();
    tile.step(sA, sB);
    __syncthreads();  // before the next tile overwrites sA / sB
  }
  // The loop ended on a __syncthreads (or never ran): sA/sB are free to reuse as sC.
  tile.store(sC, Smem::kLdc);
  __syncthreads();
  epilogue<BM, BN, THREADS>(M, N, blk.m0, blk.n0, sC, Smem::kLdc, epi);
}

// The kernel a launch runs, as a type: tc_gemm_kernel above, or a rung of the kernel ladder
// (kernels/ladder/: the same tiles, split and epilogue around another main loop).
struct WmmaKernel {
  template <int BM, int BN, bool Blocked, class OpA, class OpB, class Epi>
  static void run(dim3 grid, cudaStream_t stream, int64_t M, int64_t N, int64_t Kd,
                  int64_t kd_chunk, const OpA& a, const OpB& b, const Epi& epi) {
    tc_gemm_kernel<BM, BN, Blocked>
        <<<grid, (BM / 32) * (BN / 32) * 32, 0, stream>>>(M, N, Kd, kd_chunk, a, b, epi);
  }
};

// Split-K, pass 1's epilogue: the slice's fp32 partial sum to ws[z][m][n].
struct StorePartial {
  float* ws;
  int64_t M, N;
  __device__ void operator()(int64_t m, int64_t n, int z, float acc) const {
    ws[(int64_t(z) * M + m) * N + n] = acc;
  }
};

// Split-K, pass 2: the slices of each (m, n) summed pairwise (kernels/blocked_sum.h), then epi.
// Few slices: one thread per (m, n). Many (more than kWarpFinish): one warp per (m, n)
// (warp_blocked_sum). Either way the order depends on `splits` alone, so the bits are the same
// on every run. (kWarpFinish: kernels/tc_plan.h.)

template <class Epi>
__global__ void tc_splitk_finish_kernel(int64_t M, int64_t N, int splits, const float* ws,
                                        Epi epi) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * N;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float s = blocked_sum<float, 1>(splits, [&](int64_t z) { return ws[z * M * N + i]; });
    epi(i / N, i % N, 0, s);
  }
}

template <class Epi>
__global__ void tc_splitk_finish_warp_kernel(int64_t M, int64_t N, int splits, const float* ws,
                                             Epi epi) {
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; i < M * N; i += warps) {
    const float s = warp_blocked_sum(splits, [&](int64_t z) { return ws[z * M * N + i]; });
    if (threadIdx.x % 32 == 0) epi(i / N, i % N, 0, s);
  }
}

// Runs one tile configuration as `plan` (tc_gemm_plan: the split, the grid) says, checks.
// Kernel: WmmaKernel, or a ladder rung's (the same grid and threads).
template <int BM, int BN, bool Blocked, class Kernel, class OpA, class OpB, class Epi>
void launch(const TcPlan& plan, int64_t M, int64_t N, int64_t Kd, const OpA& a, const OpB& b,
            const Epi& epi, cudaStream_t stream) {
  constexpr int THREADS = (BM / 32) * (BN / 32) * 32;
  CHECK(plan.bm == BM && plan.bn == BN && plan.threads == THREADS,
        "tc_gemm: the plan's " << plan.bm << "x" << plan.bn << " tile is not " << BM << "x" << BN);
  CHECK(plan.tiles_n <= 65535, "tc_gemm: N = " << N << " is too large");
  const int64_t splits = plan.splits, kd_chunk = plan.kd_chunk;
  const dim3 grid{unsigned(plan.tiles_m), unsigned(plan.tiles_n), unsigned(splits)};
  if (splits == 1) {
    Kernel::template run<BM, BN, Blocked>(grid, stream, M, N, Kd, kd_chunk, a, b, epi);
    LAUNCH_CHECK();
    return;
  }
  DeviceBuffer ws(size_t(splits * M * N) * sizeof(float), current_device(), stream);
  const StorePartial part{static_cast<float*>(ws.data()), M, N};
  Kernel::template run<BM, BN, Blocked>(grid, stream, M, N, Kd, kd_chunk, a, b, part);
  LAUNCH_CHECK();
  if (plan.warp_finish)
    tc_splitk_finish_warp_kernel<<<grid_size(M * N * 32, 256), 256, 0, stream>>>(
        M, N, int(splits), part.ws, epi);
  else
    tc_splitk_finish_kernel<<<grid_size(M * N, 256), 256, 0, stream>>>(M, N, int(splits),
                                                                         part.ws, epi);
  LAUNCH_CHECK();
  // ws goes back to the pool here; the pool hands it out again only to work queued later on
  // this stream, i.e. after the finish kernel (kernels/caching_allocator.h).
}

}  // namespace tc

// C = A * B through epi (see the top of this file). The tile shape and the split are
// tc_gemm_plan's (kernels/tc_plan.h: 32x64 for M <= 32, 128x32 for N <= 32, 64x64 for
// M <= 64, else 128x64), which the launch costs count from too. Blocked = true: kd runs over a
// whole batch (the weight gradients), summed in blocks (above). Kernel: the main loop
// (tc::WmmaKernel; the ladder's rungs run theirs through the same plan, kernels/ladder/).
template <bool Blocked = false, class Kernel = tc::WmmaKernel, class OpA, class OpB, class Epi>
void tc_gemm(int64_t M, int64_t N, int64_t Kd, const OpA& a, const OpB& b, const Epi& epi,
             cudaStream_t stream) {
  const TcPlan plan = tc_gemm_plan(M, N, Kd);
  if (plan.launches == 0) return;  // M or N empty
  if (plan.bm == 32) tc::launch<32, 64, Blocked, Kernel>(plan, M, N, Kd, a, b, epi, stream);
  else if (plan.bn == 32) tc::launch<128, 32, Blocked, Kernel>(plan, M, N, Kd, a, b, epi, stream);
  else if (plan.bm == 64) tc::launch<64, 64, Blocked, Kernel>(plan, M, N, Kd, a, b, epi, stream);
  else tc::launch<128, 64, Blocked, Kernel>(plan, M, N, Kd, a, b, epi, stream);
}

// --- epilogues: the conv2d and linear outputs are all row-major (M x N) with stride ld -----

// out[m][n] = half(acc + bias[n]) (bias may be null): the forward passes.
struct EpiBias {
  __half* out;
  const __half* bias;
  int64_t ld;
  __device__ void operator()(int64_t m, int64_t n, int, float acc) const {
    if (bias) acc += __half2float(bias[n]);
    out[m * ld + n] = __float2half_rn(acc);
  }
};

// out[m][n] = half(float(out[m][n]) + acc): the backward passes accumulate (+=), rounding once.
struct EpiAccumulate {
  __half* out;
  int64_t ld;
  __device__ void operator()(int64_t m, int64_t n, int, float acc) const {
    __half* o = out + m * ld + n;
    *o = __float2half_rn(__half2float(*o) + acc);
  }
};

}  // namespace cutrain
