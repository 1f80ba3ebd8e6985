#include "train/engine/batch_input.h"

#include "kernels/check.h"
#include "kernels/gpu.h"
#include "kernels/input.h"
#include "nn/dispatch.h"
#include "nn/context.h"

namespace cutrain {

namespace {
// The GPU needs a device; without one (a CPU-only build, or no GPU answering) say so in the
// caller's words rather than deep inside a tensor allocation.
void require_gpu(const char* what) {
  CHECK(gpu_usable(), what << ": no GPU to prepare the batch on (" << gpu_unavailable_reason()
                           << "); on the CPU make it in Context::cpu()");
}
}  // namespace

InputNorm::InputNorm(const Normalization& norm, const Context& in)
    : values_(norm),
      mean_(norm.mean.begin(), norm.mean.end()),
      std_(norm.std.begin(), norm.std.end()) {
  const int C = int(mean_.size());
  CHECK(C >= 1, "InputNorm: no channels (the mean is empty)");
  input_check_norm(C, mean_, std_);  // here, on the host: a kernel cannot report a zero std
  if (in.device != Device::cuda) return;
  require_gpu("InputNorm");
  const cudaStream_t stream = in.stream;
  d_mean_ = Tensor::empty({C}, DType::f32, in);  // (C) f32
  d_std_ = Tensor::empty({C}, DType::f32, in);   // (C) f32
  // From members, but wait for the copies anyway (as DeviceStep::reset does: for a pageable
  // source the CUDA docs promise little, and this object may be moved). Once per trainer
  // lane or evaluation.
  copy_async(d_mean_.raw(), mean_.data(), d_mean_.bytes(), stream);
  copy_async(d_std_.raw(), std_.data(), d_std_.bytes(), stream);
  Event done;
  done.record(stream);
  done.synchronize();
}

ModelInput model_input(const Batch& batch, int begin, int n, const InputNorm& norm, DType dtype,
                       const Context& at, bool mirror) {
  const int P = batch.side, S = batch.size, C = batch.channels;
  CHECK(begin >= 0 && n >= 0 && int64_t(begin) + n <= batch.n,
        "model_input: images [" << begin << ", " << int64_t(begin) + n << ") of a batch of "
                                << batch.n);
  CHECK(norm.channels() == C, "model_input: " << C << " channels but " << norm.channels()
                                              << " means and standard deviations");
  const size_t offset = size_t(begin) * size_t(P) * size_t(P) * size_t(C);  // first image's
  const InputCrop* crops = batch.crops ? batch.crops + begin : nullptr;  // (n) or none
  ModelInput in;
  // What the GPU queues: the conversion, then the labels' copy, each noted right before it is
  // queued (a measured plan times each from its note: kernels/launch_plan.h).
  const LaunchCost labels_copy = copy_cost("copy (labels)", size_t(n) * sizeof(int32_t));
  note_launch(at.plan, input_normalize_gpu_cost(n, P, P, C, S, dtype_size(dtype)));
  if (at.device == Device::cuda && batch.d_images) {
    require_gpu("model_input");
    CHECK(norm.on_gpu(), "model_input: the normalisation was made for the CPU, the batch is on "
                         "the GPU (make the InputNorm in the GPU's Context)");
    CHECK(dtype == DType::f32 || dtype == DType::f16,
          "model_input: the input must be f32 or f16 on a GPU, got " << dtype_name(dtype));
    in.x = Tensor::empty({n, S, S, C}, dtype, at);  // (n,S,S,C)
    in.labels = Tensor::empty({n}, DType::i32, at);  // (n) i32
    if (n == 0) {
      note_launch(at.plan, labels_copy);
      return in;
    }
    CHECK(!batch.crops == !batch.d_crops,
          "model_input: the batch has crop windows on only one of the host and the device");
    // The windows on the host, before the kernel reads its copy of them: it cannot check.
    input_check_crops(n, P, P, S, crops);
    const cudaStream_t stream = at.stream;
    const uint8_t* d_images = static_cast<const uint8_t*>(batch.d_images) + offset;
    const InputCrop* d_crops = batch.d_crops ? batch.d_crops + begin : nullptr;
#if defined(CUTRAIN_CUDA)
    if (dtype == DType::f16)
      input_normalize_gpu<half_t>(n, P, P, C, S, d_images, d_crops, norm.device_mean(),
                                  norm.device_stddev(), in.x.data<half_t>(), stream, mirror);
    else
      input_normalize_gpu<float>(n, P, P, C, S, d_images, d_crops, norm.device_mean(),
                                 norm.device_stddev(), in.x.data<float>(), stream, mirror);
#else
    (void)d_images, (void)d_crops;  // unreachable: require_gpu threw
#endif
    // The tensor owns its labels: the loader may refill the slot once the stream passed here.
    note_launch(at.plan, labels_copy);
    copy_async(in.labels.raw(), batch.d_labels + begin, in.labels.bytes(), stream);
    return in;
  }
  const Context host = at.device == Device::cpu ? at : Context::cpu();  // (with at's plan)
  in.x = Tensor::empty({n, S, S, C}, dtype, host);  // (n,S,S,C)
  in.labels = Tensor::empty({n}, DType::i32, host);  // (n) i32
  if (n > 0) std::memcpy(in.labels.raw(), batch.labels + begin, in.labels.bytes());
  if (n > 0)
    dispatch_float(dtype, [&](auto tag) {
      using T = decltype(tag);
      input_normalize_crop_cpu<T>(n, P, P, C, S, batch.images + offset, crops, norm.mean(),
                                  norm.stddev(), in.x.data<T>(), mirror);
    });
  note_launch(at.plan, labels_copy);
  if (at.device == Device::cuda) {  // a host batch for a model on a GPU: a synchronous copy
    in.x = in.x.to(at);
    in.labels = in.labels.to(at);
  }
  return in;
}

}  // namespace cutrain
