// The launch costs the kernels' headers state (kernels/launch_plan.h), on the CPU: counts,
// bytes and flops worked out by hand from the launchers (the .cu files, tc_gemm_plan in
// kernels/tc_plan.h), and the roofline of a cost. A GPU checks the counts against a captured
// step (tests/train/cli/step_plan_gpu_test.cpp).
#include <string>

#include "kernels/batchnorm.h"
#include "kernels/conv2d.h"
#include "kernels/elementwise.h"
#include "kernels/input.h"
#include "kernels/ladder/batchnorm_ladder.h"
#include "kernels/ladder/conv_ladder.h"
#include "kernels/launch_plan.h"
#include "kernels/linear.h"
#include "kernels/sgd.h"
#include "kernels/tc_plan.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {
// 128 x 28 x 28 x 32 -> 32 channels, 3x3, pad 1: P = Q = 28.
Conv2dShape layer() {
  Conv2dShape s;
  s.N = 128, s.H = 28, s.W = 28, s.C = 32, s.K = 32, s.R = 3, s.S = 3, s.pad_h = 1, s.pad_w = 1;
  return s;
}
}  // namespace

TEST_CASE("launch cost: tc_gemm_plan's tiles and split-K") {
  // The forward of layer(): M = N*P*Q = 100352, N = K = 32, Kd = R*S*C = 288. N <= 32: 128x32
  // tiles, 784 of them, more than the 132 SMs: no split.
  TcPlan p = tc_gemm_plan(100352, 32, 288);
  REQUIRE(p.bm == 128);
  REQUIRE(p.bn == 32);
  REQUIRE(p.tiles_m == 784);
  REQUIRE(p.splits == 1);
  REQUIRE(p.launches == 1);
  // Its weight gradient: M = K = 32, N = R*S*C = 288, Kd = N*P*Q = 100352. 32x64 tiles (2
  // warps), 5 of them: 10 warps against 132 * 16 = 2112 wanted, and 3136 kd steps, so split
  // into min(ceil(2112/10), 3136/4, 1024) = 212 slices of ceil(3136/212) = 15 steps (480 kd);
  // 100352 kd make ceil(100352/480) = 210 of them. More than 32: the warp-per-output finish.
  p = tc_gemm_plan(32, 288, 100352);
  REQUIRE(p.bm == 32);
  REQUIRE(p.bn == 64);
  REQUIRE(p.kd_chunk == 480);
  REQUIRE(p.splits == 210);
  REQUIRE(p.warp_finish);
  REQUIRE(p.launches == 2);
  // 256 x 256 x 1024: 8 tiles of 128x64 (64 warps), 32 kd steps: min(33, 8, 1024) = 8
  // slices of 128 kd; few enough for the thread-per-output finish.
  p = tc_gemm_plan(256, 256, 1024);
  REQUIRE(p.bm == 128);
  REQUIRE(p.bn == 64);
  REQUIRE(p.splits == 8);
  REQUIRE(!p.warp_finish);
  REQUIRE(p.launches == 2);
  // A linear weight gradient, 10 x 512 over a batch of 4096: 8 tiles of 32x64 (16 warps), 128
  // kd steps: min(132, 32, 1024) = 32 slices, not more than kWarpFinish: a thread per output.
  p = tc_gemm_plan(10, 512, 4096);
  REQUIRE(p.splits == 32);
  REQUIRE(!p.warp_finish);
  // Fewer than 16 kd steps never split; 16 of them split in 4 (min(212, 16/4, 1024)).
  REQUIRE(tc_gemm_plan(32, 288, 15 * 32).launches == 1);
  REQUIRE(tc_gemm_plan(32, 288, 16 * 32).splits == 4);
  // An empty output launches nothing.
  REQUIRE(tc_gemm_plan(0, 288, 100352).launches == 0);
  REQUIRE(tc_gemm_plan(64, 0, 100352).launches == 0);
}

TEST_CASE("launch cost: conv2d on the tc path") {
  const Conv2dShape s = layer();
  const double x = 128.0 * 28 * 28 * 32, w = 32.0 * 9 * 32, y = x;  // P = H, K = C
  const double gemm = 2.0 * 128 * 28 * 28 * 32 * 3 * 3 * 32;        // 2*N*P*Q*K*R*S*C

  const LaunchCost f = conv2d_forward_gpu_cost(ConvImpl::tc, s, 2, false);
  REQUIRE(f.kernel == "conv2d_forward tc");
  REQUIRE(f.launches == 1);  // 784 tiles: no split (above)
  REQUIRE(f.flops == gemm);
  REQUIRE(f.flops == double(s.forward_flops()));
  REQUIRE(f.tensor);
  REQUIRE(!f.estimated);
  REQUIRE(f.bytes == 2 * (x + w + y));
  // The bias: K more halves read, an add per output.
  const LaunchCost fb = conv2d_forward_gpu_cost(ConvImpl::tc, s, 2, true);
  REQUIRE(fb.launches == 1);
  REQUIRE(fb.bytes == f.bytes + 2 * 32);
  REQUIRE(fb.flops == gemm + y);

  // dgrad: dx (N*H*W x C) += gather(dy) * w', the same GEMM size at stride 1, one launch;
  // dx read and written.
  const LaunchCost d = conv2d_backward_data_gpu_cost(ConvImpl::tc, s, 2);
  REQUIRE(d.launches == 1);
  REQUIRE(d.flops == gemm);
  REQUIRE(d.bytes == 2 * (y + w + 2 * x));

  // wgrad: split into 210 slices (tc_gemm_plan above), so the GEMM and its finish kernel;
  // the fp32 partials (210 x 32 x 288) are written and read back.
  const LaunchCost dw = conv2d_backward_filter_gpu_cost(ConvImpl::tc, s, 2, true, false);
  REQUIRE(dw.kernel == "conv2d_backward_filter tc");
  REQUIRE(dw.launches == 2);
  REQUIRE(dw.flops == gemm);
  REQUIRE(dw.tensor);
  REQUIRE(dw.bytes == 2 * (x + y + 2 * w) + 2 * 210.0 * 32 * 288 * 4);
  // + db: bias_grad_gpu's one kernel (partial sums, finished by the last blocks).
  REQUIRE(conv2d_backward_filter_gpu_cost(ConvImpl::tc, s, 2, true, true).launches == 3);
  REQUIRE(conv2d_backward_filter_gpu_cost(ConvImpl::tc, s, 2, false, true).launches == 1);
  REQUIRE(conv2d_backward_filter_gpu_cost(ConvImpl::tc, s, 2, false, false).launches == 0);

  // One image of 8x8: kd = 64 (2 steps) is too short to split: one launch.
  Conv2dShape small = s;
  small.N = 1, small.H = 8, small.W = 8;
  REQUIRE(conv2d_backward_filter_gpu_cost(ConvImpl::tc, small, 2, true, false).launches == 1);
}

TEST_CASE("launch cost: conv2d direct and cudnn, and what a GPU cannot run") {
  const Conv2dShape s = layer();
  const LaunchCost f = conv2d_forward_gpu_cost(ConvImpl::direct, s, 4, true);
  REQUIRE(f.kernel == "conv2d_forward direct");
  REQUIRE(f.launches == 1);  // one thread per output, the bias inside
  REQUIRE(!f.tensor);
  REQUIRE(conv2d_backward_filter_gpu_cost(ConvImpl::direct, s, 4, true, true).launches == 2);

  // cuDNN: one call, + cudnnAddTensor for the bias; estimated, tensor cores in fp16 only.
  const LaunchCost c = conv2d_forward_gpu_cost(ConvImpl::cudnn, s, 2, true);
  REQUIRE(c.launches == 2);
  REQUIRE(c.estimated);
  REQUIRE(c.tensor);
  REQUIRE(!conv2d_forward_gpu_cost(ConvImpl::cudnn, s, 4, false).tensor);
  REQUIRE(conv2d_backward_filter_gpu_cost(ConvImpl::cudnn, s, 2, true, true).launches == 2);

  REQUIRE_ERROR(conv2d_forward_gpu_cost(ConvImpl::tc, s, 4, false), "fp16");
  REQUIRE_ERROR(conv2d_forward_gpu_cost(ConvImpl::onednn, s, 4, false), "CPU implementation");
}

TEST_CASE("launch cost: linear") {
  // The classifier: 128 x 512 -> 10. dx: 128x64 tiles, 1 kd step; dw: M = 10 <= 32, 32x64
  // tiles, kd = 128 (4 steps): neither splits. db: bias_grad_gpu's 1.
  LaunchCost b = linear_backward_gpu_cost(LinearImpl::tc, 128, 512, 10, 2, true, true, true);
  REQUIRE(b.kernel == "linear_backward tc");
  REQUIRE(b.launches == 3);
  REQUIRE(b.flops == 2 * (2.0 * 128 * 512 * 10) + 128 * 10);
  REQUIRE(b.tensor);
  REQUIRE(linear_backward_gpu_cost(LinearImpl::tc, 128, 512, 10, 2, false, true, false).launches ==
          1);
  // A batch of 4096: dw's kd = 4096 (128 steps) over 8 tiles now splits.
  REQUIRE(linear_backward_gpu_cost(LinearImpl::tc, 4096, 512, 10, 2, false, true, false).launches ==
          2);
  const LaunchCost f = linear_forward_gpu_cost(LinearImpl::direct, 128, 512, 10, 4, true);
  REQUIRE(f.launches == 1);
  REQUIRE(f.bytes == 4 * (128.0 * 512 + 10 * 512 + 10 + 128 * 10));
  // cuBLAS: the bias is a GEMM of its own, db one more; estimated.
  REQUIRE(linear_forward_gpu_cost(LinearImpl::cublas, 128, 512, 10, 2, true).launches == 2);
  b = linear_backward_gpu_cost(LinearImpl::cublas, 128, 512, 10, 2, true, true, true);
  REQUIRE(b.launches == 3);
  REQUIRE(b.estimated);
  REQUIRE_ERROR(linear_forward_gpu_cost(LinearImpl::tc, 128, 512, 10, 4, false), "fp16");
}

TEST_CASE("launch cost: batchnorm, as batchnorm.cu queues it") {
  const int64_t M = 128 * 28 * 28;
  const int C = 32;
  // the sums of x (ending in the mean), the squared deviations (ending in the variance),
  // normalize; x read three times, y written.
  LaunchCost f = batchnorm_forward_train_gpu_cost(M, C, 2, false, false);
  REQUIRE(f.kernel == "batchnorm_forward_train");
  REQUIRE(f.launches == 3);
  REQUIRE(f.bytes == 4.0 * M * C * 2);
  // --sync-bn: a kernel finishing each of the two statistics after the collective.
  REQUIRE(batchnorm_forward_train_gpu_cost(M, C, 2, true, true).launches == 5);
  REQUIRE(batchnorm_forward_eval_gpu_cost(M, C, 2, true).launches == 2);
  // the sums (ending in dgamma, dbeta), dx; without dx the sums still run. The sync adds only
  // the callback's collective.
  REQUIRE(batchnorm_backward_train_gpu_cost(M, C, 2, false, true, false).launches == 2);
  REQUIRE(batchnorm_backward_train_gpu_cost(M, C, 2, false, false, false).launches == 1);
  REQUIRE(batchnorm_backward_train_gpu_cost(M, C, 2, true, true, true).launches == 2);
  // The fused ReLU reads y in both passes.
  REQUIRE(batchnorm_backward_train_gpu_cost(M, C, 2, true, true, false).bytes ==
          batchnorm_backward_train_gpu_cost(M, C, 2, false, true, false).bytes + 2.0 * M * C * 2);
  // invstd, then the sums (ending in dgamma, dbeta), then dx.
  REQUIRE(batchnorm_backward_eval_gpu_cost(M, C, 2, false, true).launches == 3);
  REQUIRE(batchnorm_backward_eval_gpu_cost(M, C, 2, false, false).launches == 2);
  REQUIRE(batchnorm_backward_eval_gpu_cost(M, C, 2, false, true, false).launches == 2);
  REQUIRE(batchnorm_running_update_gpu_cost(C).launches == 1);
}

TEST_CASE("launch cost: elementwise, the optimizer, the input") {
  const int64_t n = 1000003;
  LaunchCost r = relu_forward_gpu_cost(n, 2);
  REQUIRE(r.kernel == "relu_forward");
  REQUIRE(r.launches == 1);
  REQUIRE(r.bytes == 2.0 * n * 2);
  REQUIRE(relu_forward_gpu_cost(0, 2).launches == 0);  // launch_map returns at n <= 0
  REQUIRE(relu_backward_gpu_cost(n, 4).bytes == 4.0 * n * 4);
  REQUIRE(accumulate_gpu_cost(n, 4).bytes == 3.0 * n * 4);

  // SGD: grad read, fp32 master and velocity read and written, the fp16 copy written.
  REQUIRE(sgd_step_gpu_cost(n, 2, true).bytes == n * (2 + 16 + 2.0));
  REQUIRE(sgd_step_gpu_cost(n, 4, false).bytes == n * (4 + 16.0));
  REQUIRE(sgd_step_gpu_cost(0, 2, true).launches == 0);
  REQUIRE(grads_nonfinite_gpu_cost(n, 2).launches == 1);

  // 128 images, 32x32 crops, 3 channels: rows of 96, so 2 a block; 64 blocks across the
  // samples, 32 down the rows, each filling a 256 x 3 table.
  const LaunchCost in = input_normalize_gpu_cost(128, 40, 40, 3, 32, 2);
  REQUIRE(in.launches == 1);
  REQUIRE(in.bytes == 128.0 * 32 * 32 * 3 * (1 + 2));
  REQUIRE(in.flops == 3.0 * 256 * 3 * 64 * 32);
}

TEST_CASE("launch cost: the conv ladder's rungs") {
  // 2 x 8 x 8 x 8 -> 16 channels, 3x3, pad 1: P = Q = 8, N*P*Q = 128. x 1024 halves, w 1152,
  // b 16, y 2048. Every GEMM is short in kd (at most 5 steps of 32): no split-K, 1 launch.
  Conv2dShape s;
  s.N = 2, s.H = 8, s.W = 8, s.C = 8, s.K = 16, s.R = 3, s.S = 3, s.pad_h = 1, s.pad_w = 1;
  const double gemm = 2.0 * 128 * 16 * 72;  // 2*N*P*Q*K*R*S*C = 294912
  for (ConvRung r : kConvRungs) {
    CAPTURE(conv_rung_name(r));
    const bool tensor = r == ConvRung::tc || r == ConvRung::async;  // v4, v5
    // Forward: x, w, b read, y written; the bias adds one flop an output.
    LaunchCost f = conv2d_forward_rung_gpu_cost(r, s, true);
    REQUIRE(f.kernel == std::string("conv2d_forward ") + conv_rung_name(r));
    REQUIRE(f.launches == 1);
    REQUIRE(f.bytes == (1024 + 1152 + 16 + 2048) * 2.0);
    REQUIRE(f.flops == gemm + 2048);
    REQUIRE(f.tensor == tensor);
    // Data gradient: dy, w read, dx read and written; stride 1, so no gathered zeros.
    LaunchCost d = conv2d_backward_data_rung_gpu_cost(r, s);
    REQUIRE(d.launches == 1);
    REQUIRE(d.bytes == (2048 + 1152 + 2 * 1024) * 2.0);
    REQUIRE(d.flops == gemm);
    // Filter gradient: x, dy read, dw read and written; db by bias_grad_gpu (dy read, db read
    // and written, one add a dy element).
    LaunchCost w = conv2d_backward_filter_rung_gpu_cost(r, s, true, true);
    REQUIRE(w.launches == 2);
    REQUIRE(w.bytes == (1024 + 2048 + 2 * 1152) * 2.0 + (2048 + 2 * 16) * 2.0);
    REQUIRE(w.flops == gemm + 2048);
    REQUIRE(w.tensor == tensor);
  }
  // v2, v3 and v5 run v4's tile plan, split-K included: layer()'s weight gradient is split,
  // so 2 launches and the fp32 partials' bytes, as the tc path.
  const LaunchCost tc = conv2d_backward_filter_gpu_cost(ConvImpl::tc, layer(), 2, true, false);
  REQUIRE(tc.launches == 2);
  for (ConvRung r : {ConvRung::gemm, ConvRung::fma, ConvRung::tc, ConvRung::async}) {
    const LaunchCost c = conv2d_backward_filter_rung_gpu_cost(r, layer(), true, false);
    REQUIRE(c.launches == tc.launches);
    REQUIRE(c.bytes == tc.bytes);
    REQUIRE(c.flops == tc.flops);
  }
}

TEST_CASE("launch cost: the BatchNorm ladder's rungs") {
  // M = 64 pixels of C = 16 fp16 channels: n = 1024 elements, 2 vectors of 8 a row (v3 runs).
  const int64_t M = 64;
  const double n = 64 * 16;
  LaunchCost f = batchnorm_forward_train_rung_gpu_cost(BnRung::naive, M, 16, 2, false);
  REQUIRE(f.kernel == "batchnorm_forward_train v1 naive");
  REQUIRE(f.launches == 2);           // stats (a thread a channel), normalise
  REQUIRE(f.bytes == 4 * n * 2);      // x read by the mean, the variance and normalise; y written
  REQUIRE(f.flops == 8 * n);
  f = batchnorm_forward_train_rung_gpu_cost(BnRung::blocked, M, 16, 2, false);
  REQUIRE(f.kernel == "batchnorm_forward_train v2 blocked");
  REQUIRE(f.launches == 3);
  REQUIRE(f.bytes == 4 * n * 2);
  f = batchnorm_forward_train_rung_gpu_cost(BnRung::vector, M, 16, 2, true);
  REQUIRE(f.kernel == "batchnorm_forward_train v3 vector");
  REQUIRE(f.launches == 2);           // one statistics pass, normalise
  REQUIRE(f.bytes == 3 * n * 2);      // x read twice, y written
  REQUIRE(f.flops == 12 * n);         // ~11, + 1 for the ReLU
  // Where v3 cannot run, the cost is v2's: C not a multiple of 8 halves; a row of more than
  // kBnVectorBlock vectors (2056 / 8 = 257); fp32's vector is 4, so C = 12 runs v3.
  REQUIRE(batchnorm_forward_train_rung_gpu_cost(BnRung::vector, M, 12, 2, false).launches == 3);
  REQUIRE(batchnorm_forward_train_rung_gpu_cost(BnRung::vector, M, 2048, 2, false).launches == 2);
  REQUIRE(batchnorm_forward_train_rung_gpu_cost(BnRung::vector, M, 2056, 2, false).kernel ==
          "batchnorm_forward_train v2 blocked");
  REQUIRE(batchnorm_forward_train_rung_gpu_cost(BnRung::vector, M, 12, 4, false).launches == 2);
  // Backward, on every rung: the sums read x and dy (and y when fused), dx's pass reads them
  // again and dx, and writes dx.
  for (BnRung r : kBnRungs) {
    CAPTURE(bn_rung_name(r));
    LaunchCost b = batchnorm_backward_train_rung_gpu_cost(r, M, 16, 2, false, true);
    REQUIRE(b.launches == 2);
    REQUIRE(b.bytes == (2 + 4) * n * 2);
    REQUIRE(b.flops == (6 + 8) * n);
    b = batchnorm_backward_train_rung_gpu_cost(r, M, 16, 2, true, false);
    REQUIRE(b.launches == 1);
    REQUIRE(b.bytes == 3 * n * 2);
  }
}

TEST_CASE("launch cost: rooflines and the ideal time of a cost") {
  REQUIRE(std::string(known_gpus().front().name) == "h100");
  REQUIRE(roofline_of("h100").bandwidth == 3.35e12);
  REQUIRE(roofline_of("a100").tensor_fp16 == 312e12);
  REQUIRE_USER_ERROR(roofline_of("h900"), "h900");

  const Roofline& h100 = roofline_of("h100");
  // Memory bound: 3.35e12 bytes take 1 s, the flops far less.
  LaunchCost c{"x", 1, 3.35e12, 1e9, false, false};
  REQUIRE(ideal_seconds(c, h100) == doctest::Approx(1.0));
  // Compute bound: twice the tensor peak in flops, 2 s; on CUDA cores the fp32 peak rules.
  c = {"x", 1, 1e9, 2 * 989.4e12, true, false};
  REQUIRE(ideal_seconds(c, h100) == doctest::Approx(2.0));
  c.tensor = false;
  REQUIRE(ideal_seconds(c, h100) == doctest::Approx(2 * 989.4e12 / 66.9e12));

  // A plan adds up the costs noted while recording, by phase.
  LaunchPlan plan;
  note_launch(&plan, relu_forward_gpu_cost(10, 2));  // not recording: dropped
  plan.record(true);
  plan.phase("forward");
  note_launch(&plan, batchnorm_forward_train_gpu_cost(100, 8, 2, false, false));
  plan.phase("backward");
  note_launch(&plan, conv2d_backward_filter_gpu_cost(ConvImpl::tc, layer(), 2, true, true));
  note_launch(nullptr, relu_forward_gpu_cost(10, 2));  // no plan: nothing
  REQUIRE(plan.launches() == 3 + 3);
  REQUIRE(plan.launches("forward") == 3);
  REQUIRE(plan.launches("backward") == 3);
}
