// The multi-tensor optimizer steps on the GPU (multi_tensor.h): one launch over every
// parameter of the table, each block on one chunk of one tensor at a time.
//
// launch: 256 threads a block, a block per chunk up to 4096 blocks (then each takes every
// 4096th chunk); inside a chunk, a thread per element, striding by the block. A table of no
// elements with a step's work folded in: one block, which is also the last.
// The skip decision stays on the device, read first by every thread (the same value: the whole
// grid takes the same branch); skipped or not, each gradient element is zeroed once read.
// precision: sgd_update / adamw_update / scaled_finite (sgd.h, adamw.h) through the _rn
// intrinsics of hd.h: the per-tensor kernels' bits, which are the CPU's.
#include <cuda_fp16.h>

#include "kernels/check.h"
#include "kernels/arrival_counters.h"
#include "kernels/cuda_util.cuh"
#include "kernels/multi_tensor.h"

namespace cutrain {

namespace {

constexpr int kBlock = 256;

int grid_of(const ParamTable& t) { return t.chunk_count() < 4096 ? t.chunk_count() : 4096; }

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

// The update of one element of slot sl by `update(g, w, s1, s2)` (the stored gradient, the
// master and the states), its working copy written, its gradient zeroed.
template <typename Update>
__device__ void update_element(const ParamSlot& sl, int64_t i, bool skip, Update update) {
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
}

template <typename Update>
__device__ void for_each_element(const ParamSlot* slots, const ParamChunk* chunks, int n_chunks,
                                 bool skip, Update update) {
  for (int c = blockIdx.x; c < n_chunks; c += gridDim.x) {
    const ParamChunk ch = chunks[c];
    const ParamSlot sl = slots[ch.slot];
    for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x)
      update_element(sl, i, skip, update);
  }
}

// The updates read inv_scale, skip, lr and t before they arrive: a folded step_finish, which
// changes inv_scale and t, runs after every block has read them.
__global__ void multi_sgd_kernel(const ParamSlot* slots, const ParamChunk* chunks, int n_chunks,
                                 const float* inv_scale, const int32_t* skip, const double* lr,
                                 SgdScalars<float> k, Folded folded, unsigned* arrivals) {
  const float s = *inv_scale;
  k.lr = float(*lr);  // rounded once from double, as sgd_scalars does on the host
  for_each_element(slots, chunks, n_chunks, *skip != 0,
                   [&](float g, float& w, float& v, float&) { sgd_update(g, s, k, w, v); });
  folded.run(arrivals);
}

__global__ void multi_adamw_kernel(const ParamSlot* slots, const ParamChunk* chunks,
                                   int n_chunks, const float* inv_scale, const int32_t* skip,
                                   const double* lr, AdamWScalars<float> k, double beta1,
                                   double beta2, double weight_decay, const int64_t* step,
                                   Folded folded, unsigned* arrivals) {
  float bc1, bc2;
  adamw_block_values(beta1, beta2, weight_decay, lr, step, k, bc1, bc2);
  const float s = *inv_scale;
  for_each_element(slots, chunks, n_chunks, *skip != 0,
                   [&](float g, float& w, float& m, float& v) {
                     adamw_update(g, s, k, bc1, bc2, w, m, v);
                   });
  folded.run(arrivals);
}

void check_table(const ParamTable& t, const char* what) {
  CHECK(t.built(), what << ": the parameter table was not built");
}

}  // namespace

// Blocks of a launch: at least one when a step's work is folded in (an empty table).
int grid_for(const ParamTable& t, const Folded& f) {
  return t.chunk_count() > 0 ? grid_of(t) : f.any() ? 1 : 0;
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
  f.P = t.slot_count(), f.flags = flags, f.decide = decide;
  const int grid = grid_for(t, f);
  if (grid == 0) return;
  multi_nonfinite_kernel<<<grid, kBlock, 0, stream>>>(t.slots(), t.chunks(), t.chunk_count(),
                                                      inv_scale, flags, f,
                                                      arrival_counters(stream, 1));
  LAUNCH_CHECK();
}

void multi_sgd_step_gpu(const ParamTable& t, const float* inv_scale, const int32_t* skip,
                        const double* lr, const SgdParams& p, const StepFinish* finish,
                        cudaStream_t stream) {
  check_table(t, "multi_sgd_step_gpu");
  CHECK(lr != nullptr, "SGD step: the learning rate must be in device memory");
  const Folded f = fold_finish(finish);
  const int grid = grid_for(t, f);
  if (grid == 0) return;
  multi_sgd_kernel<<<grid, kBlock, 0, stream>>>(t.slots(), t.chunks(), t.chunk_count(),
                                                inv_scale, skip, lr, sgd_scalars<float>(p), f,
                                                arrival_counters(stream, 1));
  LAUNCH_CHECK();
}

void multi_adamw_step_gpu(const ParamTable& t, const float* inv_scale, const int32_t* skip,
                          const double* lr, const AdamWParams& p, const int64_t* step,
                          const StepFinish* finish, cudaStream_t stream) {
  check_table(t, "multi_adamw_step_gpu");
  CHECK(lr != nullptr, "AdamW step: the learning rate must be in device memory");
  const Folded f = fold_finish(finish);
  const int grid = grid_for(t, f);
  if (grid == 0) return;
  multi_adamw_kernel<<<grid, kBlock, 0, stream>>>(
      t.slots(), t.chunks(), t.chunk_count(), inv_scale, skip, lr, adamw_scalars<float>(p),
      p.beta1, p.beta2, p.weight_decay, step, f, arrival_counters(stream, 1));
  LAUNCH_CHECK();
}

}  // namespace cutrain
