// Trainer: construction and the training step. The state kept in checkpoints is handled in
// trainer_state.cpp.
#include "train/trainer.h"

#include <chrono>
#include <cmath>

#include "kernels/check.h"
#include "train/dataset.h"

namespace cutrain {

LossScalerConfig loss_scaler_config(DType dtype) {
  LossScalerConfig c;  // 2^16, x2 after 2000 clean steps, x0.5 on overflow, [1, 2^24]
  if (dtype != DType::f16) {
    c.dynamic = false;  // fp32 gradients do not underflow: no scaling
    c.init = 1;
  }
  return c;
}

Trainer::Trainer(const TrainConfig& cfg, const RunDevice& device) : cfg_(cfg), device_(device) {
  validate_config(cfg_);
  CHECK(cfg_.size > 0 && cfg_.classes > 0 && !cfg_.mean.empty() && !cfg_.model_text.empty() &&
            cfg_.warmup >= 0 && cfg_.pad >= 0,
        "Trainer: the configuration is not resolved (call resolve_config first)");
  CHECK(device_.device == Device::cpu,
        "Trainer: only the CPU has kernels for every op in this build");
  norm_ = Normalization{cfg_.mean, cfg_.std};

  train_ = open_source(cfg_.train, train_image_spec(cfg_), cfg_.limit_train);
  if (!cfg_.val.empty()) val_ = open_source(cfg_.val, eval_image_spec(cfg_), cfg_.limit_val);
  CHECK(train_->size() >= cfg_.batch,
        "--batch " << cfg_.batch << " is larger than the " << train_->size()
                   << " training images: an epoch would have no full batch");
  steps_per_epoch_ = train_->size() / cfg_.batch;  // the last partial batch is dropped

  ModelOptions mo;
  mo.H = mo.W = cfg_.size;
  mo.C = cfg_.channels;
  mo.classes = cfg_.classes;
  mo.dtype = device_.dtype;
  mo.seed = cfg_.seed;
  model_ = build_model(parse_model_spec(cfg_.model_text, cfg_.model), mo);
  optimizer_ = make_optimizer(cfg_.optimizer, model_->parameters(), cfg_.lr, cfg_.momentum,
                              cfg_.wd);
  scaler_ = std::make_unique<LossScaler>(loss_scaler_config(device_.dtype));

  schedule_.kind = cfg_.schedule;
  schedule_.base_lr = cfg_.lr;
  schedule_.total_steps = total_steps();
  schedule_.warmup_steps =
      std::min(total_steps() - 1, int64_t(std::llround(cfg_.warmup * double(steps_per_epoch_))));
  schedule_.final_fraction = 0;
  validate_schedule(schedule_);
}

Trainer::~Trainer() = default;

void Trainer::start_loader() {
  SamplerConfig sc;
  sc.num_samples = train_->size();
  sc.batch_size = cfg_.batch;
  sc.seed = cfg_.seed;
  sc.shuffle = true;
  sc.last_batch = LastBatch::drop;
  LoaderConfig lc;
  lc.threads = cfg_.threads;
  lc.strict = cfg_.strict;
  lc.tracer = tracer;
  if (!cfg_.out.empty()) lc.bad_files_path = cfg_.out + "/bad_files.txt";
  loader_ = std::make_unique<Loader>(train_, sc, lc, cursor_);
}

LoaderStats Trainer::loader_stats() const { return loader_ ? loader_->stats() : LoaderStats{}; }

StepResult Trainer::step() {
  if (!loader_) start_loader();
  TraceSpan span(tracer, "step", "train");
  StepResult r;
  r.step = step_;

  // 1. The next batch, in sampler order: (n,S,S,C) uint8 pixels and n labels.
  const auto wait_start = std::chrono::steady_clock::now();
  const Batch batch = loader_->next();
  r.data_wait_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
  r.batch = batch.where;
  r.images = batch.n;
  r.lr = optimizer_->lr = lr_at(schedule_, step_);
  r.loss_scale = scaler_->scale();

  // 2. Forward and backward, one micro-batch at a time; the gradients accumulate (+=).
  const int S = cfg_.size, C = cfg_.channels;
  const size_t image_bytes = size_t(S) * size_t(S) * size_t(C);
  const int micro = cfg_.batch / cfg_.accum;
  for (int begin = 0; begin < batch.n; begin += micro) {
    const int n = std::min(micro, batch.n - begin);
    const double share = double(n) / double(batch.n);  // of the batch's mean loss
    Tape tape;
    VarPtr x;
    {
      TraceSpan s(tracer, "input", "train");
      x = make_var(input_tensor(batch.images + size_t(begin) * image_bytes, n, S, C, norm_,
                                device_.dtype));                                // (n,S,S,C)
    }
    const Tensor labels = Tensor::from_ints(
        std::vector<int32_t>(batch.labels + begin, batch.labels + begin + n), {n});
    VarPtr logits, loss;
    {
      TraceSpan s(tracer, "forward", "train");
      logits = model_->forward(tape, x, true);                                  // (n,classes)
      loss = softmax_cross_entropy(tape, logits, labels, cfg_.label_smoothing);  // (1) fp32
    }
    {
      TraceSpan s(tracer, "backward", "train");
      tape.backward(loss, r.loss_scale * share);
    }
    // Read back at once: free on the CPU. On a GPU this would stall the stream every step;
    // there the loss and accuracy stay on the device and are read every few steps.
    r.loss += loss->value.item() * share;
    r.correct += top1_correct(logits->value, labels);
  }
  if (after_backward) after_backward(*this);

  // 3. The update, unless some gradient is inf/NaN: then nothing changes at all.
  if (batch.n > 0) {
    TraceSpan s(tracer, "optimizer", "train");
    r.taken = optimizer_->step(r.loss_scale);
    if (!r.taken) r.overflow = optimizer_->first_nonfinite();
    // 4. The loss scale follows (throws after too many overflows in a row).
    scaler_->update(!r.taken, step_);
  }
  optimizer_->zero_grad();

  // 5. The slot goes back to the workers.
  loader_->release(batch);
  step_++;
  cursor_ = loader_->cursor();
  return r;
}

EvalResult Trainer::evaluate() {
  CHECK(val_, "evaluate: no validation data (--val)");
  TraceSpan span(tracer, "evaluate", "train");
  EvalOptions opt;
  opt.batch = std::max(cfg_.batch, 256);
  opt.threads = cfg_.threads;
  opt.strict = cfg_.strict;
  opt.norm = norm_;
  opt.tracer = tracer;
  return cutrain::evaluate(*model_, val_, opt);
}

}  // namespace cutrain
