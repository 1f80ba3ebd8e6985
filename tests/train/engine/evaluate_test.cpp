// evaluate(): the ranking rules by hand, and the metrics over real Fashion-MNIST images equal
// what one forward over all of them in a single batch gives, whatever the batch size; the
// confusion matrix agrees with the per-class counts.
#include <cmath>

#include "data/image_list.h"
#include "kernels/input.h"
#include "nn/model.h"
#include "tests/test_util.h"
#include "tests/train/fashion_mnist_data.h"
#include "train/engine/batch_input.h"
#include "train/engine/evaluate.h"
#include "train/setup/sources.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

// A small model (one conv, BN, ReLU, pool, linear) for evaluate's tests.
std::unique_ptr<Model> tiny_model(uint64_t seed) {
  ModelOptions mo;
  mo.seed = seed;
  return build_model(parse_model_spec("conv 4 3x3 pad=1\nbn\nrelu\nmaxpool 4x4\nflatten\n"
                                      "linear classes\n", "tiny"),
                     mo);
}

// The first n images of data (28x28x1) as one uint8 array, and their labels.
void load_all(const SampleSource& data, int n, std::vector<uint8_t>& px, std::vector<int32_t>& y) {
  px.assign(size_t(n) * 784, 0);
  y.assign(size_t(n), 0);
  StageTimes t;
  for (int i = 0; i < n; i++) {
    REQUIRE(data.load_cut(i, 0, &px[size_t(i) * 784], t).ok());
    y[size_t(i)] = data.label(i);
  }
}

}  // namespace

TEST_CASE("label_rank and top_k: larger logits first, ties to the lower class") {
  const float z[5] = {0.5f, 2.0f, 0.5f, -1.0f, 2.0f};
  REQUIRE(label_rank(z, 5, 1) == 0);
  REQUIRE(label_rank(z, 5, 4) == 1);  // tied with class 1, which comes first
  REQUIRE(label_rank(z, 5, 0) == 2);
  REQUIRE(label_rank(z, 5, 2) == 3);
  REQUIRE(label_rank(z, 5, 3) == 4);
  REQUIRE(top_k(z, 5, 3) == std::vector<int>{1, 4, 0});
  REQUIRE(top_k(z, 5, 9) == std::vector<int>{1, 4, 0, 2, 3});
  const std::vector<double> p = softmax_row(z, 5);
  double s = 0;
  for (double v : p) s += v;
  REQUIRE(std::abs(s - 1) < 1e-12);
  REQUIRE(std::abs(p[1] / p[3] - std::exp(3.0)) < 1e-9);
}

TEST_CASE("evaluate: batches of 7 (a short last one) give the metrics of one forward over all") {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  ImageSpec spec;  // 28x28x1, centred
  auto data = open_source(fm.test, spec, 61);
  auto model = tiny_model(5);
  EvalOptions opt;
  opt.batch = 7, opt.threads = 2, opt.norm = {{0.3}, {0.35}};
  const EvalResult r = evaluate(*model, data, opt);
  REQUIRE(r.images == 61);

  // The same by hand: every image in one batch, in list order, normalised by the kernel.
  std::vector<uint8_t> px;
  std::vector<int32_t> y;
  load_all(*data, 61, px, y);
  Tensor x = Tensor::empty({61, 28, 28, 1}, DType::f32);
  input_normalize_cpu<float>(61, 28, 1, px.data(), {float(opt.norm.mean[0])},
                             {float(opt.norm.std[0])}, x.data<float>());
  Tape tape(Context::cpu(), false);
  VarPtr logits = model->forward(tape, make_var(x), false);
  const Tensor labels = Tensor::from_ints(y, {61});
  const double loss = softmax_cross_entropy(tape, logits, labels, 0.0)->value.item();
  REQUIRE(r.top1 == top1_correct(logits->value, labels));
  REQUIRE(std::abs(r.loss - loss) < 1e-5);
  const std::vector<float> z = logits->value.to_floats();
  int64_t top5 = 0, per_class0 = 0, class0 = 0;
  for (int i = 0; i < 61; i++) {
    const int rank = label_rank(&z[size_t(i) * 10], 10, y[size_t(i)]);
    top5 += rank < 5;
    class0 += y[size_t(i)] == 0;
    per_class0 += y[size_t(i)] == 0 && rank == 0;
  }
  REQUIRE(r.top5 == top5);
  REQUIRE(r.top5 >= r.top1);
  REQUIRE(r.class_images[0] == class0);
  REQUIRE(r.class_top1[0] == per_class0);
  int64_t sum = 0;
  for (int64_t n : r.class_images) sum += n;
  REQUIRE(sum == 61);
  // The confusion matrix: each row sums to its class's images, the diagonal is per-class top-1.
  REQUIRE(r.confusion.size() == 100);
  for (size_t y = 0; y < 10; y++) {
    int64_t row = 0;
    for (size_t p = 0; p < 10; p++) row += r.confusion[y * 10 + p];
    REQUIRE(row == r.class_images[y]);
    REQUIRE(r.confusion[y * 10 + y] == r.class_top1[y]);
  }
  const std::string report = per_class_report(r, fashion_mnist_classes());
  REQUIRE(report.find("Ankle boot") != std::string::npos);
  REQUIRE(eval_summary(r).find("(61 images") != std::string::npos);
}

TEST_CASE("evaluate with test-time flips: each image's logits averaged with its mirror's") {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  ImageSpec spec;
  auto data = open_source(fm.test, spec, 45);
  auto model = tiny_model(9);
  EvalOptions opt;
  opt.batch = 8, opt.threads = 2, opt.norm = {{0.3}, {0.35}};
  const EvalResult plain = evaluate(*model, data, opt);
  opt.tta_flip = true;
  const EvalResult r = evaluate(*model, data, opt);
  REQUIRE(r.images == 45);

  // By hand: the images and their mirrors (each row reversed here), one forward each, the
  // logits averaged, then ranked and scored.
  std::vector<uint8_t> px, mirrored(45 * 784);
  std::vector<int32_t> y;
  load_all(*data, 45, px, y);
  for (int i = 0; i < 45; i++) {
    for (int row = 0; row < 28; row++)
      for (int col = 0; col < 28; col++)
        mirrored[size_t(i) * 784 + size_t(row) * 28 + size_t(col)] =
            px[size_t(i) * 784 + size_t(row) * 28 + size_t(27 - col)];
  }
  auto logits_of = [&](const std::vector<uint8_t>& images) {
    Tensor x = Tensor::empty({45, 28, 28, 1}, DType::f32);
    input_normalize_cpu<float>(45, 28, 1, images.data(), {0.3f}, {0.35f}, x.data<float>());
    Tape tape(Context::cpu(), false);
    return model->forward(tape, make_var(x), false)->value.to_floats();
  };
  const std::vector<float> a = logits_of(px), b = logits_of(mirrored);
  REQUIRE(a != b);  // the mirror images do give other logits
  std::vector<float> avg(a.size());
  for (size_t i = 0; i < a.size(); i++) avg[i] = (a[i] + b[i]) * 0.5f;
  Tape tape(Context::cpu(), false);
  const Tensor labels = Tensor::from_ints(y, {45});
  const Tensor z = Tensor::from_floats(avg, {45, 10});
  REQUIRE(r.top1 == top1_correct(z, labels));
  REQUIRE(std::abs(r.loss - softmax_cross_entropy(tape, make_var(z), labels, 0.0)->value.item()) <
          1e-5);
  REQUIRE(r.loss != plain.loss);
}

TEST_CASE("EvalAccumulator: ranks each row, counts per class, weighs the loss by images") {
  // K = 3: top-5 means all three classes.
  EvalAccumulator acc(3);
  const float z1[6] = {2.0f, 1.0f, 0.0f,   // label 0: rank 0
                       0.5f, 0.5f, 0.1f};  // label 1: tied with class 0, which comes first
  const int32_t y1[2] = {0, 1};
  acc.add(z1, y1, 2, 0.5);
  const float z2[3] = {0.0f, 1.0f, 3.0f};  // label 0: rank 2, still in the "top 5" of 3
  const int32_t y2[1] = {0};
  acc.add(z2, y2, 1, 2.0);
  acc.add(nullptr, nullptr, 0, 7.0);  // an empty batch (every file bad) counts for nothing
  const EvalResult r = acc.result();
  REQUIRE(r.images == 3);
  REQUIRE(r.top1 == 1);
  REQUIRE(r.top5 == 3);
  REQUIRE(r.class_images == std::vector<int64_t>{2, 1, 0});
  REQUIRE(r.class_top1 == std::vector<int64_t>{1, 0, 0});
  // Rows are the labels, columns the top-1 class (a tie goes to the lower class).
  REQUIRE(r.confusion == std::vector<int64_t>{1, 0, 1,    // label 0: predicted 0, then 2
                                              1, 0, 0,    // label 1: tied 0.5 -> class 0
                                              0, 0, 0});
  REQUIRE(std::abs(r.loss - (0.5 * 2 + 2.0 * 1) / 3) < 1e-12);  // per image, not per batch
  REQUIRE(EvalAccumulator(4).result().loss == 0);
  REQUIRE(EvalAccumulator(4).result().class_images.size() == 4);

  const int32_t bad[1] = {3};
  REQUIRE_ERROR(acc.add(z2, bad, 1, 0.0), "label 3 is outside the 3 classes");
  REQUIRE_ERROR(EvalAccumulator(0), "0 classes");
}

TEST_CASE("evaluate: without a usable GPU a model on cuda cannot be built, saying why") {
  if (gpu_usable()) {
    skip("a GPU is usable here: tests/train/engine/evaluate_gpu_test.cpp evaluates on it");
    return;
  }
  // A model on cuda cannot even be built, so evaluate() never gets that far.
  ModelOptions mo;
  mo.context = test_gpu();
  REQUIRE_ERROR(build_model(parse_model_spec("flatten\nlinear classes\n", "linear"), mo),
                "cuda");
}
