// The GPU side of the trainer's input and of evaluation: input_tensor_gpu gives input_tensor's
// bits, labels_tensor_gpu owns a copy of the labels, and evaluate() of a model on cuda gives
// the metrics of the same model on the CPU, in f32 and f16.
#include <cmath>
#include <cstdlib>
#include <vector>

#include "kernels/rng.h"
#include "nn/gpu_context.h"
#include "nn/model.h"
#include "tests/kernels/gpu_compare.h"
#include "tests/test_util.h"
#include "tests/train/fashion_mnist_data.h"
#include "tests/train/train_fixture.h"
#include "train/engine/batch_input.h"
#include "train/run/dataset.h"
#include "train/run/evaluate.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

// A tensor's elements as T on the host (copied back from the device if needed).
template <typename T> std::vector<T> host_values(const Tensor& t) {
  const Tensor h = t.to(Device::cpu);
  const T* p = h.data<T>();
  return std::vector<T>(p, p + h.numel());
}

// Poisons the block the next cuda tensor like `like` will most likely get: the caching
// allocator hands a freed block of the same size back to the next request on the same stream.
// So an element input_tensor_gpu failed to write reads 0xff bytes (NaN in f32 and f16).
void poison_next_block(const Tensor& like) {
  const Tensor t = Tensor::empty(like.shape(), like.dtype(), Device::cuda);
  memset_async(t.raw(), 0xff, t.bytes(), gpu_context().stream);
}

}  // namespace

TEST_CASE_TEMPLATE("batch_input [gpu]: input_tensor_gpu equals input_tensor bit for bit", T, float,
                   half_t) {
  REQUIRE_GPU();
  Stream stream;
  GpuContextScope on(GpuContext{stream.get(), ConvImpl::tc, LinearImpl::tc});
  const DType dtype = dtype_of<T>();
  struct Case {
    int n, S, C;
    Normalization norm;
  };
  const std::vector<Case> cases = {
      {7, 28, 1, {{0.286}, {0.353}}},                                  // Fashion-MNIST
      {5, 33, 3, {{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}}},      // ImageNet's statistics
      {1, 9, 3, {{0.5, 0.0, 1.0}, {0.25, 1.0, 0.125}}},
      {67, 17, 1, {{0.1}, {2.5}}},
  };
  for (size_t k = 0; k < cases.size(); k++) {
    const Case& c = cases[k];
    INFO("n " << c.n << ", " << c.S << "x" << c.S << "x" << c.C << ", " << dtype_name(dtype));
    std::vector<uint8_t> px(size_t(c.n) * size_t(c.S) * size_t(c.S) * size_t(c.C));
    for (size_t i = 0; i < px.size(); i++) px[i] = uint8_t(rng_u64(40 + k, i));
    const DeviceBuffer d_px = upload(px);
    const DeviceNormalization norm(c.norm);
    REQUIRE(norm.channels() == c.C);
    const Tensor want = input_tensor(px.data(), c.n, c.S, c.C, c.norm, dtype);
    poison_next_block(want);
    const Tensor got = input_tensor_gpu(static_cast<const uint8_t*>(d_px.data()), c.n, c.S, c.C,
                                        norm, dtype);
    REQUIRE(got.device() == Device::cuda);
    REQUIRE(got.dtype() == dtype);
    REQUIRE(got.shape() == want.shape());
    require_same_bits(host_values<T>(got), host_values<T>(want), "x");
  }
  // The channel count must match the statistics, and the dtype be one the kernel writes.
  const DeviceNormalization norm1(Normalization{{0.5}, {0.5}});
  DeviceBuffer d(64);
  REQUIRE_ERROR(input_tensor_gpu(static_cast<const uint8_t*>(d.data()), 1, 2, 3, norm1, dtype),
                "3 channels but 1 means");
  REQUIRE_ERROR(input_tensor_gpu(static_cast<const uint8_t*>(d.data()), 1, 2, 1, norm1,
                                 DType::f64),
                "must be f32 or f16 on a GPU");
  REQUIRE_ERROR(DeviceNormalization(Normalization{{0.5}, {0.0}}), "must be a finite number > 0");
}

TEST_CASE("batch_input [gpu]: labels_tensor_gpu is an i32 copy that outlives its source") {
  REQUIRE_GPU();
  Stream stream;
  GpuContextScope on(GpuContext{stream.get(), ConvImpl::tc, LinearImpl::tc});
  std::vector<int32_t> y(301);
  for (size_t i = 0; i < y.size(); i++) y[i] = int32_t(rng_u64(9, i) % 1000);
  DeviceBuffer d_y = upload(y);
  const Tensor labels = labels_tensor_gpu(static_cast<const int32_t*>(d_y.data()), int(y.size()));
  // The loader refills its slot once the stream has passed the copy: the tensor must not care.
  memset_async(d_y.data(), 0xff, d_y.bytes(), stream.get());
  REQUIRE(labels.device() == Device::cuda);
  REQUIRE(labels.dtype() == DType::i32);
  REQUIRE(labels.shape() == Shape{301});
  REQUIRE(host_values<int32_t>(labels) == y);
  REQUIRE(labels_tensor_gpu(static_cast<const int32_t*>(d_y.data()), 0).numel() == 0);
}

// The same model (same description, same seed: the same initial bits, since models are built
// on the CPU and then moved) evaluated on cuda and on the CPU over 301 real images in batches
// of 64 (a short last one).
//
// Why tolerances and not equality: the GPU's conv and linear kernels sum their products in
// another order than the CPU reference (tiles, tensor cores, cuDNN's algorithms), so the logits
// differ in their last bits (f32) or by about 2^-11 relative per layer (f16, where tensor-core
// kernels also round differently from the CPU's emulated half). A class whose logit ties
// another's to that precision can swap ranks, so top-1 may differ by an image or two; the
// counts of images per class come from the labels alone and must be equal.
TEST_CASE_TEMPLATE("evaluate [gpu]: a model on cuda gives the CPU's metrics", T, float, half_t) {
  REQUIRE_GPU();
  const DType dtype = dtype_of<T>();
  const bool half = dtype == DType::f16;
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  const auto data = open_source(fm.test, ImageSpec{}, 301);  // 28x28x1
  EvalOptions opt;
  opt.batch = 64, opt.threads = 2, opt.norm = {{0.286}, {0.353}};

  ModelOptions mo;
  mo.seed = 5, mo.dtype = dtype;
  const ModelSpec spec = parse_model_spec(kSmallModel, "small");
  auto cpu_model = build_model(spec, mo);
  const EvalResult want = evaluate(*cpu_model, data, opt);

  mo.device = Device::cuda;
  auto gpu_model = build_model(spec, mo);
  // Twice: on the default context (the legacy default stream: evaluate makes a stream of its
  // own) and on a stream of the caller's with the direct kernels.
  for (int pass = 0; pass < 2; pass++) {
    INFO(dtype_name(dtype) << (pass == 0 ? ", default context" : ", own stream, direct"));
    Stream stream;
    const GpuContext context = pass == 0 ? gpu_context()
                                         : GpuContext{stream.get(), ConvImpl::direct,
                                                      LinearImpl::direct};
    GpuContextScope on(context);
    const EvalResult got = evaluate(*gpu_model, data, opt);

    REQUIRE(got.images == 301);
    REQUIRE(got.images == want.images);
    REQUIRE(got.bad_files == 0);
    REQUIRE(got.class_images == want.class_images);
    // f32: only the summation order differs, a flip is rare; f16: 2% of the images.
    const int64_t flips = half ? 6 : 2;
    REQUIRE(std::llabs(got.top1 - want.top1) <= flips);
    REQUIRE(std::llabs(got.top5 - want.top5) <= flips);
    int64_t class_diff = 0;
    for (size_t k = 0; k < got.class_top1.size(); k++)
      class_diff += std::llabs(got.class_top1[k] - want.class_top1[k]);
    REQUIRE(class_diff <= 2 * flips);  // each flip moves at most one count in two classes
    // The loss is a mean over 301 images: the differences average out. f32: 1e-4 relative;
    // f16: activations rounded to 11 bits at each of ~10 layers, 2e-2 relative.
    REQUIRE(std::fabs(got.loss - want.loss) <= (half ? 2e-2 : 1e-4) * std::fabs(want.loss));
    REQUIRE(std::isfinite(got.loss));
  }
}

TEST_CASE("evaluate [gpu]: the batch size does not change the metrics (one short batch, or "
          "many)") {
  REQUIRE_GPU();
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  const auto data = open_source(fm.test, ImageSpec{}, 37);
  EvalOptions opt;
  opt.batch = 100, opt.threads = 2, opt.norm = {{0.286}, {0.353}};
  ModelOptions mo;  // f32: the default context runs the direct kernels
  mo.seed = 11, mo.device = Device::cuda;
  auto model = build_model(parse_model_spec(kTinyModel, "tiny"), mo);
  const EvalResult one = evaluate(*model, data, opt);  // one short batch
  opt.batch = 5;
  const EvalResult many = evaluate(*model, data, opt);  // 8 batches: both result slots reused
  REQUIRE(one.images == 37);
  REQUIRE(many.images == 37);
  REQUIRE(one.class_images == many.class_images);
  // The direct kernels compute each output alone, in an order that does not depend on the
  // batch: the logits, hence the ranks, are the same bits.
  REQUIRE(one.top1 == many.top1);
  REQUIRE(one.top5 == many.top5);
  REQUIRE(one.class_top1 == many.class_top1);
  // The loss is a mean per batch on the device, summed on the host: another order of sums.
  REQUIRE(std::fabs(one.loss - many.loss) <= 1e-5 * std::fabs(one.loss));
}
