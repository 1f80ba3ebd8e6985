// The nn ops on cuda tensors: a small network of every op (conv2d, batchnorm2d, relu,
// maxpool2d, add, global_avgpool, flatten, linear, softmax_cross_entropy) run forward and
// backward on the GPU with each conv/linear implementation, against the same network on the
// CPU in f32. The kernels are tested one by one in tests/kernels/*_gpu_test.cpp; this checks
// the wiring: the right kernel, the right stream, gradients that accumulate, dtypes kept.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/vendor.h"
#include "nn/context.h"
#include "nn/ops.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::test_gpu;

namespace {

struct Net {
  std::vector<VarPtr> leaves;  // x, conv1.w, conv1.b, bn.gamma, bn.beta, conv2.w, fc.w, fc.b
  BatchNormState bn;
};

// Every leaf of the network as a CPU f32 tensor of fixed random values.
Net make_net(int N) {
  Net n;
  const std::vector<Shape> shapes = {{N, 9, 7, 3}, {8, 3, 3, 3}, {8}, {8}, {8}, {8, 3, 3, 8},
                                     {5, 8},       {5}};
  for (size_t i = 0; i < shapes.size(); i++)
    n.leaves.push_back(make_var(cutrain_test::uniform(shapes[i], DType::f32, 100 + i), true));
  n.leaves[3] = make_var(Tensor::from_floats(std::vector<float>(8, 1.0f), {8}), true);
  n.bn.running_mean = Tensor::zeros({8}, DType::f32);
  n.bn.running_var = Tensor::from_floats(std::vector<float>(8, 1.0f), {8});
  return n;
}

// The same network with its leaves copied into context `in` and the activations (and conv/linear
// parameters) converted to `dtype`; BN parameters stay f32 (the mixed-precision rule).
Net place(const Net& cpu, const Context& in, DType dtype) {
  Net n;
  for (size_t i = 0; i < cpu.leaves.size(); i++) {
    const bool bn_param = i == 3 || i == 4;
    Tensor t = cpu.leaves[i]->value.to(bn_param ? DType::f32 : dtype).to(in);
    n.leaves.push_back(make_var(t, true));
  }
  // clone(): to() onto the tensor's own device may share its storage, and the forward updates
  // the running statistics in place (the CPU reference would move cpu's, which every later
  // case starts from)
  n.bn.running_mean = cpu.bn.running_mean.to(in).clone();
  n.bn.running_var = cpu.bn.running_var.to(in).clone();
  return n;
}

// x -> conv(3x3, pad 1) -> bn -> relu -> maxpool(2, stride 2) -> conv(3x3, pad 1) -> add
// (a residual onto the pooled input) -> relu -> global avgpool -> flatten -> linear -> loss,
// every op in context ctx (its stream and its conv/linear implementations). fuse: bn and
// relu as one op (batchnorm2d's relu), as a model runs them.
double run(Net& n, const Tensor& labels, const Context& ctx, bool fuse = false) {
  Tape tape(ctx);
  const auto& L = n.leaves;
  VarPtr h = conv2d(tape, L[0], L[1], L[2], 1, 1, 1, 1);
  h = fuse ? batchnorm2d(tape, h, L[3], L[4], n.bn, true, true)
           : relu(tape, batchnorm2d(tape, h, L[3], L[4], n.bn, true));
  VarPtr p = maxpool2d(tape, h, 2, 2, 2, 2, 0, 0);
  h = relu(tape, add(tape, conv2d(tape, p, L[5], nullptr, 1, 1, 1, 1), p));
  h = linear(tape, flatten(tape, global_avgpool(tape, h)), L[6], L[7]);
  VarPtr loss = softmax_cross_entropy(tape, h, labels, 0.1);
  const double value = loss->value.item();
  tape.backward(loss, 8.0);  // a loss scale, to check it reaches the backward on the device
  return value;
}

}  // namespace

TEST_CASE("nn ops [gpu]: a network of every op on cuda matches the CPU, for every implementation") {
  REQUIRE_GPU();
  const int N = 5;
  const Net cpu0 = make_net(N);
  std::vector<int32_t> lab;
  for (int i = 0; i < N; i++) lab.push_back(i * 3 % 5);
  const Tensor labels = Tensor::from_ints(lab, {N});

  Net ref = place(cpu0, Context::cpu(), DType::f32);
  const double want_loss = run(ref, labels, Context::cpu());

  struct Case {
    DType dtype;
    ConvImpl conv;
    LinearImpl linear;
    double tol;  // relative to the largest gradient of each leaf
    bool fuse = false;  // BN and its ReLU as one op, against the CPU's two
  };
  // f32: only the summation order differs from the CPU (1e-5). f16: inputs and weights are
  // rounded to fp16 (2^-11 relative) and every activation again after each op; through ~8
  // layers of a random network 2e-2 of the largest gradient holds with margin.
  const std::vector<Case> cases = {
      {DType::f32, ConvImpl::direct, LinearImpl::direct, 1e-5},
      {DType::f32, ConvImpl::cudnn, LinearImpl::cublas, 1e-4},
      {DType::f16, ConvImpl::direct, LinearImpl::direct, 2e-2},
      {DType::f16, ConvImpl::tc, LinearImpl::tc, 2e-2},
      {DType::f16, ConvImpl::cudnn, LinearImpl::cublas, 2e-2},
      {DType::f32, ConvImpl::direct, LinearImpl::direct, 1e-5, true},
      {DType::f16, ConvImpl::tc, LinearImpl::tc, 2e-2, true},
  };
  for (const Case& c : cases) {
    if (c.conv == ConvImpl::cudnn && !cudnn_built()) continue;
    INFO(std::string(dtype_name(c.dtype)) << " conv " << std::string(impl_name(c.conv))
                                          << " linear " << std::string(impl_name(c.linear))
                                          << (c.fuse ? ", bn+relu fused" : ""));
    Stream stream;
    const Context ctx = Context::cuda(stream.get(), c.conv, c.linear);
    Net gpu = place(cpu0, ctx, c.dtype);
    const double got_loss = run(gpu, labels.to(ctx), ctx, c.fuse);
    REQUIRE(std::fabs(got_loss - want_loss) <= c.tol * 10 * std::fabs(want_loss));
    for (size_t i = 0; i < ref.leaves.size(); i++) {
      INFO("leaf " << i);
      const VarPtr& g = gpu.leaves[i];
      REQUIRE(g->grad.device() == Device::cuda);
      REQUIRE(g->grad.dtype() == g->value.dtype());
      const std::vector<double> got = g->grad.to_doubles(), want = ref.leaves[i]->grad.to_doubles();
      // Relative to the leaf's largest gradient, except conv1's bias (leaf 2): a BatchNorm
      // follows it, so its gradient is zero in exact arithmetic and both sides hold rounding
      // noise of the sum over the conv's output gradients; that is measured on the scale of
      // conv1's weight gradient (leaf 1), which sums the same terms.
      double scale = 0;
      for (double w : (i == 2 ? ref.leaves[1] : ref.leaves[i])->grad.to_doubles())
        scale = std::max(scale, std::fabs(w));
      cutrain_test::require_near(got, want, c.tol * scale);
    }
    cutrain_test::require_near(gpu.bn.running_var.to_doubles(), ref.bn.running_var.to_doubles(),
                               c.tol * 10);
  }
}

TEST_CASE("nn ops [gpu]: a tensor not on the tape's device is refused, naming it") {
  REQUIRE_GPU();
  VarPtr x = make_var(Tensor::zeros({2, 4}, DType::f32, test_gpu()));
  VarPtr w = make_var(Tensor::zeros({3, 4}, DType::f32), true);
  Tape on_cpu;
  REQUIRE_ERROR(linear(on_cpu, x, w, nullptr),
                "linear: f32 cuda (2,4) is not on the device the op runs on (cpu)");
  Tape on_gpu(test_gpu());
  REQUIRE_ERROR(linear(on_gpu, x, w, nullptr),
                "linear: f32 cpu (3,4) is not on the device the op runs on (cuda)");
}
