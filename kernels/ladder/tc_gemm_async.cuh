// The conv ladder, rung v5: tensor cores with the loads pipelined. tc::AsyncKernel, a main
// loop for tc_gemm (kernels/tc_gemm.cuh): v4's tiles, WMMA fragments, split-K and epilogue,
// with two shared-memory stages filled by cp.async (sm_80 and later) so that the loads of the
// next kd step fly while the MMAs of this one run.
//
// Math: tc_gemm.cuh's GEMM, C (M x N) = A (M x Kd) * B (Kd x N), over conv_gemm.cuh's operands.
// What changed from v4 (tc_gemm.cuh): v4 loads a tile, waits at a barrier, multiplies, waits
// again, and only then loads the next tile: each block's loads and MMAs alternate, and only
// the other blocks resident on the SM (3-6) hide the load latency. Here the A and B tiles have two stages: the
// copies of step i+1 are issued (cp.async.cg, 16 bytes each, global -> shared without
// registers) before the MMAs of step i, and waited for (cp.async.wait_group) only after them.
// Operand runs that cannot be one aligned 16-byte copy (padding, a first layer of 1 or 3
// channels, the edges of the matrix) are still written by the thread itself, at once; the
// barrier before the stage is read orders them like the asynchronous ones.
// Why it should be faster than v4: the load latency (hundreds of cycles from L2) overlaps a
// step's MMAs, which matters most where few blocks share an SM (the weight gradients, the
// small layers of the default models).
// What it leaves to a v6: the gathers' index arithmetic is unchanged (per 8 halves: divisions
// by C, S and Q), and a strided data gradient still multiplies the zeros of the taps that read
// nothing.
//
// Launch: as v4 (tc_gemm_plan), with twice the A/B shared memory: 2 x 15 KiB for a 128 x 64
// tile, inside the 48 KiB of static shared memory (the fp32 C tile, 34 KiB, reuses it).
// Bytes: v4's (global memory moves the same tiles; only when they move changes):
//   conv_ladder.h's conv2d_forward_rung_gpu_cost, conv2d_backward_data_rung_gpu_cost,
//   conv2d_backward_filter_rung_gpu_cost (from kernels/tc_plan.h's tc_gemm_cost).
// Flops: 2*M*N*Kd on tensor cores, the same functions (conv_ladder.h:
//   conv2d_forward_rung_gpu_cost, ...).
// Precision: v4's exactly: the same fragments, in the same order, so the same bits as v4.
#pragma once
#include <cuda_fp16.h>
#include <cuda_pipeline_primitives.h>

#include "kernels/tc_gemm.cuh"

namespace cutrain {
namespace tc {

// The operands' 16-byte copy as cp.async, through CUDA's pipeline primitives
// (cuda_pipeline_primitives.h: cp.async.cg for 16 bytes on sm_80 and later, a plain copy
// before): issued now, in shared memory only after a cp_async_wait that covers its group. The
// simulator emulates them with that rule (sim/pipeline.cpp), so this path runs there too.
struct AsyncCopy8 {
  __device__ __forceinline__ void operator()(__half* dst, const __half* src) const {
    __pipeline_memcpy_async(dst, src, 16);
  }
};
// Closes the group of copies issued since the last commit (cp.async.commit_group).
__device__ __forceinline__ void cp_async_commit() { __pipeline_commit(); }
// Waits until at most `Pending` committed groups of this thread are still in flight
// (cp.async.wait_group).
template <int Pending> __device__ __forceinline__ void cp_async_wait() {
  __pipeline_wait_prior(Pending);
}

template <int BM, int BN, bool Blocked, class OpA, class OpB, class Epi>
__global__ void __launch_bounds__((BM / 32) * (BN / 32) * 32)
    async_gemm_kernel(int64_t M, int64_t N, int64_t Kd, int64_t kd_chunk, OpA a, OpB b,
                      Epi epi) {
  constexpr int THREADS = (BM / 32) * (BN / 32) * 32;
  using Smem = TileSmem<BM, BN, OpA, OpB, 2>;
  constexpr int STAGE = Smem::kStage, A_HALVES = Smem::kA;  // a stage: A, then B
  __shared__ __align__(128) unsigned char smem[Smem::kBytes];
  __half* stages = reinterpret_cast<__half*>(smem);  // stage s at s*STAGE halves
  float* sC = reinterpret_cast<float*>(smem);
  const BlockRange blk = block_range<BM, BN>(Kd, kd_chunk);
  const int64_t m0 = blk.m0, n0 = blk.n0, kd_begin = blk.kd_begin, kd_end = blk.kd_end;
  WarpTile<BM, BN, Blocked, OpA, OpB> tile(threadIdx.x / 32);  // v4's, the same MMAs
  auto issue = [&](int64_t kd0, int s) {  // the copies of step kd0 into stage s, one group
    load_tile<BM, THREADS>(a, m0, kd0, stages + s * STAGE, AsyncCopy8{});
    load_tile<BN, THREADS>(b, n0, kd0, stages + s * STAGE + A_HALVES, AsyncCopy8{});
    cp_async_commit();
  };

  int s = 0;
  if (kd_begin < kd_end) issue(kd_begin, 0);
  for (int64_t kd0 = kd_begin; kd0 < kd_end; kd0 += BK, s ^= 1) {
    if (kd0 + BK < kd_end) {
      issue(kd0 + BK, s ^ 1);  // the next step's copies fly during this step's MMAs
      cp_async_wait<1>();      // ... but this step's (the older group) must have landed
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // every thread's copies (and direct writes) into stage s are visible
    tile.step(stages + s * STAGE, stages + s * STAGE + A_HALVES);
    __syncthreads();  // stage s is read: the copies issued next round may overwrite it
  }
  tile.store(sC, Smem::kLdc);
  __syncthreads();
  epilogue<BM, BN, THREADS>(M, N, m0, n0, sC, Smem::kLdc, epi);
}

// The rung as tc_gemm's Kernel: tc_gemm<Blocked, tc::AsyncKernel>(...).
struct AsyncKernel {
  template <int BM, int BN, bool Blocked, class OpA, class OpB, class Epi>
  static void run(dim3 grid, cudaStream_t stream, int64_t M, int64_t N, int64_t Kd,
                  int64_t kd_chunk, const OpA& a, const OpB& b, const Epi& epi) {
    async_gemm_kernel<BM, BN, Blocked>
        <<<grid, (BM / 32) * (BN / 32) * 32, 0, stream>>>(M, N, Kd, kd_chunk, a, b, epi);
  }
};

}  // namespace tc
}  // namespace cutrain
