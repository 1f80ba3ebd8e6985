// The conv ladder, rung v2: the convolution as an implicit GEMM, plainly. tc::PlainKernel, a
// main loop for tc_gemm (kernels/tc_gemm.cuh): each thread computes whole outputs of
// C = A * B, one at a time, reading every operand element from global memory as it needs it
// (the operand's at(mn, kd), mn the row of A or the column of B: conv_gemm.cuh's Im2colA,
// DgradA, DgradB, WgradB and tc_gemm.cuh's Dense). No shared memory, no registers reused
// across outputs.
//
// Math: tc_gemm.cuh's GEMM, C (M x N) = A (M x Kd) * B (Kd x N), over conv_gemm.cuh's operands:
//   for each (m, n) of the block's tile: acc = sum over the block's kd of A(m, kd) * B(kd, n).
// What changed from v1 (conv2d.cu's direct kernels: three kernels, each its own loop nest over
// the convolution's indices, a thread per output of the pass): the three passes are one GEMM
// kernel over three pairs of operands. An operand says which input element sits at (mn, kd)
// (zero in the padding); the GEMM never knows it is a convolution. And the GEMM runs on
// tc_gemm_plan's grid (kernels/tc_plan.h): BM x BN tiles of C, and split-K, slices of kd in
// blockIdx.z, where the tiles alone cannot fill the GPU.
// Why it should be faster than v1: where v1 has few outputs and long sums (the weight
// gradients: a thread per weight, each summing over N*P*Q pixels one at a time; 9,216 threads
// for default's conv2 on a GPU that holds 270,000) split-K spreads each sum over many blocks.
// Where v1 already has threads enough (the forward, the data gradient) it should gain little:
// every multiply-add still loads both its operands (from L1 or L2 mostly). That is what v3
// changes.
// What it leaves to v3: reuse. The A element of row m is loaded again for each of the tile's
// BN columns, the B element of column n for each of its BM rows; v3 stages a tile of each in
// shared memory once and computes a 4 x 8 piece a thread from there.
//
// Launch: tc_gemm_plan's grid and threads, as v3-v5 (BM x BN of 128x64, 64x64, 128x32 or
// 32x64, BM*BN/32 threads a block; split-K as v4): thread t computes the tile's outputs t,
// t + threads, ... (row i / BN, column i % BN: a warp's 32 threads on 32 neighbouring columns),
// each over the block's slice of kd, and hands it to the epilogue (or the split-K partials).
// Bytes: v4's (the same operands, tiles and split-K; what L1 and L2 serve again is not
//   counted): conv_ladder.h's conv2d_forward_rung_gpu_cost, conv2d_backward_data_rung_gpu_cost,
//   conv2d_backward_filter_rung_gpu_cost (from kernels/tc_plan.h's tc_gemm_cost).
// Flops: 2*M*N*Kd, on CUDA cores (conv_ladder.h: conv2d_forward_rung_gpu_cost and the others,
//   tensor = false).
// Precision: fp16 operands widened to fp32, products and sums in fp32 (fmaf: one rounding per
//   multiply-add), kd in order; with Blocked (weight gradients) in blocks of kSumBlock, as v3.
//   Agrees with the CPU reference within the tc path's tolerance, not bit for bit.
#pragma once
#include "kernels/tc_gemm.cuh"

namespace cutrain {
namespace tc {

template <int BM, int BN, bool Blocked, class OpA, class OpB, class Epi>
__global__ void __launch_bounds__(BM * BN / 32)
    plain_gemm_kernel(int64_t M, int64_t N, int64_t Kd, int64_t kd_chunk, OpA a, OpB b, Epi epi) {
  constexpr int THREADS = BM * BN / 32;
  const BlockRange blk = block_range<BM, BN>(Kd, kd_chunk);
  for (int i = threadIdx.x; i < BM * BN; i += THREADS) {
    const int64_t m = blk.m0 + i / BN, n = blk.n0 + i % BN;
    if (m >= M || n >= N) continue;
    float acc = 0.0f, sum = 0.0f;  // sum: the finished blocks (Blocked)
    for (int64_t kd = blk.kd_begin; kd < blk.kd_end; kd++) {
      acc = fmaf(__half2float(a.at(m, kd)), __half2float(b.at(n, kd)), acc);  // A(m,kd) B(kd,n)
      if (Blocked && (kd - blk.kd_begin + 1) % kSumBlock == 0) sum += acc, acc = 0.0f;
    }
    epi(m, n, int(blockIdx.z), acc + sum);
  }
}

// The rung as tc_gemm's Kernel: tc_gemm<Blocked, tc::PlainKernel>(...).
struct PlainKernel {
  template <int BM, int BN, bool Blocked, class OpA, class OpB, class Epi>
  static void run(dim3 grid, cudaStream_t stream, int64_t M, int64_t N, int64_t Kd,
                  int64_t kd_chunk, const OpA& a, const OpB& b, const Epi& epi) {
    plain_gemm_kernel<BM, BN, Blocked>
        <<<grid, BM * BN / 32, 0, stream>>>(M, N, Kd, kd_chunk, a, b, epi);
  }
};

}  // namespace tc
}  // namespace cutrain
