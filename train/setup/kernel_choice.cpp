// --conv auto on a GPU: timing each conv layer's passes (train/setup/kernel_choice.h).
#include "train/setup/kernel_choice.h"

#include <algorithm>
#include <cstdio>

#include "kernels/check.h"
#include "kernels/conv2d.h"
#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/vendor.h"
#include "nn/model.h"
#include "train/replicas/mpi.h"

namespace cutrain {

namespace {

constexpr int kWarmup = 2, kReps = 5;

#if defined(CUTRAIN_CUDA)
// The mean milliseconds of kReps runs of `run` on `stream`, after kWarmup (plans, caches).
template <typename Run> double time_ms(cudaStream_t stream, Run run) {
  for (int i = 0; i < kWarmup; i++) run();
  Event start(true), stop(true);
  start.record(stream);
  for (int i = 0; i < kReps; i++) run();
  stop.record(stream);
  stop.synchronize();
  return double(stop.ms_since(start)) / kReps;
}

// Every layer's three passes with `own` and with cuDNN, on zeros (the kernels' time does not
// depend on the values) at N images; the faster of each kept, ties to `own`.
template <typename T>
KernelPlan time_layers(Model& model, int N, ConvImpl own, std::vector<std::string>& notes) {
  Stream stream(current_device());  // the run's GPU (DeviceGuard), not GPU 0
  KernelPlan plan;
  bool first = true;  // the first conv reads the images: no data gradient to time
  for (const ConvLayer& l : model.conv_layers()) {
    Conv2dShape s = l.shape;
    s.N = N;
    const size_t x_n = size_t(N) * s.H * s.W * s.C, w_n = size_t(s.K) * s.R * s.S * s.C,
                 y_n = size_t(N) * s.P() * s.Q() * s.K;
    DeviceBuffer x(x_n * sizeof(T), current_device(), stream.get()),
        w(w_n * sizeof(T), current_device(), stream.get()),
        y(y_n * sizeof(T), current_device(), stream.get()),
        dx(x_n * sizeof(T), current_device(), stream.get()),
        dw(w_n * sizeof(T), current_device(), stream.get());
    for (DeviceBuffer* b : {&x, &w, &y, &dx, &dw}) memset_async(b->data(), 0, b->bytes(), stream.get());
    T *px = static_cast<T*>(x.data()), *pw = static_cast<T*>(w.data()),
      *py = static_cast<T*>(y.data()), *pdx = static_cast<T*>(dx.data()),
      *pdw = static_cast<T*>(dw.data());
    const cudaStream_t st = stream.get();
    double ms[3][2] = {};
    const ConvImpl impls[2] = {own, ConvImpl::cudnn};
    for (int i = 0; i < 2; i++) {
      const ConvImpl im = impls[i];
      ms[0][i] = time_ms(st, [&] { conv2d_forward_gpu<T>(im, s, px, pw, nullptr, py, st); });
      if (!first)
        ms[1][i] = time_ms(st, [&] { conv2d_backward_data_gpu<T>(im, s, py, pw, pdx, st); });
      ms[2][i] = time_ms(st, [&] {
        conv2d_backward_filter_gpu<T>(im, s, px, py, pdw, nullptr, st);
      });
    }
    ConvChoice c{own, own, own};
    ConvImpl* pass[3] = {&c.forward, &c.data, &c.filter};
    const char* names[3] = {"forward", "data", "filter"};
    std::string line = l.name + ":";
    for (int p = 0; p < 3; p++) {
      if (p == 1 && first) {
        line += " data -;";
        continue;
      }
      if (ms[p][1] < ms[p][0]) *pass[p] = ConvImpl::cudnn;
      char part[128];
      std::snprintf(part, sizeof part, " %s %s %.3f ms, cudnn %.3f ms -> %s;", names[p],
                    impl_name(own), ms[p][0], ms[p][1], impl_name(*pass[p]));
      line += part;
    }
    line.pop_back();
    notes.push_back("  " + line);
    plan[l.name] = c;
    first = false;
  }
  return plan;
}
#endif

}  // namespace

void choose_conv_kernels(TrainConfig& cfg, const RunDevice& device, bool resuming,
                         std::vector<std::string>& notes) {
  if (resuming || device.device != Device::cuda || cfg.conv != "auto" ||
      !cfg.kernel_plan.empty() || !cudnn_built())
    return;
#if defined(CUTRAIN_CUDA)
  const Mpi* mpi = device.mpi;
  std::string text;
  if (!mpi || mpi->root()) {
    ModelOptions o;
    o.H = o.W = cfg.size;
    o.C = cfg.channels;
    o.classes = cfg.classes;
    o.shapes_only = true;
    auto model = build_model(parse_model_spec(cfg.model_text, cfg.model), o);
    const int world = mpi ? mpi->size() : replica_count(cfg);
    const int N = std::max(1, cfg.batch / world / cfg.accum);  // the micro-batch
    const DeviceGuard on(device.gpu);
    std::vector<std::string> lines;
    const KernelPlan plan =
        device.dtype == DType::f16 ? time_layers<half_t>(*model, N, ConvImpl::tc, lines)
                                   : time_layers<float>(*model, N, ConvImpl::direct, lines);
    text = kernel_plan_str(plan);
    notes.push_back("conv kernels (--conv auto: each pass timed at " + std::to_string(N) +
                    " images against cuDNN, the faster kept; --kernel-plan to fix them):");
    notes.insert(notes.end(), lines.begin(), lines.end());
  }
  if (mpi) {  // rank 0's plan for every rank
    int64_t n = int64_t(text.size());
    mpi->broadcast(&n, sizeof n, 0);
    text.resize(size_t(n));
    if (n > 0) mpi->broadcast(text.data(), size_t(n), 0);
  }
  cfg.kernel_plan = text;
#else
  (void)notes;
#endif
}

}  // namespace cutrain
