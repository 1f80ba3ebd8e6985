// model_input, the one conversion of a loader batch into the model's input: the formula and
// the window by hand; on real JPEG files and real Fashion-MNIST, through the loader, the same
// bits as the path before it (the loader cut each window out on the host with zeros beyond the
// image, then the input was normalised without a crop), in f32, f16 and f64, for random crops
// with and without padding, --resize, and centred crops; the errors; and, without a GPU, the
// refusals that say why. tests/train/engine/batch_input_gpu_test.cpp compares the GPU with the CPU.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "data/loader.h"
#include "kernels/input.h"
#include "tests/data/pack_fixture.h"
#include "tests/test_util.h"
#include "tests/train/engine/batch_input_fixture.h"
#include "tests/train/fashion_mnist_data.h"
#include "train/engine/batch_input.h"
#include "train/setup/sources.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

// An i32 tensor's values.
std::vector<int32_t> ints(const Tensor& t) {
  const int32_t* p = t.data<int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

// A hand-made batch of n uncut P x P x C images (P = S when crops is null).
Batch batch_of(const std::vector<uint8_t>& images, const std::vector<int32_t>& labels, int P,
               int S, int C, const std::vector<InputCrop>* crops = nullptr) {
  Batch b;
  b.n = int(labels.size());
  b.side = P, b.size = S, b.channels = C;
  b.images = images.data();
  b.labels = labels.data();
  b.crops = crops ? crops->data() : nullptr;
  return b;
}

// The sample the loader delivered before the crop moved into the input kernel: decode at the
// resize target, resize, plan_crop's window cut out with zeros beyond the image and mirrored
// when flipped. Written here with plain loops from data/image.h's description, not with the
// code under test (load_sample now cuts an uncut sample too).
std::vector<uint8_t> old_sample(const std::string& path, const ImageSpec& spec, uint64_t key) {
  const int target = spec.resize ? spec.resize : spec.size;
  Image img;
  const DecodeResult r = load_image_file(path, spec.channels, target, spec.max_pixels, img);
  INFO(path << ": " << r.message);
  REQUIRE(r.ok());
  resize_shorter_side(img, target, img);
  const CropPlan p = plan_crop(img.h, img.w, spec, key);
  const int S = spec.size, C = img.c;
  std::vector<uint8_t> out(size_t(S) * S * C);
  for (int y = 0; y < S; y++)
    for (int x = 0; x < S; x++) {
      const int sy = p.y0 + y, sx = p.x0 + (p.flip ? S - 1 - x : x);
      const bool inside = sy >= 0 && sy < img.h && sx >= 0 && sx < img.w;
      for (int c = 0; c < C; c++)
        out[(size_t(y) * S + x) * C + c] =
            inside ? img.pixels[(size_t(sy) * img.w + sx) * C + c] : uint8_t(0);
    }
  return out;
}

// Two epochs of `src` through a CPU loader; every batch converted by model_input in two
// ranges (a short one first: the offsets) and compared bit for bit with the old path: each
// sample cut on the host, then input_normalize_cpu (no crop). Returns the images compared.
template <typename T>
int64_t require_old_bits(const std::shared_ptr<const SampleSource>& src, const Normalization& n) {
  const ImageSpec& spec = src->spec();
  const int S = spec.size, C = spec.channels;
  const InputNorm norm(n);
  return for_each_batch(src, Context::cpu(), [&](const Batch& batch) {
    REQUIRE(batch.side == uncut_side(spec));
    REQUIRE(batch.size == S);
    const int split = std::min(batch.n, 5);
    const int ranges[2][2] = {{0, split}, {split, batch.n - split}};  // begin, count
    for (const auto& range : ranges) {
      const int begin = range[0], count = range[1];
      if (count == 0) continue;
      INFO("epoch " << batch.where.epoch << ", batch " << batch.where.batch << ", images ["
                    << begin << ", " << begin + count << ")");
      const ModelInput got = model_input(batch, begin, count, norm, dtype_of<T>(), Context::cpu());
      REQUIRE(got.x.shape() == Shape{count, S, S, C});
      REQUIRE(ints(got.labels) ==
              std::vector<int32_t>(batch.labels + begin, batch.labels + begin + count));
      std::vector<uint8_t> cut;  // (count,S,S,C): the old loader's bytes
      for (int k = begin; k < begin + count; k++) {
        const int64_t i = batch.indices[k];
        const std::vector<uint8_t> one =
            old_sample(src->name(i), spec, augment_key(kBatchSeed, batch.where.epoch, i));
        cut.insert(cut.end(), one.begin(), one.end());
      }
      std::vector<T> want(cut.size());
      input_normalize_cpu<T>(count, S, C, cut.data(), norm.mean(), norm.stddev(), want.data());
      REQUIRE(std::memcmp(got.x.data<T>(), want.data(), want.size() * sizeof(T)) == 0);
    }
  });
}

}  // namespace

TEST_CASE("model_input: (pixel / 255 - mean) / std per channel, in f32 and f16") {
  const std::vector<uint8_t> px = {0, 255, 51, 102, 204, 255};  // (2,1,1,3)
  const std::vector<int32_t> y = {4, 7};
  const InputNorm norm(Normalization{{0.5, 0.2, 0.0}, {0.5, 0.4, 1.0}});
  const Batch b = batch_of(px, y, 1, 1, 3);
  const ModelInput x = model_input(b, 0, 1, norm, DType::f32, Context::cpu());  // the first image
  REQUIRE(x.x.shape() == Shape{1, 1, 1, 3});
  require_near(x.x.to_doubles(), {-1.0, (1.0 - 0.2) / 0.4, 0.2}, 1e-6);
  REQUIRE(x.labels.dtype() == DType::i32);
  REQUIRE(ints(x.labels) == std::vector<int32_t>{4});
  const ModelInput h = model_input(b, 0, 2, norm, DType::f16, Context::cpu());
  REQUIRE(h.x.dtype() == DType::f16);
  require_near(h.x.to_doubles(), {-1.0, 2.0, 0.2, -0.2, 1.5, 1.0}, 2e-3);
  const ModelInput second = model_input(b, 1, 1, norm, DType::f64, Context::cpu());
  require_near(second.x.to_doubles(), {-0.2, 1.5, 1.0}, 1e-6);  // mean, std rounded to f32
  REQUIRE(ints(second.labels) == std::vector<int32_t>{7});
  const ModelInput none = model_input(b, 2, 0, norm, DType::f32, Context::cpu());
  REQUIRE(none.x.shape() == Shape{0, 1, 1, 3});
  REQUIRE(none.labels.numel() == 0);
}

TEST_CASE("model_input: each image's window cut out of its uncut image, mirrored when flipped") {
  // Two 3x3 uncut images (values 0..8 and 10..18), 2x2 windows.
  std::vector<uint8_t> px(18);
  for (int i = 0; i < 9; i++) px[size_t(i)] = uint8_t(i), px[size_t(9 + i)] = uint8_t(10 + i);
  const std::vector<int32_t> y = {0, 1};
  const std::vector<InputCrop> crops = {{1, 0, 1}, {0, 1, 0}};
  const InputNorm norm(Normalization{{0.0}, {1.0}});  // x / 255
  const ModelInput x = model_input(batch_of(px, y, 3, 2, 1, &crops), 0, 2, norm, DType::f64,
                                   Context::cpu());
  REQUIRE(x.x.shape() == Shape{2, 2, 2, 1});
  // image 0, rows 1-2, columns 0-1 mirrored: (4 3), (7 6); image 1, rows 0-1, columns 1-2
  std::vector<double> want;
  for (double v : {4, 3, 7, 6, 11, 12, 14, 15}) want.push_back(v / 255);
  REQUIRE(x.x.to_doubles() == want);
}

TEST_CASE("model_input: a range outside the batch, a window outside its image and channels "
          "that do not match are errors") {
  std::vector<uint8_t> px(18, 7);
  const std::vector<int32_t> y = {0, 1};
  const std::vector<InputCrop> off = {{0, 0, 0}, {2, 0, 0}};  // 2 + 2 > 3
  const InputNorm gray(Normalization{{0.5}, {0.5}});
  const Batch b = batch_of(px, y, 3, 2, 1, &off);
  REQUIRE_ERROR(model_input(b, 1, 2, gray, DType::f32, Context::cpu()),
                "images [1, 3) of a batch of 2");
  REQUIRE_ERROR(model_input(b, 0, 2, gray, DType::f32, Context::cpu()),
                "sample 1: the 2x2 window at (top 2, left 0) does not lie inside the 3x3 image");
  model_input(b, 0, 1, gray, DType::f32, Context::cpu());  // the first alone is fine
  const InputNorm rgb(Normalization{{0.5, 0.5, 0.5}, {0.5, 0.5, 0.5}});
  REQUIRE_ERROR(model_input(b, 0, 1, rgb, DType::f32, Context::cpu()), "1 channels but 3 means");
  REQUIRE_ERROR(InputNorm(Normalization{{0.5}, {0.0}}), "must be a finite number > 0");
  REQUIRE_ERROR(InputNorm(Normalization{{}, {}}), "no channels");
}

TEST_CASE("model_input: real JPEG files through the loader give the old path's bits") {
  TempDir dir;
  // 24 files, 12..51 pixels a side, not square, RGB and gray (tests/data/pack_fixture.h)
  const ImageList list = read_image_list(write_jpeg_set(dir, 24, 3));
  struct Case {
    const char* what;
    ImageSpec spec;
    int side;  // of the uncut images
  };
  const Case cases[] = {
      {"--resize 16, random crop with pad 2, flip", input_spec(12, 3, 16, true, 2), 16},
      {"random crop in the whole image, no pad, flip", input_spec(12, 1, 0, true, 0), 12},
      {"--resize 14, centred (evaluation)", input_spec(12, 3, 14, false, 0), 12},
      {"centred, no resize", input_spec(11, 1, 0, false, 0), 11},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    REQUIRE(uncut_side(c.spec) == c.side);
    const auto src = std::make_shared<ListSource>(list, c.spec);
    const Normalization& n = c.spec.channels == 3 ? kRgbNorm : kGrayNorm;
    REQUIRE(require_old_bits<float>(src, n) == 48);
    REQUIRE(require_old_bits<half_t>(src, n) == 48);
    REQUIRE(require_old_bits<double>(src, n) == 48);
  }
}

TEST_CASE("model_input: real Fashion-MNIST through the loader gives the old path's bits") {
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  // the trainer's --augment on Fashion-MNIST: pad 3 (size / 8), so 34x34 uncut images, the
  // same bytes whatever the key; and its evaluation, centred
  const auto train = open_source(fm.train, input_spec(28, 1, 0, true, 3), 100);
  REQUIRE(uncut_side(train->spec()) == 34);
  REQUIRE(require_old_bits<float>(train, kFashionNorm) == 200);
  REQUIRE(require_old_bits<half_t>(train, kFashionNorm) == 200);
  const auto test = open_source(fm.test, input_spec(28, 1, 0, false, 0), 50);
  REQUIRE(require_old_bits<float>(test, kFashionNorm) == 100);
}

TEST_CASE("model_input: without a usable GPU the GPU path refuses, saying why") {
  if (gpu_usable()) {
    skip("a GPU is usable here: tests/train/engine/batch_input_gpu_test.cpp runs the GPU path");
    return;
  }
  const Normalization norm{{0.5}, {0.5}};
  REQUIRE_ERROR(InputNorm(norm, test_gpu()), "InputNorm: no GPU to prepare the batch on");
  if (!cuda_compiled()) REQUIRE_ERROR(InputNorm(norm, test_gpu()), "built without CUDA");
  // A batch on the device (as a loader with LoaderConfig::gpu hands it out) for cuda.
  std::vector<uint8_t> px(4);
  const std::vector<int32_t> y = {0};
  Batch b = batch_of(px, y, 2, 2, 1);
  b.d_images = px.data();  // never read: the refusal comes first
  REQUIRE_ERROR(model_input(b, 0, 1, InputNorm(norm), DType::f32, test_gpu()),
                "model_input: no GPU to prepare the batch on");
}
