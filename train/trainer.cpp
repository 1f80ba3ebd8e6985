// Trainer: construction and the training step. The state kept in checkpoints is handled in
// trainer_state.cpp, what keeps replicas alike and describes them in trainer_replicas.cpp.
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <thread>

#include "kernels/check.h"
#include "train/balance.h"
#include "train/dataset.h"
#include "train/trainer_gpu.h"

namespace cutrain {

// Buckets smaller than this take the next layer in too (train/grad_buckets.h). A ring round
// costs a few thread hand-offs (tens of microseconds on a CPU, ~10 us of launches and events on
// a GPU), so a bucket should carry at least a few hundred KiB for the copies to dominate.
constexpr size_t kBucketMinBytes = size_t(256) << 10;

LossScalerConfig loss_scaler_config(DType dtype, int max_skips) {
  LossScalerConfig c;  // 2^16, x2 after 2000 clean steps, x0.5 on overflow, [1, 2^24]
  c.max_consecutive_skips = max_skips;
  if (dtype != DType::f16) {
    c.dynamic = false;  // fp32 gradients do not underflow: no scaling
    c.init = 1;
    // ... and an inf/NaN gradient is no scale too large, so no later step can do better:
    // the run stops at the first (--max-skips is fp16's).
    c.max_consecutive_skips = 1;
  }
  return c;
}

Trainer::Trainer(const TrainConfig& cfg, const RunDevice& device) : cfg_(cfg), device_(device) {
  validate_config(cfg_);
  CHECK(cfg_.size > 0 && cfg_.classes > 0 && !cfg_.mean.empty() && !cfg_.model_text.empty() &&
            cfg_.warmup >= 0 && cfg_.pad >= 0,
        "Trainer: the configuration is not resolved (call resolve_config first)");
  norm_ = InputNorm(Normalization{cfg_.mean, cfg_.std});  // [input]
  const int R = replica_count(cfg_);
  // Before anything big is allocated: a run that cannot fit is refused now, with the options
  // to lower, not ended by bad_alloc or the OOM killer later.
  memory_ = check_run_memory(cfg_, device_);
  // Each replica's context: on a GPU its lane's compute stream and device (the model, the
  // optimizer state, the buckets and every kernel of the replica go there).
  const GpuContext kernels{nullptr, parse_conv_impl(cfg_.conv), parse_linear_impl(cfg_.linear)};
  std::vector<GpuContext> contexts(size_t(R), kernels);
  if (device_.device == Device::cuda) {
    std::vector<int> devices = gpu_ordinals(cfg_.devices);
    if (devices.empty()) devices.assign(size_t(R), device_.gpu);
    gpu_ = std::make_unique<Gpu>();
    for (int r = 0; r < R; r++) {
      const int d = devices[size_t(r)];
      USER_CHECK(d < gpu_count(), (cfg_.devices.empty() ? "--device cuda" : "--devices " + cfg_.devices)
                                 << ": GPU " << d << " does not exist (" << gpu_count()
                                 << " usable)");
      const DeviceGuard on(d);
      gpu_->lanes.push_back(std::make_unique<Gpu::Lane>(d));
      contexts[size_t(r)].stream = gpu_->lane(r).compute.get();
      contexts[size_t(r)].device = d;
    }
    if (R > 1) gpu_->ring = std::make_unique<DeviceRing>(devices);
  }

  train_ = open_train_source(cfg_, train_image_spec(cfg_));
  val_ = open_val_source(cfg_, eval_image_spec(cfg_));  // null without validation data
  USER_CHECK(train_->size() >= cfg_.batch,
        "--batch " << cfg_.batch << " is larger than the " << train_->size()
                   << " training images: an epoch would have no full batch");
  steps_per_epoch_ = train_->size() / cfg_.batch;  // the last partial batch is dropped
  fingerprint_ = fingerprint_of(*train_);
  fingerprint_json_ = fingerprint_.to_json();  // once: each checkpoint keeps it
  balance_ = class_balance(cfg_.balance, *train_, cfg_.classes);  // --balance (train/balance.h)

  ModelOptions mo;
  mo.H = mo.W = cfg_.size;
  mo.C = cfg_.channels;
  mo.classes = cfg_.classes;
  mo.dtype = device_.dtype;
  mo.seed = cfg_.seed;
  mo.device = device_.device;
  const ModelSpec spec = parse_model_spec(cfg_.model_text, cfg_.model);
  // Every replica builds the same model from the same seed: identical bits, no broadcast.
  for (int r = 0; r < R; r++) {
    auto rep = std::make_unique<Replica>();
    rep->rank = r;
    rep->context = contexts[size_t(r)];
    const GpuContextScope on(rep->context);
    rep->model = build_model(spec, mo);
    rep->optimizer = make_optimizer(cfg_.optimizer, rep->model->parameters(), cfg_.lr,
                                    cfg_.momentum, cfg_.wd);
    if (!balance_.weights.empty())  // --balance loss: on the replica's device, once
      rep->class_weight = Tensor::from_doubles(balance_.weights, {cfg_.classes},
                                               acc_dtype(device_.dtype))
                              .to(device_.device);
    if (R > 1)
      rep->grads = std::make_unique<GradBuckets>(rep->model->parameters(), kBucketMinBytes);
    replicas_.push_back(std::move(rep));
  }
  if (R > 1 && !gpu_) {  // CPU replicas: a thread each, and a comm thread each on the Ring
    ring_ = std::make_unique<Ring>(R);
    for (auto& rep : replicas_)
      rep->comm = std::make_unique<CommThread>(*ring_, rep->rank, *rep->grads);
    threads_ = std::make_unique<ReplicaThreads>(R, [this](const std::string& why) {
      ring_->abort(why);
    });
  }
  scaler_ = std::make_unique<LossScaler>(loss_scaler_config(device_.dtype, cfg_.max_skips));
  if (gpu_) {
    const int P = int(model().parameters().size());
    for (int r = 0; r < R; r++) {
      const GpuContextScope on = on_replica(r);
      Gpu::Lane& lane = gpu_->lane(r);
      lane.step = std::make_unique<DeviceStep>(scaler_->config(), P);
      lane.step->reset(scaler_->state(), 0);
      lane.norm = std::make_unique<InputNorm>(norm_.values(), Device::cuda);  // [input]
      if (R > 1)
        for (size_t k = 0; k < replicas_[size_t(r)]->grads->size(); k++)
          lane.bucket_ready.emplace_back(false);
    }
    if (R > 1) gpu_->marked.assign(replicas_[0]->grads->size(), 0);
  }

  schedule_.kind = cfg_.schedule;
  schedule_.base_lr = cfg_.lr;
  schedule_.total_steps = total_steps();
  schedule_.warmup_steps =
      std::min(total_steps() - 1, int64_t(std::llround(cfg_.warmup * double(steps_per_epoch_))));
  schedule_.final_fraction = 0;
  validate_schedule(schedule_);
}

Trainer::~Trainer() {
  // The comm threads use the ring and the buckets: stop them first.
  for (auto& rep : replicas_) rep->comm.reset();
  // Let the GPU finish what was queued before the loaders, tensors and streams go away. Never
  // throw from here (a destructor may run while an earlier CUDA error unwinds the stack).
  if (gpu_) {
    for (auto& lane : gpu_->lanes) {
      try {
        lane->timeline.reset();  // flushes its spans
        lane->compute.synchronize();
        lane->readback.synchronize();  // the last records' copies into pinned memory
      } catch (...) {
      }
    }
    try {
      gpu_->ring.reset();  // waits for the comm streams, which read the gradient buffers
    } catch (...) {
    }
  }
}

void Trainer::start_loaders() {
  const int R = replicas();
  // The decode threads are shared out among the replicas' loaders; R = 1 keeps --threads.
  int threads = cfg_.threads;
  if (R > 1) {
    const int all = threads > 0 ? threads : std::max(1, int(std::thread::hardware_concurrency()) - 1);
    threads = std::max(1, all / R);
  }
  for (auto& rep : replicas_) {
    const GpuContextScope on(rep->context);  // a GPU loader's stream and memory: its device
    SamplerConfig sc;
    sc.num_samples = train_->size();
    sc.batch_size = cfg_.batch;
    sc.seed = cfg_.seed;
    sc.shuffle = true;
    sc.last_batch = LastBatch::drop;
    sc.replicas = R;
    sc.rank = rep->rank;
    if (cfg_.balance == "sampler") sc.labels = balance_.labels;  // class-balanced epochs
    LoaderConfig lc;
    lc.threads = threads;
    lc.strict = cfg_.strict;
    lc.tracer = tracer;
    if (R > 1) lc.label = "replica " + std::to_string(rep->rank);  // its own trace rows
    if (gpu_) lc.gpu = gpu_->lane(rep->rank).device;
    if (!cfg_.out.empty())
      lc.bad_files_path = cfg_.out + (R > 1 ? "/bad_files.replica" + std::to_string(rep->rank) +
                                                  ".txt"
                                            : "/bad_files.txt");
    rep->loader = std::make_unique<Loader>(train_, sc, lc, cursor_);
  }
}

LoaderStats Trainer::loader_stats() const {
  const Loader* l = replicas_[0]->loader.get();
  return l ? l->stats() : LoaderStats{};
}

void Trainer::forward_backward(Replica& rep, int images, double loss_scale) {
  const int R = replicas();
  const Batch& batch = rep.batch;
  rep.loss = 0;
  rep.correct = 0;
  if (rep.comm)
    rep.comm->start();  // CPU replicas: arms the buckets, wakes the comm thread
  else if (rep.grads)
    rep.grads->arm();   // GPU replicas
  const int micro = cfg_.batch / R / cfg_.accum;
  for (int begin = 0; begin < batch.n; begin += micro) {
    const int n = std::min(micro, batch.n - begin);
    // This micro-batch's share of the global batch's mean loss, times R: the all-reduce
    // averages over the R replicas (sum, then 1/R). With R = 1: n / batch.n.
    const double share = double(n) * R / double(images);
    Tape tape;
    // Only the last micro-batch completes the gradients: only its backward sends buckets.
    if (rep.grads && begin + micro >= batch.n)
      tape.grad_ready = [this, &rep](const Var& v) {
        if (rep.comm)
          rep.comm->on_grad_ready(v);
        else if (const int k = rep.grads->ready(v); k >= 0)
          bucket_ready_gpu(rep, k);
      };
    VarPtr x;
    Tensor labels;
    {
      TraceSpan s(tracer, "input", "train");
      auto [images_t, labels_t] = micro_batch(rep, begin, n);
      x = make_var(images_t);  // (n,S,S,C)
      labels = labels_t;       // (n)
    }
    VarPtr logits, loss;
    {
      TraceSpan s(tracer, "forward", "train");
      logits = rep.model->forward(tape, x, true);                               // (n,classes)
      // (1) fp32; with --balance loss each row weighted by its class (train/balance.h)
      loss = softmax_cross_entropy(tape, logits, labels, cfg_.label_smoothing, rep.class_weight);
    }
    if (gpu_) {
      // The seed, the loss and the count stay on the device (trainer_gpu.cpp).
      TraceSpan s(tracer, "backward", "train");
      backward_gpu(rep, tape, loss, share);
      record_metrics_gpu(rep, loss, logits, labels, double(n) / double(images));
      continue;
    }
    {
      TraceSpan s(tracer, "backward", "train");
      tape.backward(loss, loss_scale * share);
    }
    // Read back at once: free on the CPU (a GPU keeps them on the device, above).
    rep.loss += loss->value.item() * (double(n) / double(images));
    rep.correct += top1_correct(logits->value, labels);
  }
  if (rep.comm) {
    TraceSpan s(tracer, "all-reduce wait", "train");
    rep.exposed_s = rep.comm->finish();  // buckets backward never reached are sent now
    rep.comm_s = rep.comm->busy_seconds();
  } else if (rep.grads) {
    for (int k : rep.grads->finish()) bucket_ready_gpu(rep, k);  // GPU replicas: the same
  }
}

void Trainer::next_shards(StepResult& r) {
  const auto wait_start = std::chrono::steady_clock::now();
  r.images = 0;
  for (auto& rep : replicas_) {
    const GpuContextScope on(rep->context);  // on a GPU: its compute stream waits for the copy
    rep->batch = rep->loader->next(rep->context.stream);
    r.images += rep->batch.n;
    if (on_shard) on_shard(rep->rank, rep->batch);
  }
  r.data_wait_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
  r.batch = replicas_[0]->batch.where;
}

// [input] the one conversion of train, eval and predict (train/batch_input.h): on a GPU the
// crop, flip and normalisation of the uncut images the loader copied there, in one kernel.
std::pair<Tensor, Tensor> Trainer::micro_batch(const Replica& rep, int begin, int n) const {
  const InputNorm& norm = gpu_ ? *gpu_->lane(rep.rank).norm : norm_;
  ModelInput in = model_input(rep.batch, begin, n, norm, device_.dtype, device_.device);
  return {std::move(in.x), std::move(in.labels)};
}

void Trainer::launch() {
  CHECK(!broken_, "Trainer: an earlier step failed partway (a replica, or a GPU step), so "
                  "the model's state is unknown; restart from the last checkpoint");
  const GpuContextScope on = on_device();
  bn_averaged_ = false;  // the step moves every replica's statistics its own way
  if (!replicas_[0]->loader) start_loaders();
  if (gpu_) {
    // The host part of the result: the rest comes with the step's record (collect_gpu).
    StepResult r;
    r.step = step_;
    r.lr = lr_at(schedule_, step_);
    try {
      launch_gpu(r);
    } catch (...) {  // gradients half accumulated, a batch not released: no way back
      broken_ = true;
      throw;
    }
  } else {
    done_.push_back(step_cpu());
  }
}

std::vector<StepResult> Trainer::results(bool wait) {
  if (gpu_) {
    const GpuContextScope on = on_device();
    collect_gpu(wait ? SIZE_MAX : 0);
  }
  std::vector<StepResult> out(done_.begin(), done_.end());
  done_.clear();
  return out;
}

size_t Trainer::pending() const { return done_.size() + (gpu_ ? gpu_->launched.size() : 0); }

StepResult Trainer::step() {
  CHECK(pending() == 0, "Trainer::step: " << pending() << " launched steps are pending; "
                                          "collect them with results() first");
  launch();
  std::vector<StepResult> r = results(true);
  CHECK(r.size() == 1, "Trainer::step: " << r.size() << " results for one step");
  return r[0];
}

StepResult Trainer::step_cpu() {
  TraceSpan span(tracer, "step", "train");
  const int R = replicas();
  StepResult r;
  r.step = step_;

  // 1. Every replica's shard of the next global batch.
  next_shards(r);
  const int images = r.images;
  r.lr = lr_at(schedule_, step_);
  for (auto& rep : replicas_) rep->optimizer->lr = r.lr;
  r.loss_scale = scaler_->scale();

  // 2. Forward and backward, one micro-batch at a time; the gradients accumulate (+=). With
  // replicas: all at once, each on its thread, the gradients averaged as backward goes.
  auto run = [&](const std::function<void(int)>& f) {
    try {
      threads_->run(f);
    } catch (...) {
      broken_ = true;
      throw;
    }
  };
  if (R == 1)
    forward_backward(*replicas_[0], images, r.loss_scale);
  else
    run([&](int i) { forward_backward(*replicas_[size_t(i)], images, r.loss_scale); });
  for (auto& rep : replicas_) {  // in rank order: the same sums every run
    r.loss += rep->loss;
    r.correct += rep->correct;
    r.comm_s += rep->comm_s / R;
    r.comm_exposed_s += rep->exposed_s / R;
  }
  if (after_backward) after_backward(*this);

  // 3. The update, unless some gradient is inf/NaN: then nothing changes at all, on any
  // replica.
  if (images > 0) {
    TraceSpan s(tracer, "optimizer", "train");
    if (R == 1) {
      r.taken = replicas_[0]->optimizer->step(r.loss_scale);
      if (!r.taken) r.overflow = replicas_[0]->optimizer->first_nonfinite();
    } else {
      std::vector<char> finite(size_t(R), 1);
      bool any_bad = false;
      run([&](int i) {
        Optimizer& opt = *replicas_[size_t(i)]->optimizer;
        finite[size_t(i)] = opt.all_finite(r.loss_scale);
        const bool bad = ring_->any(i, !finite[size_t(i)]);  // the OR over the replicas
        if (i == 0) any_bad = bad;
        if (!bad) opt.apply(r.loss_scale);
      });
      r.taken = !any_bad;
      std::vector<char> overflowed(size_t(R), 0);
      for (int i = 0; i < R; i++) overflowed[size_t(i)] = !finite[size_t(i)];
      r.overflow = overflow_name(overflowed, [&](int i) {
        return replicas_[size_t(i)]->optimizer->first_nonfinite();
      });
    }
    // 4. The loss scale follows (throws after too many overflows in a row).
    update_scaler(r);
  }
  r.scale_after = scaler_->scale();
  for (auto& rep : replicas_) {
    if (rep->grads)
      rep->grads->zero();  // one memset per flat buffer
    else
      rep->optimizer->zero_grad();
  }

  // 5. The slots go back to the workers.
  for (auto& rep : replicas_) rep->loader->release(rep->batch);
  step_++;
  cursor_ = replicas_[0]->loader->cursor();
  if (R > 1 && cfg_.check_replicas > 0 && step_ % cfg_.check_replicas == 0) {
    const std::string diff = replicas_difference();
    CHECK(diff.empty(), "--check-replicas: after step " << step_ - 1 << ", " << diff
                                                        << ": the replicas have drifted apart");
  }
  return r;
}

void Trainer::update_scaler(const StepResult& r) {
  try {
    scaler_->update(!r.taken, r.step, r.overflow);
  } catch (const UserError& e) {
    broken_ = true;  // the step is half done (gradients not cleared, the batch not released)
    // Weights that are themselves inf/NaN (finite gradients times a huge rate made them so)
    // are the cause to name; replica 0's stand for all, which hold the same bits.
    for (const VarPtr& p : model().parameters())
      if (first_nonfinite(p->value) >= 0)
        throw UserError(std::string(e.what()) + ". The weights of " + p->name +
                        " are themselves inf/NaN: an update before step " +
                        std::to_string(r.step) + " made them so");
    throw;
  }
}

EvalResult Trainer::evaluate() {
  USER_CHECK(val_, "evaluate: no validation data (--val)");
  TraceSpan span(tracer, "evaluate", "train");
  EvalOptions opt;
  opt.batch = std::max(cfg_.batch, 256);
  opt.threads = cfg_.threads;
  opt.strict = cfg_.strict;
  opt.norm = norm_.values();
  opt.tracer = tracer;
  average_batchnorm();  // every replica evaluates the same model
  const GpuContextScope on = on_device();  // on a GPU: queued after the steps, in order
  return cutrain::evaluate(*replicas_[0]->model, val_, opt);
}

}  // namespace cutrain
