// The conv ladder, rung v3: shared-memory tiles, CUDA cores. tc::FmaKernel, a main loop for
// tc_gemm (kernels/tc_gemm.cuh) that computes C = A * B from the same operands, tiles, split-K
// and epilogue as the tensor-core kernel (v4), with fp32 fused multiply-adds instead of WMMA.
//
// Math: tc_gemm.cuh's GEMM, C (M x N) = A (M x Kd) * B (Kd x N), over conv_gemm.cuh's operands.
// What changed from v2 (gemm_plain.cuh: the same grid and split-K, but a thread computes one
// output at a time and reads both operands of every multiply-add from global memory): a block
// stages a BM x BK tile of A and a BK x BN tile of B in shared memory once (load_tile: 16-byte
// loads, neighbouring threads on neighbouring bytes), and each of its threads then computes a
// 4 x 8 piece of the BM x BN output from there: per kd, 4 values of A and 8 of B feed 32
// multiply-adds held in registers. Each element of A is read from global memory once per
// block instead of once per output, and from shared memory once per 8 outputs.
// Why it should be faster than v2: v2 is bound by its loads (two global loads, each an index
// computation, per multiply-add); here a kd step loads (BM + BN) * 32 halves for
// BM * BN * 32 multiply-adds, 43 of them a loaded half for 128 x 64 tiles.
// What it leaves to v4: the multiply-adds themselves run on CUDA cores at fp32 rate, a
// fraction of what the tensor cores do on fp16 (v4: WMMA).
//
// Launch: the tile plan of tc_gemm_plan (kernels/tc_plan.h): BM x BN of 128x64, 64x64,
// 128x32 or 32x64, (BM/32)*(BN/32)*32 threads, i.e. BM*BN/32: thread t computes rows
// 4*(t / (BN/8)) .. +3 and columns 8*(t % (BN/8)) .. +7 of the tile; split-K as v4.
// Bytes: v4's, the same tiles and split-K: conv_ladder.h's conv2d_forward_rung_gpu_cost,
//   conv2d_backward_data_rung_gpu_cost, conv2d_backward_filter_rung_gpu_cost (from
//   kernels/tc_plan.h's tc_gemm_cost).
// Flops: 2*M*N*Kd, on CUDA cores (conv_ladder.h: conv2d_forward_rung_gpu_cost and the others,
//   tensor = false).
// Precision: fp16 operands widened to fp32, products and sums in fp32 (fmaf: one rounding per
// multiply-add); with Blocked (weight gradients) the kd sum in blocks of kSumBlock, as v4.
// Results agree with the CPU reference within the tc path's tolerance, not bit for bit.
#pragma once
#include "kernels/tc_gemm.cuh"

namespace cutrain {
namespace tc {

template <int BM, int BN, bool Blocked, class OpA, class OpB, class Epi>
__global__ void __launch_bounds__(BM * BN / 32)
    fma_gemm_kernel(int64_t M, int64_t N, int64_t Kd, int64_t kd_chunk, OpA a, OpB b, Epi epi) {
  constexpr int THREADS = BM * BN / 32, TM = 4, TN = 8;
  static_assert(THREADS == (BM / 32) * (BN / 32) * 32, "the tile plan's thread count");
  static_assert((BM / TM) * (BN / TN) == THREADS, "a 4 x 8 piece a thread");
  using Smem = TileSmem<BM, BN, OpA, OpB>;
  constexpr int LDC = Smem::kLdc;
  __shared__ __align__(128) unsigned char smem[Smem::kBytes];
  __half* sA = reinterpret_cast<__half*>(smem);
  __half* sB = sA + Smem::kA;
  float* sC = reinterpret_cast<float*>(smem);
  const BlockRange blk = block_range<BM, BN>(Kd, kd_chunk);
  const int row0 = (threadIdx.x / (BN / TN)) * TM, col0 = (threadIdx.x % (BN / TN)) * TN;

  // A(r, k) and B(k, c) of the tiles in shared memory, in either layout (load_tile).
  auto a_at = [&](int r, int k) {
    return __half2float(OpA::kContigKd ? sA[r * (BK + PAD) + k] : sA[k * (BM + PAD) + r]);
  };
  auto b_at = [&](int k, int c) {
    return __half2float(OpB::kContigKd ? sB[c * (BK + PAD) + k] : sB[k * (BN + PAD) + c]);
  };

  float acc[TM][TN] = {}, sum[TM][TN] = {};  // sum: the finished blocks (Blocked)
  int steps = 0;
  for (int64_t kd0 = blk.kd_begin; kd0 < blk.kd_end; kd0 += BK) {
    load_tile<BM, THREADS>(a, blk.m0, kd0, sA);
    load_tile<BN, THREADS>(b, blk.n0, kd0, sB);
    __syncthreads();
    for (int k = 0; k < BK; k++) {
      float av[TM], bv[TN];
      for (int i = 0; i < TM; i++) av[i] = a_at(row0 + i, k);
      for (int j = 0; j < TN; j++) bv[j] = b_at(k, col0 + j);
      for (int i = 0; i < TM; i++)
        for (int j = 0; j < TN; j++) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();  // before the next tile overwrites sA / sB
    if (Blocked && ++steps == kSumBlock / BK) {
      for (int i = 0; i < TM; i++)
        for (int j = 0; j < TN; j++) sum[i][j] += acc[i][j], acc[i][j] = 0.0f;
      steps = 0;
    }
  }
  for (int i = 0; i < TM; i++)
    for (int j = 0; j < TN; j++) sC[(row0 + i) * LDC + col0 + j] = acc[i][j] + sum[i][j];
  __syncthreads();
  epilogue<BM, BN, THREADS>(M, N, blk.m0, blk.n0, sC, LDC, epi);
}

// The rung as tc_gemm's Kernel: tc_gemm<Blocked, tc::FmaKernel>(...).
struct FmaKernel {
  template <int BM, int BN, bool Blocked, class OpA, class OpB, class Epi>
  static void run(dim3 grid, cudaStream_t stream, int64_t M, int64_t N, int64_t Kd,
                  int64_t kd_chunk, const OpA& a, const OpB& b, const Epi& epi) {
    fma_gemm_kernel<BM, BN, Blocked>
        <<<grid, BM * BN / 32, 0, stream>>>(M, N, Kd, kd_chunk, a, b, epi);
  }
};

}  // namespace tc
}  // namespace cutrain
