// defines: TcPlan and tc_gemm_plan(), the host-side choices of tc_gemm (tc_gemm.cuh): the tile
// shape, the grid and the split-K rule, as a plain function of (M, N, Kd); tc_gemm_cost(), what
// one tc_gemm launches and moves. The launcher runs what the plan says, and the launch costs
// of conv2d's and linear's tc paths (conv2d.h, linear.h) count from it, so the two cannot
// drift. No CUDA: a CPU-only build compiles it.
#pragma once
#include <algorithm>
#include <cstdint>

#include "kernels/launch_plan.h"

namespace cutrain {
namespace tc {
constexpr int BK = 32;           // kd step of the main loop: 2 WMMA k-steps of 16
constexpr int kWarpFinish = 32;  // more slices than this: the split-K finish runs a warp per (m, n)
}  // namespace tc

struct TcPlan {
  int launches = 0;          // 0 (M or N empty: nothing to do), 1, or 2 (split-K: + the finish)
  int bm = 0, bn = 0;        // the tile, BM x BN
  int threads = 0;           // per block: (BM/32) * (BN/32) warps
  int64_t tiles_m = 0, tiles_n = 0;
  int64_t splits = 1;        // slices of kd (gridDim.z); > 1: partials to scratch, then a finish
  int64_t kd_chunk = 0;      // kd per slice, a multiple of BK
  bool warp_finish = false;  // the finish is tc_splitk_finish_warp_kernel (splits > kWarpFinish)
};

// C (M x N) = A (M x Kd) * B (Kd x N): which tiles, how many slices.
inline TcPlan tc_gemm_plan(int64_t M, int64_t N, int64_t Kd) {
  TcPlan p;
  if (M <= 0 || N <= 0) return p;
  // The tile from M and N: short outputs (M <= 32: the weight gradients of layers with 32
  // output channels, the classifier's) get 32-high tiles, so that no warp computes rows of
  // zeros; narrow ones (N <= 32: conv layers with K = 32) 32-wide tiles; short ones (M <= 64:
  // weight gradients) 64-high tiles; everything else 128 x 64.
  if (M <= 32) p.bm = 32, p.bn = 64;
  else if (N <= 32) p.bm = 128, p.bn = 32;
  else if (M <= 64) p.bm = 64, p.bn = 64;
  else p.bm = 128, p.bn = 64;
  p.threads = (p.bm / 32) * (p.bn / 32) * 32;
  p.tiles_m = (M + p.bm - 1) / p.bm;
  p.tiles_n = (N + p.bn - 1) / p.bn;
  const int64_t tiles = p.tiles_m * p.tiles_n, ksteps = (Kd + tc::BK - 1) / tc::BK;
  // Split kd only when the tiles leave SMs idle: then into slices of >= 4 kd steps,
  // enough for about kWarpsPerSm warps on each SM. A block's loads and MMAs do not overlap
  // (tc_gemm.cuh), so it takes many warps in flight to hide the loads' latency: a weight
  // gradient of the default model (M = 32 or 64 output channels) has 1 to 9 tiles, and with 2
  // blocks an SM (the old aim) its SMs mostly waited. The blocked accumulators' ~95 registers
  // allow about 20 warps an SM. The slices' fp32 partial tiles cost splits * M * N * 4 bytes
  // of scratch: a few MiB at most, since splits shrinks as M * N grows.
  // "The GPU" is a fixed 132 SMs (an H100 SXM's), not the device's count: the split decides
  // the order of the fp32 sums, so the result's bits depend on the shape alone, and a run
  // resumed on another GPU of the same architecture (an H100 PCIe has 114 SMs, a MIG slice
  // fewer) continues bit for bit.
  constexpr int sms = 132, kWarpsPerSm = 16, kMaxSplits = 1024;
  constexpr int64_t warps_wanted = int64_t(sms) * kWarpsPerSm;
  const int64_t warps = tiles * (p.threads / 32);
  int64_t splits = 1;
  if (tiles < sms && warps < warps_wanted && ksteps >= 16)
    splits = std::min<int64_t>({(warps_wanted + warps - 1) / warps, ksteps / 4, kMaxSplits});
  p.kd_chunk = std::max<int64_t>(1, (ksteps + splits - 1) / splits) * tc::BK;
  p.splits = std::max<int64_t>(1, (Kd + p.kd_chunk - 1) / p.kd_chunk);  // no empty slice
  p.warp_finish = p.splits > tc::kWarpFinish;
  p.launches = p.splits == 1 ? 1 : 2;
  return p;
}

// The cost of one tc_gemm(M, N, Kd): the plan's launches (the GEMM, and the split-K finish);
// the operands read once (operand_bytes) and the output as the epilogue moves it (out_bytes:
// written, or read and written when accumulated); under split-K also the fp32 partials, written
// by the GEMM and read by the finish. 2*M*N*Kd flops on tensor cores.
inline LaunchCost tc_gemm_cost(const std::string& kernel, int64_t M, int64_t N, int64_t Kd,
                               double operand_bytes, double out_bytes) {
  const TcPlan p = tc_gemm_plan(M, N, Kd);
  LaunchCost c{kernel, p.launches, 0, 0, true};
  if (p.launches == 0) return c;
  c.bytes = operand_bytes + out_bytes;
  if (p.splits > 1) c.bytes += 2 * nbytes(p.splits * M * N, sizeof(float));
  c.flops = 2.0 * double(M) * double(N) * double(Kd);
  return c;
}

}  // namespace cutrain
