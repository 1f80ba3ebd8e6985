// defines: StepState, the state of the optimizer step that lives on the device during GPU
// training, and the small kernels that move it along: step_decide (skip or not), step_finish
// (the loss scaler's transition, the step count), loss_seed (backward's seed = scale x share)
// and scalar_accumulate (a step's loss, summed over micro-batches in double).
//
// Why: the decision to skip a step whose gradients hold inf/NaN, and the loss scale that
// follows from it, must not cost a host round trip per step (a cudaStreamSynchronize would
// drain the GPU's queue every step). So the decision is made by a kernel, the update kernels
// read it (kernels/sgd.h, adamw.h: `skip`), and the host learns what happened later, from an
// asynchronous copy of the state (train/engine/trainer.cpp reads it every step, never waiting).
//
// Math: one GPU step, all queued on the compute stream (nn/device_step.h drives it):
//   step_set_lr:  lr = the schedule's rate for this step (the one value the host sends)
//   flags[0..P) = 0                          (a memset)
//   the check of every gradient -> flags[i]  (kernels/multi_tensor.h, one launch)
//   step_decide:  skip = any(flags), first_bad = first i flagged or -1, t = steps_taken + 1,
//                 scale_used = scaler.scale  (the check's last block; a kernel of its own
//                 with replicas, which OR their flags first)
//   the update of every parameter (inv_scale, skip, lr, t; nothing changes when skip)
//   step_finish:  scaler = loss_scaler_next(cfg, scaler, skip); steps_taken += !skip;
//                 inv_scale = 1 / scaler.scale (as float: exact, scales are powers of two);
//                 peak_skips = the longest run of skips so far (the update's last block)
//
// Launch: step_state.cu launches them: one block of one thread each (decide and finish also
//   run in the last block of multi_tensor.cu's check and update).
// Bytes: a few dozen each: step_decide_gpu_cost (the P flags, the state read and written),
//   step_finish_gpu_cost, step_set_lr_gpu_cost, loss_seed_gpu_cost, scalar_accumulate_gpu_cost.
// Flops: a handful (step_decide_gpu_cost: P, one a flag; step_finish_gpu_cost 4;
//   loss_seed_gpu_cost 1; scalar_accumulate_gpu_cost 2): their launches are what they cost.
// Precision: every function is a CUTRAIN_HD function below, run by one thread on the GPU and
//   called by the CPU as is: the GPU's states equal the CPU's bit for bit. nn/device_step.h
//   drives them on either device, so the CPU trainer runs this very sequence too.
#pragma once
#include <cstdint>

#include "kernels/gpu.h"
#include "kernels/hd.h"
#include "kernels/launch_plan.h"
#include "kernels/loss_scale.h"

namespace cutrain {

struct StepState {
  LossScalerState scaler;    // the scale the next backward uses, and the scaler's counters
  double scale_used = 0;     // the scale of the step just decided (set by step_decide)
  double lr = 0;             // the learning rate of the step being taken (step_set_lr): the
                             //   optimizer kernels read it here, not as an argument, so a
                             //   CUDA graph of the update replays with each step's rate
  int64_t steps_taken = 0;   // optimizer steps taken (skipped ones not counted)
  int64_t t = 1;             // the step being taken is number t (AdamW's bias correction)
  float inv_scale = 0;       // 1 / scaler.scale: what the optimizer kernels unscale with
  int32_t skip = 0;          // the step just decided overflowed: nothing was updated
  int32_t first_bad = -1;    // then: the index of the first parameter whose gradient did
  int32_t peak_skips = 0;    // the longest run of consecutive skips since the state was made:
                             //   once it reaches the abort's limit the run stops there, so
                             //   nothing after may be saved, even after a clean step
};

// A state at the start of training or after a restore: inv_scale from the scale, t from
// steps_taken, nothing decided.
CUTRAIN_HD inline StepState step_state_make(const LossScalerState& scaler, int64_t steps_taken) {
  StepState s;
  s.scaler = scaler;
  s.scale_used = scaler.scale;
  s.steps_taken = steps_taken;
  s.t = steps_taken + 1;
  s.inv_scale = float(div_rn(1.0, scaler.scale));
  s.skip = 0;
  s.first_bad = -1;
  s.peak_skips = scaler.consecutive_skips;
  return s;
}

// flags: one int32 per parameter, nonzero where that parameter's gradient overflowed (a
// pointer to const int32_t, or to const volatile int32_t where other blocks of the same launch
// wrote them: kernels/multi_tensor.cu).
template <typename Flags> CUTRAIN_HD inline void step_decide(int P, Flags flags, StepState* s) {
  int first = -1;
  for (int i = 0; i < P && first < 0; i++)
    if (flags[i] != 0) first = i;
  s->skip = first >= 0;
  s->first_bad = first;
  s->t = s->steps_taken + 1;
  s->scale_used = s->scaler.scale;
}

CUTRAIN_HD inline void step_finish(const LossScalerConfig& c, StepState* s) {
  s->scaler = loss_scaler_next(c, s->scaler, s->skip != 0);
  if (s->scaler.consecutive_skips > s->peak_skips) s->peak_skips = s->scaler.consecutive_skips;
  if (!s->skip) s->steps_taken++;
  s->t = s->steps_taken + 1;
  s->inv_scale = float(div_rn(1.0, s->scaler.scale));
}

CUTRAIN_HD inline void step_set_lr(StepState* s, double lr) { s->lr = lr; }

// backward's seed for a micro-batch: the loss scale times its share of the batch's mean loss.
CUTRAIN_HD inline float loss_seed(const StepState& s, double share) {
  return float(mul_rn(s.scaler.scale, share));
}

// acc += x * w, in double: a step's loss over its micro-batches (x is the micro-batch's mean
// loss, f32, or f64 in a double-precision CPU run; w its share of the batch).
template <typename X> CUTRAIN_HD inline void scalar_accumulate(const X* x, double w, double* acc) {
  *acc = add_rn(*acc, mul_rn(double(*x), w));
}

// --- CPU (host pointers): the functions above, for the tests to compare with the GPU ---
void step_decide_cpu(int P, const int32_t* flags, StepState* s);
void step_finish_cpu(const LossScalerConfig& c, StepState* s);
void step_set_lr_cpu(StepState* s, double lr);
void loss_seed_cpu(const StepState* s, double share, float* seed);
template <typename X> void scalar_accumulate_cpu(const X* x, double w, double* acc);

// --- GPU (CUDA builds only; device pointers; one thread each, queued on stream) ---
// Each is one launch of one thread, moving a few bytes.
void step_decide_gpu(int P, const int32_t* flags, StepState* s, cudaStream_t stream);
inline LaunchCost step_decide_gpu_cost(int P) {  // the P flags read, the state read and written
  return {"step_decide", 1, nbytes(P, sizeof(int32_t)) + 2.0 * sizeof(StepState), double(P)};
}
void step_finish_gpu(const LossScalerConfig& c, StepState* s, cudaStream_t stream);
inline LaunchCost step_finish_gpu_cost() {
  return {"step_finish", 1, 2.0 * sizeof(StepState), 4};
}
void step_set_lr_gpu(StepState* s, double lr, cudaStream_t stream);
inline LaunchCost step_set_lr_gpu_cost() { return {"step_set_lr", 1, sizeof(double), 0}; }
void loss_seed_gpu(const StepState* s, double share, float* seed, cudaStream_t stream);
inline LaunchCost loss_seed_gpu_cost() {  // the scale read, the seed written
  return {"loss_seed", 1, sizeof(double) + sizeof(float), 1};
}
void scalar_accumulate_gpu(const float* x, double w, double* acc, cudaStream_t stream);
inline LaunchCost scalar_accumulate_gpu_cost() {  // x read, acc read and written
  return {"scalar_accumulate", 1, sizeof(float) + 2.0 * sizeof(double), 2};
}

}  // namespace cutrain
