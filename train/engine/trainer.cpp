// Trainer: a run's data, loaders, schedule and position around its Engine (train/engine/engine.h,
// the step itself). Checkpoints' metadata are in trainer_state.cpp.
#include "train/engine/trainer.h"

#include <algorithm>
#include <cmath>

#include "kernels/check.h"
#include "train/replicas/mpi.h"
#include "train/setup/resolve.h"
#include "train/setup/val_split.h"

namespace cutrain {

Trainer::Trainer(const TrainConfig& cfg, const RunDevice& device) : cfg_(cfg), device_(device) {
  validate_config(cfg_);
  CHECK(cfg_.size > 0 && cfg_.classes > 0 && !cfg_.mean.empty() && !cfg_.model_text.empty() &&
            cfg_.warmup >= 0 && cfg_.pad >= 0,
        "Trainer: the configuration is not resolved (call resolve_config first)");
  // Before anything big is allocated: a run that cannot fit is refused now, with the options
  // to lower, not ended by bad_alloc or the OOM killer later.
  memory_ = check_run_memory(cfg_, device_);
  norm_ = Normalization{cfg_.mean, cfg_.std};  // evaluation's
  train_ = open_train_source(cfg_, train_image_spec(cfg_));
  val_ = open_val_source(cfg_, eval_image_spec(cfg_));  // null without validation data
  USER_CHECK(train_->size() >= cfg_.batch,
        "--batch " << cfg_.batch << " is larger than the " << train_->size()
                   << " training images: an epoch would have no full batch");
  steps_per_epoch_ = train_->size() / cfg_.batch;  // the last partial batch is dropped
  fingerprint_ = fingerprint_of(*train_);
  fingerprint_json_ = fingerprint_.to_json();  // once: each checkpoint keeps it
  balance_ = class_balance(cfg_.balance, *train_, cfg_.classes);  // --balance (setup/balance.h)
  engine_ = std::make_unique<Engine>(cfg_, device_, balance_);
  engine_->after_backward = [this] {
    if (after_backward) after_backward(*this);
  };
  engine_->on_shard = [this](int r, const Batch& b) {
    if (on_shard) on_shard(r, b);
  };
  engine_->on_forward_backward = [this](int rank) {
    if (on_forward_backward) on_forward_backward(rank);
  };
  engine_->notice = [this](const std::string& line) {
    if (notice) notice(line);
  };

  schedule_.kind = cfg_.schedule;
  schedule_.base_lr = cfg_.lr;
  schedule_.total_steps = total_steps();
  schedule_.warmup_steps =
      std::min(total_steps() - 1, int64_t(std::llround(cfg_.warmup * double(steps_per_epoch_))));
  schedule_.final_fraction = 0;
  validate_schedule(schedule_);
}

Trainer::~Trainer() = default;

int Trainer::loaders_here() const {
  return replicas() * (device_.mpi ? device_.mpi->local_size() : 1);
}

void Trainer::start_loaders() {
  const int R = replicas();  // in this process
  const int world = engine_->world();
  // The decode threads are shared out among the loaders of this machine's replicas (those of
  // this process, and under mpirun the processes beside it).
  const int threads = run_decode_threads(cfg_.threads, device_, loaders_here());
  for (int r = 0; r < R; r++) {
    Replica* rep = &engine_->replica(r);
    const OnDevice on(rep->lane->context());  // a GPU loader's stream and memory
    SamplerConfig sc;
    sc.num_samples = train_->size();
    sc.batch_size = cfg_.batch;
    sc.seed = cfg_.seed;
    sc.shuffle = true;
    sc.last_batch = LastBatch::drop;
    sc.replicas = world;  // rank r reads shard r of every batch
    sc.rank = rep->rank;
    if (cfg_.balance == "sampler") sc.labels = balance_.labels;  // class-balanced epochs
    LoaderConfig lc;
    lc.threads = threads;
    lc.strict = cfg_.strict;
    // Under mpirun rank 0 names the bad files of every rank, its own too, at each epoch's end
    // (run/run.cpp), each once: the loaders only list theirs in their files. (A loader naming
    // its own as it finds them would name again a file another rank named an epoch before,
    // or one it read ahead past the run's last step.)
    if (device_.mpi) lc.print_bad = 0;
    lc.tracer = tracer;
    if (world > 1) lc.label = "replica " + std::to_string(rep->rank);  // its own trace rows
    if (rep->lane->where() == Device::cuda) lc.gpu = rep->lane->device();
    if (!cfg_.out.empty())
      lc.bad_files_path = cfg_.out + (world > 1 ? "/bad_files.replica" + std::to_string(rep->rank) +
                                                  ".txt"
                                            : "/bad_files.txt");
    rep->loader = std::make_unique<Loader>(train_, sc, lc, cursor_);
  }
}

std::string Trainer::threads_description() const {
  const int loaders = loaders_here();
  const std::string each = loaders > 1 ? " each" : "";
  std::string d = "threads: " + std::to_string(run_decode_threads(cfg_.threads, device_, loaders)) +
                  " decoding" + each;
  if (device_.device == Device::cpu)
    d += ", " + std::to_string(engine_->compute_threads()) + " computing" + each + " (--threads, "
         "--compute-threads)";
  else
    d += " (--threads)";
  return d;
}

LoaderStats Trainer::loader_stats() const {
  const Loader* l = engine_->replica(0).loader.get();
  return l ? l->stats() : LoaderStats{};
}

std::vector<std::pair<int, BadFile>> Trainer::bad_files() const {
  std::vector<std::pair<int, BadFile>> out;
  for (int r = 0; r < replicas(); r++) {
    const Replica& rep = engine_->replica(r);
    if (rep.loader)
      for (BadFile& b : rep.loader->bad_files()) out.emplace_back(rep.rank, std::move(b));
  }
  return out;
}

void Trainer::launch() {
  CHECK(!engine_->broken(), "Trainer: an earlier step failed partway (a replica, or a GPU "
                            "step), so the model's state is unknown; restart from the last "
                            "checkpoint");
  const OnDevice on = engine_->on_replica(0);
  if (!engine_->replica(0).loader) start_loaders();
  engine_->tracer = tracer;
  // At most kMaxInFlight steps in flight: the new step's record slot is the oldest one's.
  if (engine_->in_flight() >= size_t(kMaxInFlight)) engine_->collect(1, done_);
  StepResult r;  // the host part of the result: the rest comes with the step's records
  r.step = step_;
  r.lr = lr_at(schedule_, step_);
  engine_->launch(r);
  step_++;
  cursor_ = engine_->replica(0).loader->cursor();
  if (engine_->world() > 1 && cfg_.check_replicas > 0 && step_ % cfg_.check_replicas == 0) {
    const std::string diff = engine_->replicas_difference();  // waits: a debug option
    CHECK(diff.empty(), "--check-replicas: after step " << step_ - 1 << ", " << diff
                                                        << ": the replicas have drifted apart");
  }
}

std::vector<StepResult> Trainer::results(bool wait) {
  {
    const OnDevice on = engine_->on_replica(0);
    engine_->collect(wait ? SIZE_MAX : 0, done_);
  }
  std::vector<StepResult> out(done_.begin(), done_.end());
  done_.clear();
  return out;
}

size_t Trainer::pending() const { return done_.size() + engine_->in_flight(); }

StepResult Trainer::step() {
  CHECK(pending() == 0, "Trainer::step: " << pending() << " launched steps are pending; "
                                          "collect them with results() first");
  launch();
  std::vector<StepResult> r = results(true);
  CHECK(r.size() == 1, "Trainer::step: " << r.size() << " results for one step");
  return r[0];
}

EvalResult Trainer::evaluate(bool averaged) {
  USER_CHECK(val_, "evaluate: no validation data (--val)");
  TraceSpan span(tracer, "evaluate", "train");
  engine_->interrupt_clock();  // the next step's idle time is not the evaluation's
  EvalOptions opt;
  opt.batch = std::max(cfg_.batch, 256);
  opt.threads = run_decode_threads(cfg_.threads, device_, 1);  // the training loaders wait
  opt.strict = cfg_.strict;
  opt.norm = norm_;
  opt.tracer = tracer;
  opt.tta_flip = cfg_.tta == "flip";
  // Every replica holds the same model (its BatchNorm statistics too: Engine::update_batchnorm).
  // Under mpirun rank 0 evaluates for all.
  if (device_.mpi && !device_.mpi->root()) return EvalResult{};
  const OnDevice on = engine_->on_replica(0);  // on a GPU: after the steps, in order
  return cutrain::evaluate(averaged ? engine_->averaged_model() : engine_->model(), val_, opt);
}

}  // namespace cutrain
