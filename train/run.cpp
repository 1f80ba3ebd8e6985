#include "train/run.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "data/atomic_file.h"
#include "kernels/check.h"
#include "nn/checkpoint.h"
#include "train/dataset.h"
#include "train/device.h"
#include "train/signals.h"
#include "train/trainer.h"

namespace cutrain {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void write_text_file(const std::string& path, const std::string& text) {
  write_atomically(path, [&](const std::string& tmp) {
    std::ofstream f(tmp, std::ios::binary);
    f << text;
    f.close();
    CHECK(f.good(), "cannot write " << tmp);
  });
}

// The checkpoint --resume continues from, and the configuration of the resumed run.
Checkpoint load_resume_point(TrainConfig& cfg, const std::vector<std::string>& given, FILE* out) {
  const std::string dir = cfg.resume;
  const std::string path = newest_checkpoint(dir);
  CHECK(!path.empty(), "--resume " << dir << ": no complete checkpoint there");
  Checkpoint c = read_checkpoint(path);
  const TrainConfig saved = config_from_json_text(c.config_json, path);
  std::vector<std::string> keys = given;
  cfg = resume_config(saved, cfg, keys);
  // Checkpoints go on where they were unless --out says otherwise.
  if (std::find(given.begin(), given.end(), "out") == given.end()) cfg.out = dir;
  cfg.resume = dir;
  std::fprintf(out, "resuming from %s: step %lld, epoch %lld, next batch %s\n", path.c_str(),
               (long long)c.step, (long long)c.epoch, cursor_to_string(c.cursor).c_str());
  return c;
}

// "epoch 3/10  train loss 0.4102  acc 85.21%  |  val loss 0.3812  top-1 86.90%  top-5 99.60%  |  12.3 s"
void print_epoch(FILE* out, int epoch, int epochs, double loss, double acc, const EvalResult* e,
                 double seconds, double images_per_s) {
  std::fprintf(out, "epoch %d/%d  train loss %.4f  acc %.2f%%", epoch, epochs, loss, 100 * acc);
  if (e)
    std::fprintf(out, "  |  val loss %.4f  top-1 %.2f%%  top-5 %.2f%%", e->loss,
                 100 * e->top1_accuracy(), 100 * e->top5_accuracy());
  std::fprintf(out, "  |  %.1f s, %.0f images/s\n", seconds, images_per_s);
  std::fflush(out);
}

}  // namespace

RunSummary run_training(TrainConfig cfg, const std::vector<std::string>& given, FILE* out) {
  const auto t_start = Clock::now();
  RunSummary sum;

  // ---- the configuration ---------------------------------------------------------------
  Checkpoint resume_point;
  const bool resuming = !cfg.resume.empty();
  if (resuming) resume_point = load_resume_point(cfg, given, out);
  const std::vector<std::string> notes = resolve_config(cfg);
  const RunDevice device = choose_device(cfg.device, cfg.precision);
  if (!device.notice.empty()) std::fprintf(stderr, "%s\n", device.notice.c_str());
  if (!resuming) {
    std::vector<std::string> skipped;
    const std::string existing = newest_checkpoint(cfg.out, &skipped);
    CHECK(existing.empty(), "--out " << cfg.out << " holds checkpoints of an earlier run ("
                                     << existing << "): continue it with --resume " << cfg.out
                                     << ", or choose another --out");
  }
  std::filesystem::create_directories(cfg.out);
  const std::string config_text = config_to_json_text(cfg);
  write_text_file(cfg.out + "/config.json", config_text);
  std::fprintf(out, "cutrain train: %s, configuration (saved as %s/config.json):\n%s",
               device.describe().c_str(), cfg.out.c_str(), config_text.c_str());
  for (const std::string& n : notes) std::fprintf(out, "  %s\n", n.c_str());
  sum.config = cfg;

  // ---- the trainer ---------------------------------------------------------------------
  Trainer t(cfg, device);
  if (resuming) t.restore(resume_point);
  std::fputs(t.model().table().c_str(), out);
  std::fprintf(out, "data: %lld training images (%lld steps of %d per epoch, %d epochs)%s\n",
               (long long)t.train_data().size(), (long long)t.steps_per_epoch(), cfg.batch,
               cfg.epochs, cfg.val.empty() ? ", no validation data (--val)" : "");
  std::fflush(out);

  double best_top1 = -1;
  if (resuming && resume_point.scalars.count("best_top1"))
    best_top1 = resume_point.scalars.at("best_top1");
  sum.first_step = t.steps_done();

  CheckpointWriter writer(cfg.out, cfg.keep);
  auto save = [&](bool is_best, std::map<std::string, double> extra) {
    extra["best_top1"] = best_top1;
    writer.submit(t.snapshot(extra), t.steps_done(), is_best);
    sum.last_checkpoint = checkpoint_path(cfg.out, t.steps_done());
  };

  // ---- the loop ------------------------------------------------------------------------
  StopSignals signals;
  double epoch_loss = 0, epoch_correct = 0, epoch_images = 0, epoch_train_s = 0;
  int64_t log_images = 0;
  double log_loss = 0, log_correct = 0, log_s = 0;
  auto epoch_start = Clock::now();
  while (t.steps_done() < t.total_steps()) {
    const auto t_step = Clock::now();
    const StepResult r = t.step();
    const double step_s = seconds_since(t_step);
    sum.train_seconds += step_s;
    sum.losses.push_back(r.loss);
    epoch_loss += r.loss * r.images, epoch_correct += double(r.correct);
    epoch_images += r.images, epoch_train_s += step_s;
    log_loss += r.loss * r.images, log_correct += double(r.correct);
    log_images += r.images, log_s += step_s;
    if (!r.taken)
      std::fprintf(stderr, "cutrain: step %lld: inf/NaN gradient, first in %s: step skipped, "
                           "loss scale %g -> %g\n",
                   (long long)r.step, r.overflow.c_str(), r.loss_scale, t.scaler().scale());
    if (t.steps_done() % cfg.log_every == 0 && log_images > 0) {
      std::fprintf(stderr, "epoch %d  step %lld/%lld  loss %.4f  acc %.2f%%  lr %.4g  %.0f images/s\n",
                   int(r.batch.epoch) + 1, (long long)t.steps_done(), (long long)t.total_steps(),
                   log_loss / double(log_images), 100 * log_correct / double(log_images), r.lr,
                   double(log_images) / log_s);
      log_images = 0, log_loss = log_correct = log_s = 0;
    }

    const bool epoch_end = t.steps_done() % t.steps_per_epoch() == 0;
    if (epoch_end) {
      std::map<std::string, double> extra;
      EvalResult e;
      bool is_best = false;
      if (t.has_validation()) {
        e = t.evaluate();
        sum.final_eval = e;
        extra = {{"val_loss", e.loss}, {"val_top1", e.top1_accuracy()},
                 {"val_top5", e.top5_accuracy()}};
        is_best = e.top1_accuracy() > best_top1;
        if (is_best) best_top1 = e.top1_accuracy();
      }
      print_epoch(out, t.epochs_done(), cfg.epochs, epoch_loss / epoch_images,
                  epoch_correct / epoch_images, t.has_validation() ? &e : nullptr,
                  seconds_since(epoch_start), epoch_images / epoch_train_s);
      save(is_best, extra);
      epoch_loss = epoch_correct = epoch_images = epoch_train_s = 0;
      epoch_start = Clock::now();
    } else if (signals.received() ||
               (cfg.checkpoint_every > 0 && t.steps_done() % cfg.checkpoint_every == 0)) {
      save(false, {});
    }
    if (signals.received()) {
      writer.wait();
      std::fprintf(out, "stopped by %s after step %lld; checkpoint %s\ncontinue with: cutrain "
                        "train --resume %s\n",
                   signals.name(), (long long)t.steps_done(), sum.last_checkpoint.c_str(),
                   cfg.out.c_str());
      sum.exit_code = 128 + signals.received();
      break;
    }
  }
  writer.wait();
  sum.steps = t.steps_done();
  sum.seconds = seconds_since(t_start);
  if (sum.exit_code != 0) return sum;

  // ---- the final report ----------------------------------------------------------------
  if (sum.first_step == t.total_steps())
    std::fprintf(out, "the run was already complete (%lld steps)\n", (long long)t.steps_done());
  if (t.has_validation()) {
    if (sum.final_eval.images == 0) sum.final_eval = t.evaluate();
    std::fprintf(out, "final: %s\n%s", eval_summary(sum.final_eval).c_str(),
                 per_class_report(sum.final_eval, cfg.class_names).c_str());
  }
  std::fprintf(out, "trained %lld steps in %.1f s (%.0f images/s in the steps); checkpoints in "
                    "%s (best: %s)\n",
               (long long)(t.steps_done() - sum.first_step), sum.seconds,
               sum.train_seconds > 0
                   ? double((t.steps_done() - sum.first_step) * cfg.batch) / sum.train_seconds
                   : 0.0,
               cfg.out.c_str(), best_checkpoint_path(cfg.out).c_str());
  return sum;
}

}  // namespace cutrain
