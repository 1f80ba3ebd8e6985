// model_input on the GPU: a batch the loader copied to the device (uncut images, their crop
// windows and labels, on its copy stream) becomes, in the crop/flip/normalise kernel, the same
// bits as model_input gives on the CPU from the host copy of the same batch; real JPEG files
// and real Fashion-MNIST with random crops (padded or not), flips, --resize and centred crops,
// in f32 and f16, over micro-batch ranges; hand-made batches of odd sizes with random windows,
// the output poisoned first; the labels a copy that outlives the loader's slot; the errors.
#include <cstring>
#include <memory>
#include <vector>

#include "data/loader.h"
#include "kernels/rng.h"
#include "nn/context.h"
#include "tests/data/pack_fixture.h"
#include "tests/kernels/gpu_compare.h"
#include "tests/test_util.h"
#include "tests/train/engine/batch_input_fixture.h"
#include "tests/train/fashion_mnist_data.h"
#include "train/engine/batch_input.h"
#include "train/setup/sources.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

// A tensor's elements as T on the host (copied back from the device if needed).
template <typename T> std::vector<T> host_values(const Tensor& t) {
  const Tensor h = t.to(Context::cpu());
  const T* p = h.data<T>();
  return std::vector<T>(p, p + h.numel());
}

// Poisons the block the next cuda tensor like `like` will most likely get: the caching
// allocator hands a freed block of the same size back to the next request on the same stream.
// So an element model_input failed to write reads 0xff bytes (NaN in f32 and f16).
void poison_next_block(const Shape& shape, DType dtype, const Context& ctx) {
  const Tensor t = Tensor::empty(shape, dtype, ctx);
  memset_async(t.raw(), 0xff, t.bytes(), ctx.stream);
}

// The GPU's input for images [begin, begin + n) of `batch` against the CPU's from the same
// batch's host bytes: the same bits, the same labels.
template <typename T>
void require_gpu_equals_cpu(const Batch& batch, int begin, int n, const InputNorm& on_gpu,
                            const InputNorm& on_cpu, const Context& ctx) {
  const DType dtype = dtype_of<T>();
  INFO("images [" << begin << ", " << begin + n << ") of " << batch.n << ", uncut "
                  << batch.side << ", window " << batch.size << ", " << dtype_name(dtype));
  const ModelInput want = model_input(batch, begin, n, on_cpu, dtype, Context::cpu());
  poison_next_block(want.x.shape(), dtype, ctx);
  const ModelInput got = model_input(batch, begin, n, on_gpu, dtype, ctx);
  REQUIRE(got.x.device() == Device::cuda);
  REQUIRE(got.x.dtype() == dtype);
  REQUIRE(got.x.shape() == want.x.shape());
  require_same_bits(host_values<T>(got.x), host_values<T>(want.x), "x");
  REQUIRE(got.labels.device() == Device::cuda);
  REQUIRE(host_values<int32_t>(got.labels) == host_values<int32_t>(want.labels));
}

// Two epochs of `src` through a loader that copies to the device; each batch compared in two
// ranges (a short one first: the offsets into the device buffers). Returns the images.
template <typename T>
int64_t require_loader_batches(const std::shared_ptr<const SampleSource>& src,
                               const Normalization& n, const Context& ctx) {
  const InputNorm on_gpu(n, ctx), on_cpu(n);
  return for_each_batch(src, ctx, [&](const Batch& batch) {
    REQUIRE(batch.d_images != nullptr);
    REQUIRE(batch.d_crops != nullptr);
    const int split = std::min(batch.n, 5);
    require_gpu_equals_cpu<T>(batch, 0, split, on_gpu, on_cpu, ctx);
    if (batch.n > split)
      require_gpu_equals_cpu<T>(batch, split, batch.n - split, on_gpu, on_cpu, ctx);
  });
}

}  // namespace

TEST_CASE_TEMPLATE("model_input [gpu]: loader batches on the device give the CPU's bits", T,
                   float, half_t) {
  REQUIRE_GPU();
  Stream stream;
  const Context ctx = Context::cuda(stream.get());  // the tensors and kernels here
  TempDir dir;
  const ImageList list = read_image_list(write_jpeg_set(dir, 24, 3));  // 12..51, not square
  for (const ImageSpec& spec : {input_spec(12, 3, 16, true, 2), input_spec(12, 1, 0, true, 0),
                                input_spec(12, 3, 14, false, 0)}) {
    INFO("size " << spec.size << ", resize " << spec.resize << ", augment " << spec.random_crop
                 << ", pad " << spec.pad);
    const auto src = std::make_shared<ListSource>(list, spec);
    const Normalization& norm = spec.channels == 3 ? kRgbNorm : kGrayNorm;
    REQUIRE(require_loader_batches<T>(src, norm, ctx) == 48);
  }
  // The trainer's --augment on Fashion-MNIST: 34x34 uncut images, 28x28 windows.
  const FashionMnistFiles& fm = fashion_mnist_jpegs();
  const auto train = open_source(fm.train, input_spec(28, 1, 0, true, 3), 100);
  REQUIRE(require_loader_batches<T>(train, kFashionNorm, ctx) == 200);
}

TEST_CASE_TEMPLATE("model_input [gpu]: hand-made batches of odd sizes, random windows", T, float,
                   half_t) {
  REQUIRE_GPU();
  Stream stream;
  const Context ctx = Context::cuda(stream.get());  // the tensors and kernels here
  struct Case {
    int n, P, S, C;
    Normalization norm;
  };
  const std::vector<Case> cases = {
      {7, 34, 28, 1, kFashionNorm},  // Fashion-MNIST, pad 3
      {5, 41, 33, 3, kRgbNorm},      // ImageNet's statistics
      {1, 9, 9, 3, {{0.5, 0.0, 1.0}, {0.25, 1.0, 0.125}}},            // window = whole image
      {67, 19, 17, 1, {{0.1}, {2.5}}},
  };
  for (size_t k = 0; k < cases.size(); k++) {
    const Case& c = cases[k];
    std::vector<uint8_t> px(size_t(c.n) * size_t(c.P) * size_t(c.P) * size_t(c.C));
    for (size_t i = 0; i < px.size(); i++) px[i] = uint8_t(rng_u64(40 + k, i));
    std::vector<InputCrop> crops(size_t(c.n));
    std::vector<int32_t> labels(size_t(c.n));
    for (int i = 0; i < c.n; i++) {
      const uint64_t r = rng_u64(77 + k, uint64_t(i));
      const int room = c.P - c.S + 1;
      crops[size_t(i)] = InputCrop{int32_t(r % uint64_t(room)),
                                   int32_t((r >> 20) % uint64_t(room)), int32_t((r >> 40) & 1)};
      labels[size_t(i)] = int32_t(r % 1000);
    }
    const DeviceBuffer d_px = upload(px), d_crops = upload(crops), d_labels = upload(labels);
    Batch b;
    b.n = c.n, b.side = c.P, b.size = c.S, b.channels = c.C;
    b.images = px.data(), b.crops = crops.data(), b.labels = labels.data();
    b.d_images = d_px.data();
    b.d_crops = static_cast<const InputCrop*>(d_crops.data());
    b.d_labels = static_cast<const int32_t*>(d_labels.data());
    const InputNorm on_gpu(c.norm, ctx), on_cpu(c.norm);
    REQUIRE(on_gpu.channels() == c.C);
    require_gpu_equals_cpu<T>(b, 0, c.n, on_gpu, on_cpu, ctx);
    if (c.n > 2) require_gpu_equals_cpu<T>(b, 1, c.n - 2, on_gpu, on_cpu, ctx);
    // No windows: every one at (0, 0), unflipped, on both sides alike.
    Batch plain = b;
    plain.crops = nullptr, plain.d_crops = nullptr;
    require_gpu_equals_cpu<T>(plain, 0, c.n, on_gpu, on_cpu, ctx);
  }
}

TEST_CASE("model_input [gpu]: the labels are a copy that outlives the loader's slot; errors") {
  REQUIRE_GPU();
  Stream stream;
  const Context ctx = Context::cuda(stream.get());  // the tensors and kernels here
  std::vector<int32_t> y(301);
  for (size_t i = 0; i < y.size(); i++) y[i] = int32_t(rng_u64(9, i) % 1000);
  std::vector<uint8_t> px(y.size() * 4 * 4, 9);  // (301,4,4,1), windows 3x3
  std::vector<InputCrop> crops(y.size(), InputCrop{1, 0, 1});
  DeviceBuffer d_px = upload(px), d_crops = upload(crops), d_y = upload(y);
  Batch b;
  b.n = int(y.size()), b.side = 4, b.size = 3, b.channels = 1;
  b.images = px.data(), b.crops = crops.data(), b.labels = y.data();
  b.d_images = d_px.data();
  b.d_crops = static_cast<const InputCrop*>(d_crops.data());
  b.d_labels = static_cast<const int32_t*>(d_y.data());
  const InputNorm norm(Normalization{{0.5}, {0.5}}, ctx);
  const ModelInput in = model_input(b, 0, b.n, norm, DType::f32, ctx);
  // The loader refills its slot once the stream has passed the copy: the tensor must not care.
  memset_async(d_y.data(), 0xff, d_y.bytes(), stream.get());
  REQUIRE(in.labels.dtype() == DType::i32);
  REQUIRE(in.labels.shape() == Shape{301});
  REQUIRE(host_values<int32_t>(in.labels) == y);
  const ModelInput none = model_input(b, 301, 0, norm, DType::f16, ctx);
  REQUIRE(none.x.numel() == 0);
  REQUIRE(none.labels.numel() == 0);

  REQUIRE_ERROR(model_input(b, 0, 1, InputNorm(Normalization{{0.5}, {0.5}}), DType::f32,
                            ctx),
                "the normalisation was made for the CPU");
  REQUIRE_ERROR(model_input(b, 0, 1, norm, DType::f64, ctx),
                "must be f32 or f16 on a GPU");
  const InputNorm rgb(Normalization{{0.5, 0.5, 0.5}, {0.5, 0.5, 0.5}}, ctx);
  REQUIRE_ERROR(model_input(b, 0, 1, rgb, DType::f32, ctx), "1 channels but 3 means");
  // A window outside its image is refused on the host, before the kernel could read it.
  crops[7] = InputCrop{2, 0, 0};
  REQUIRE_ERROR(model_input(b, 0, 10, norm, DType::f32, ctx),
                "sample 7: the 3x3 window at (top 2, left 0) does not lie inside the 4x4 image");
  Batch one_sided = b;
  one_sided.d_crops = nullptr;
  REQUIRE_ERROR(model_input(one_sided, 0, 1, norm, DType::f32, ctx),
                "crop windows on only one of the host and the device");
  REQUIRE_ERROR(InputNorm(Normalization{{0.5}, {0.0}}, ctx),
                "must be a finite number > 0");
}
