// The multi-tensor optimizer steps on the GPU: one launch over every parameter of the table,
// each block on one chunk of one tensor at a time.
//
// Math: multi_tensor.h.
// Launch: 256 threads a block, a block per chunk up to 4096 blocks (then each takes every
// 4096th chunk); inside a chunk, a thread per element, striding by the block. A table of no
// elements with a step's work folded in: one block, which is also the last.
// The skip decision stays on the device, read first by every thread (the same value: the whole
// grid takes the same branch); skipped or not, each gradient element is zeroed once read.
// The check visits the parameters' chunks only; the updates every chunk, the averaged-only
// slots' too (which they only average).
// Bytes: multi_tensor.h's multi_grads_nonfinite_gpu_cost (every gradient read) and
//   multi_step_gpu_cost (gradient read and zeroed, master and states read and written, working
//   copy written, averages read and written). Memory bound.
// Flops: multi_grads_nonfinite_gpu_cost 2 an element, multi_step_gpu_cost ~7 (SGD) or ~15
//   (AdamW) an element.
// Precision: sgd_update / adamw_update / scaled_finite (sgd.h, adamw.h) through the _rn
//   intrinsics of hd.h: the per-tensor kernels' bits, which are the CPU's.
#include <cuda_fp16.h>

#include "kernels/check.h"
#include "kernels/arrival_counters.h"
#include "kernels/cuda_util.cuh"
#include "kernels/multi_tensor.h"

namespace cutrain {

namespace {

constexpr int kBlock = 256;


// The folded step work (multi_tensor.h): run by the launch's last block, thread 0, after
// every other block is through; a no-op when neither is asked for.
struct Folded {
  int P = 0;                    // decide: over flags[0..P)
  int32_t* flags = nullptr;
  StepState* decide = nullptr;
  StepFinish finish;            // finish.state null: none
  bool any() const { return decide || finish.state; }
  __device__ void run(unsigned* arrivals) const {
    if (!decide && !finish.state) return;
    if (!last_block_to_arrive(arrivals, gridDim.x)) return;
    if (threadIdx.x != 0) return;
    // The other blocks' flags through a volatile pointer: read from memory, never from this
    // SM's L1 (the CUDA guide's last-block example does the same).
    if (decide) step_decide(P, static_cast<const volatile int32_t*>(flags), decide);
    if (finish.state) step_finish(finish.config, finish.state);
  }
};

__global__ void multi_nonfinite_kernel(const ParamSlot* slots, const ParamChunk* chunks,
                                       int n_chunks, const float* inv_scale, int32_t* flags,
                                       Folded folded, unsigned* arrivals) {
  const float s = *inv_scale;
  for (int c = blockIdx.x; c < n_chunks; c += gridDim.x) {
    const ParamChunk ch = chunks[c];
    const ParamSlot sl = slots[ch.slot];
    bool bad = false;
    for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x)
      bad |= !scaled_finite(sl.half ? to_acc(static_cast<const __half*>(sl.grad)[i])
                                    : static_cast<const float*>(sl.grad)[i],
                            s);
    // one store per chunk at most; every writer stores the same 1, so the race is harmless
    if (__syncthreads_or(bad) && threadIdx.x == 0) flags[ch.slot] = 1;
  }
  folded.run(arrivals);
}

// The moving average's two factors at this step (kernels/ema.h), read before the launch's
// last block may finish the step (which moves t on); both 0 without an average.
struct EmaFactors {
  float d = 0, one_minus_d = 0;
};
__device__ EmaFactors ema_factors(double decay, const int64_t* step) {
  EmaFactors f;
  if (decay > 0) {
    f.d = ema_decay_at<float>(decay, *step);
    f.one_minus_d = sub_rn(1.0f, f.d);
  }
  return f;
}

// The update of one element of slot sl by `update(g, w, s1, s2)` (the stored gradient, the
// master and the states), its working copy written, its gradient zeroed, its average moved.
template <typename Update>
__device__ void update_element(const ParamSlot& sl, int64_t i, bool skip, EmaFactors e,
                               Update update) {
  float g;
  if (sl.half) {
    __half* gp = static_cast<__half*>(sl.grad);
    g = to_acc(gp[i]);
    gp[i] = __float2half(0.0f);
  } else {
    float* gp = static_cast<float*>(sl.grad);
    g = gp[i];
    gp[i] = 0.0f;
  }
  if (skip) return;
  float w = sl.master[i], s1 = sl.state1[i], s2 = sl.state2 ? sl.state2[i] : 0.0f;
  update(g, w, s1, s2);
  sl.master[i] = w;
  sl.state1[i] = s1;
  if (sl.state2) sl.state2[i] = s2;
  if (sl.working) {
    if (sl.half) static_cast<__half*>(sl.working)[i] = from_acc<__half>(w);
    else static_cast<float*>(sl.working)[i] = w;
  }
  if (sl.ema) sl.ema[i] = ema_update(sl.ema[i], w, e.d, e.one_minus_d);
}

template <typename Update>
__device__ void for_each_element(const ParamSlot* slots, const ParamChunk* chunks, int n_chunks,
                                 bool skip, EmaFactors e, Update update) {
  for (int c = blockIdx.x; c < n_chunks; c += gridDim.x) {
    const ParamChunk ch = chunks[c];
    const ParamSlot sl = slots[ch.slot];
    if (!sl.grad) {  // averaged-only: the average alone, on a step taken
      if (!skip)
        for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x)
          sl.ema[i] = ema_update(sl.ema[i], sl.master[i], e.d, e.one_minus_d);
      continue;
    }
    for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x)
      update_element(sl, i, skip, e, update);
  }
}

// The updates read inv_scale, skip, lr and t before they arrive: a folded step_finish, which
// changes inv_scale and t, runs after every block has read them.
__global__ void multi_sgd_kernel(const ParamSlot* slots, const ParamChunk* chunks, int n_chunks,
                                 const float* inv_scale, const int32_t* skip, const double* lr,
                                 SgdScalars<float> k, const int64_t* step, double ema_decay,
                                 Folded folded, unsigned* arrivals) {
  const float s = *inv_scale;
  k.lr = float(*lr);  // rounded once from double, as sgd_scalars does on the host
  for_each_element(slots, chunks, n_chunks, *skip != 0, ema_factors(ema_decay, step),
                   [&](float g, float& w, float& v, float&) { sgd_update(g, s, k, w, v); });
  folded.run(arrivals);
}

__global__ void multi_adamw_kernel(const ParamSlot* slots, const ParamChunk* chunks,
                                   int n_chunks, const float* inv_scale, const int32_t* skip,
                                   const double* lr, AdamWScalars<float> k, double beta1,
                                   double beta2, double weight_decay, const int64_t* step,
                                   double ema_decay, Folded folded, unsigned* arrivals) {
  float bc1, bc2;
  adamw_block_values(beta1, beta2, weight_decay, lr, step, k, bc1, bc2);
  const float s = *inv_scale;
  for_each_element(slots, chunks, n_chunks, *skip != 0, ema_factors(ema_decay, step),
                   [&](float g, float& w, float& m, float& v) {
                     adamw_update(g, s, k, bc1, bc2, w, m, v);
                   });
  folded.run(arrivals);
}

void check_table(const ParamTable& t, const char* what) {
  CHECK(t.built(), what << ": the parameter table was not built");
}

// An update's averages: a decay in (0, 1) with the step it is taken at, or none at all.
void check_ema(const ParamTable& t, const int64_t* step, double ema_decay, const char* what) {
  const bool any = t.has_averages();
  CHECK(any == (ema_decay > 0), what << ": " << (any ? "the table has averages but the decay is 0"
                                                     : "a decay but no average in the table"));
  CHECK(ema_decay < 1 && (ema_decay == 0 || step), what << ": the average's decay "
                                                        << ema_decay << " needs to be in (0, 1), "
                                                        << "and the step count in device memory");
}

}  // namespace

// Blocks of a launch over `chunks` chunks: at least one when a step's work is folded in (an
// empty table), at most 4096 (each then takes every 4096th chunk).
int grid_for(int chunks, const Folded& f) {
  return chunks > 0 ? (chunks < 4096 ? chunks : 4096) : f.any() ? 1 : 0;
}
Folded fold_finish(const StepFinish* finish) {
  Folded f;
  if (finish) f.finish = *finish;
  return f;
}

void multi_grads_nonfinite_gpu(const ParamTable& t, const float* inv_scale, int32_t* flags,
                               StepState* decide, cudaStream_t stream) {
  check_table(t, "multi_grads_nonfinite_gpu");
  Folded f;
  f.P = t.param_count(), f.flags = flags, f.decide = decide;
  const int grid = grid_for(t.param_chunk_count(), f);
  if (grid == 0) return;
  multi_nonfinite_kernel<<<grid, kBlock, 0, stream>>>(t.slots(), t.chunks(),
                                                      t.param_chunk_count(), inv_scale, flags, f,
                                                      arrival_counters(stream, 1));
  LAUNCH_CHECK();
}

void multi_sgd_step_gpu(const ParamTable& t, const float* inv_scale, const int32_t* skip,
                        const double* lr, const SgdParams& p, const int64_t* step,
                        double ema_decay, const StepFinish* finish, cudaStream_t stream) {
  check_table(t, "multi_sgd_step_gpu");
  check_ema(t, step, ema_decay, "multi_sgd_step_gpu");
  CHECK(lr != nullptr, "SGD step: the learning rate must be in device memory");
  const Folded f = fold_finish(finish);
  const int grid = grid_for(t.chunk_count(), f);
  if (grid == 0) return;
  multi_sgd_kernel<<<grid, kBlock, 0, stream>>>(t.slots(), t.chunks(), t.chunk_count(),
                                                inv_scale, skip, lr, sgd_scalars<float>(p), step,
                                                ema_decay, f, arrival_counters(stream, 1));
  LAUNCH_CHECK();
}

void multi_adamw_step_gpu(const ParamTable& t, const float* inv_scale, const int32_t* skip,
                          const double* lr, const AdamWParams& p, const int64_t* step,
                          double ema_decay, const StepFinish* finish, cudaStream_t stream) {
  check_table(t, "multi_adamw_step_gpu");
  check_ema(t, step, ema_decay, "multi_adamw_step_gpu");
  CHECK(lr != nullptr, "AdamW step: the learning rate must be in device memory");
  const Folded f = fold_finish(finish);
  const int grid = grid_for(t.chunk_count(), f);
  if (grid == 0) return;
  multi_adamw_kernel<<<grid, kBlock, 0, stream>>>(
      t.slots(), t.chunks(), t.chunk_count(), inv_scale, skip, lr, adamw_scalars<float>(p),
      p.beta1, p.beta2, p.weight_decay, step, ema_decay, f, arrival_counters(stream, 1));
  LAUNCH_CHECK();
}

}  // namespace cutrain
