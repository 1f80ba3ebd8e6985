// Trainer: the checkpoint's metadata around the engine's state (train/engine/engine_state.cpp has
// the tensors, the scalars and the names): the step, the epoch, the cursor, the seed, the
// configuration and the data's fingerprint, and what a restore checks of them.
#include <sstream>

#include "kernels/check.h"
#include "train/engine/trainer.h"

namespace cutrain {

Checkpoint Trainer::snapshot(const std::map<std::string, double>& extra) {
  Checkpoint c = snapshot_async(extra);
  c.complete();
  return c;
}

Checkpoint Trainer::snapshot_async(const std::map<std::string, double>& extra) {
  Checkpoint c;
  c.config_json = config_to_json_text(cfg_);
  c.step = step_;
  c.epoch = epochs_done();
  c.cursor = cursor_;
  c.seed = cfg_.seed;
  c.data_fingerprint = fingerprint_json_;
  c.scalars = extra;
  engine_->snapshot(c);  // the tensors and, pending, the step state's scalars
  return c;
}

std::string Trainer::data_change(const Checkpoint& c) const {
  if (c.data_fingerprint.empty()) return "";
  return data_difference(DataFingerprint::from_json(c.data_fingerprint, "the checkpoint"),
                         fingerprint_);
}

void Trainer::restore(const Checkpoint& c) {
  const std::string changed = data_change(c);
  USER_CHECK(changed.empty(),
             "the training data changed since the checkpoint of step "
                 << c.step << " (" << changed << "). A resumed run continues the same "
                 << "computation, so it needs the same samples in the same order: restore the "
                 << "data, or pass --allow-data-change to go on from the next epoch in a fresh "
                 << "order over the new data");
  USER_CHECK(c.step >= 0 && c.step <= total_steps(),
        "checkpoint step " << c.step << " is outside this run's " << total_steps() << " steps");
  USER_CHECK(c.cursor.epoch * steps_per_epoch_ + c.cursor.batch == c.step,
        "checkpoint cursor (" << cursor_to_string(c.cursor) << ") does not match its step "
                              << c.step << " at " << steps_per_epoch_
                              << " steps per epoch: the data or --batch changed");
  restore_state(c);
  step_ = c.step;
  cursor_ = c.cursor;
}

std::string Trainer::restore_at_next_epoch(const Checkpoint& c) {
  const std::string changed = data_change(c);
  const int64_t epoch = c.cursor.batch == 0 ? c.cursor.epoch : c.cursor.epoch + 1;
  USER_CHECK(epoch < cfg_.epochs, "the checkpoint of step " << c.step << " ends epoch " << epoch
                                      << " of " << cfg_.epochs
                                      << ": there is no next epoch to train (raise --epochs)");
  restore_state(c);
  step_ = epoch * steps_per_epoch_;
  cursor_ = SamplerCursor{epoch, 0};
  std::ostringstream os;
  os << "--allow-data-change: "
     << (!changed.empty() ? "the training data changed (" + changed + "); the run"
         : c.data_fingerprint.empty()
             ? "the checkpoint has no data fingerprint (written before they were kept); the run"
             : "the training data are the checkpoint's, but the run")
     << " goes on from epoch " << epoch + 1 << " of " << cfg_.epochs << " (step " << step_
     << ", " << steps_per_epoch_ << " steps an epoch) in a fresh order: not what an "
     << "uninterrupted run computes";
  return os.str();
}

void Trainer::restore_state(const Checkpoint& c) {
  CHECK(done_.empty(), "restore: " << done_.size() << " results not handed out");
  USER_CHECK(c.seed == cfg_.seed, "checkpoint seed " << c.seed << " differs from the run's " << cfg_.seed);
  engine_->restore(c);
  for (int r = 0; r < engine_->replicas(); r++)
    engine_->replica(r).loader.reset();  // the next step starts the loaders at the cursor
}

}  // namespace cutrain
