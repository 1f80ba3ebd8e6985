// evaluate() on the GPU: a model on cuda gives the metrics of the same model on the CPU, in
// f32 and f16, whatever the batch size. (Its input, model_input on the device:
// tests/train/engine/batch_input_gpu_test.cpp.)
#include <cmath>
#include <cstdlib>
#include <vector>

#include "nn/context.h"
#include "nn/model.h"
#include "tests/test_util.h"
#include "tests/train/fashion_mnist_data.h"
#include "tests/train/train_fixture.h"
#include "train/engine/batch_input.h"
#include "train/engine/evaluate.h"
#include "train/setup/sources.h"

using namespace cutrain;
using namespace cutrain_test;

// The same model (same description, same seed: the same initial bits, since models are built
// on the CPU and then moved) evaluated on cuda and on the CPU over 301 real images in batches
// of 64 (a short last one; 101 on the simulator, where the GPU's kernels are the host's).
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
  const int64_t n = sim_or<int64_t>(301, 101);
  const auto data = open_source(fm.test, ImageSpec{}, n);  // 28x28x1
  for (bool tta : {false, true}) {  // and with test-time flips (the input kernel's mirror)
  INFO((tta ? "--tta flip" : "no flips"));
  EvalOptions opt;
  opt.batch = 64, opt.threads = 2, opt.norm = {{0.286}, {0.353}};
  opt.tta_flip = tta;

  ModelOptions mo;
  mo.seed = 5, mo.dtype = dtype;
  const ModelSpec spec = parse_model_spec(kSmallModel, "small");
  auto cpu_model = build_model(spec, mo);
  const EvalResult want = evaluate(*cpu_model, data, opt);

  // Twice: made in the default context (the legacy default stream: evaluate makes a stream of
  // its own) and on a stream of the caller's with the direct kernels (evaluation runs where the
  // model was made).
  for (int pass = 0; pass < 2; pass++) {
    INFO(dtype_name(dtype) << (pass == 0 ? ", default context" : ", own stream, direct"));
    Stream stream;
    mo.context = pass == 0 ? test_gpu()
                           : Context::cuda(stream.get(), ConvImpl::direct, LinearImpl::direct);
    auto gpu_model = build_model(spec, mo);
    const EvalResult got = evaluate(*gpu_model, data, opt);

    REQUIRE(got.images == n);
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
    // The loss is a mean over 301 (101) images: the differences average out. f32: 1e-4 relative;
    // f16: activations rounded to 11 bits at each of ~10 layers, 2e-2 relative.
    REQUIRE(std::fabs(got.loss - want.loss) <= (half ? 2e-2 : 1e-4) * std::fabs(want.loss));
    REQUIRE(std::isfinite(got.loss));
  }
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
  mo.seed = 11, mo.context = test_gpu();
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
