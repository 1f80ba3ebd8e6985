#include "train/run/reporter.h"

#include <nlohmann/json.hpp>

#include <sstream>

#include "train/report/report.h"

namespace cutrain {

namespace {
using Clock = std::chrono::steady_clock;

std::string metrics_file(const TrainConfig& c) {
  return c.metrics.empty() ? c.out + "/metrics.jsonl" : c.metrics;
}

// The event file of this process, after cutting the folder's older ones back to first_step.
std::unique_ptr<EventWriter> event_writer(const TrainConfig& c, int64_t first_step) {
  if (!c.tensorboard) return nullptr;
  trim_event_files(c.out, first_step);
  return std::make_unique<EventWriter>(c.out);
}

// A "step" record's scalars for TensorBoard (reporter.h lists them); what the device's clock
// did not measure (< 0) is left out.
std::vector<std::pair<std::string, double>> step_scalars(const StepMetrics& m, int64_t skipped) {
  std::vector<std::pair<std::string, double>> v = {
      {"train/loss", m.loss}, {"train/top1", m.accuracy}, {"train/lr", m.lr},
      {"train/skipped_steps", double(skipped)}, {"speed/images_per_s", m.images_per_s},
      {"time/data_wait_pct", m.data_wait_pct}};
  if (m.loss_scale > 0) v.emplace_back("train/loss_scale", m.loss_scale);
  for (const auto& [tag, x] : {std::pair<const char*, double>{"time/busy_pct", m.busy_pct},
                               {"time/device_wait_pct", m.device_wait_pct},
                               {"time/idle_pct", m.idle_pct}, {"time/launch_pct", m.launch_pct}})
    if (x >= 0) v.emplace_back(tag, x);
  return v;
}

// The configuration as Markdown: a code block (each line indented by four spaces).
std::string config_markdown(const TrainConfig& c) {
  std::string md;
  std::istringstream lines(config_to_json_text(c));
  for (std::string line; std::getline(lines, line);) md += "    " + line + "\n";
  return md;
}
}  // namespace

StepMetrics RunReporter::Window::take(int64_t step, int epoch, double lr, double scale,
                                      int64_t images_total, double wait_total,
                                      double sync_total) {
  const RateMeter::Rates rates = meter.update(step, images_total, wait_total, sync_total);
  StepMetrics m;
  m.step = step;
  m.epoch = epoch;
  m.loss = images ? loss / double(images) : 0;
  m.accuracy = images ? correct / double(images) : 0;
  m.lr = lr;
  m.loss_scale = scale;
  m.images_per_s = rates.images_per_s;
  m.data_wait_pct = rates.data_wait_pct;
  m.data_wait_held_pct = wait_s > 0 ? rates.data_wait_pct * held_s / wait_s : 0;
  // The device's clock (data/metrics.h: the bound and the pipeline ratio).
  const double wall = device.wall_s();
  if (wall > 0) {
    m.busy_pct = 100 * device.compute_s / wall;
    m.device_wait_pct = 100 * device.wait_s / wall;
    m.idle_pct = 100 * device.idle_s / wall;
    if (device.launch_s > 0) m.launch_pct = 100 * device.launch_s / wall;
    m.bound = run_bound(device);
    m.pipeline_ratio = pipeline_ratio(wall, loader_s, device.compute_s);
    m.loader_pct = 100 * loader_s / wall;
  }
  m.sync_bn_pct = sync_total >= 0 ? rates.sync_pct : -1;
  m.time_s = rates.elapsed_s;
  eta_s = rates.eta_s;
  loss = correct = 0;
  images = steps = 0;
  device = DeviceTime();
  loader_s = wait_s = held_s = 0;
  return m;
}

RunReporter::RunReporter(const TrainConfig& cfg, int64_t first_step, int64_t total_steps,
                         FILE* out)
    : cfg_(cfg), out_(out), first_step_(first_step), total_steps_(total_steps),
      metrics_(metrics_file(cfg)), events_(event_writer(cfg, first_step)),
      progress_(cfg.epochs, total_steps, cfg.log_every),
      line_(first_step, total_steps), record_(first_step, total_steps), last_line_(Clock::now()),
      epoch_start_(Clock::now()), start_(Clock::now()) {}

void RunReporter::start(int64_t steps_per_epoch, const std::string& device, double setup_s,
                        double conv_auto_s) {
  metrics_.write("start", {{"step", first_step_}, {"total_steps", total_steps_},
                           {"steps_per_epoch", steps_per_epoch}, {"epochs", cfg_.epochs},
                           {"device", device}, {"setup_s", setup_s},
                           {"conv_auto_s", conv_auto_s}});
  if (events_) events_->text(first_step_, "config", config_markdown(cfg_));
}

void RunReporter::step(const StepResult& r, int64_t steps_done, double loss_scale) {
  say_report_failures();
  images_total_ += r.images;
  wait_total_ += r.data_wait_s;
  if (r.sync_s >= 0) synced_ = true, sync_total_ += r.sync_s;
  const double sync_total = synced_ ? sync_total_ : -1;  // (< 0: none to show)
  for (Window* w : {&line_, &record_}) {
    w->loss += r.loss * r.images;
    w->correct += double(r.correct);
    w->images += r.images;
    w->steps++;
    w->device += r.device;
    w->loader_s += r.loader_s;
    w->wait_s += r.data_wait_s;
    w->held_s += r.data_wait_held_s;
  }
  epoch_loss_ += r.loss * r.images;
  epoch_correct_ += double(r.correct);
  epoch_images_ += r.images;
  const int epoch = int(r.batch.epoch) + 1;
  if (!r.taken) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "cutrain: step %lld skipped: inf/NaN gradient, first in %s; "
                  "loss scale %g -> %g", (long long)r.step, r.overflow.c_str(), r.loss_scale,
                  loss_scale);
    note(buf);
    metrics_.write("skip", {{"step", r.step}, {"parameter", r.overflow},
                            {"loss_scale", loss_scale}});
    skipped_++;
  }
  const bool last = steps_done == total_steps_;
  const bool due = steps_done % cfg_.log_every == 0 || last;
  // The line: on a terminal about 10 times a second, in a log with the records.
  const auto now = Clock::now();
  if (progress_.tty() ? (now - last_line_ >= progress_.redraw || last) : due) {
    last_line_ = now;
    const StepMetrics m =
        line_.take(steps_done, epoch, r.lr, loss_scale, images_total_, wait_total_, sync_total);
    progress_.update(m, line_.eta_s, now);
    // The diagnosis, once: synchronised BatchNorm is latency-bound (a few small all-reduces per
    // layer), so with few images per replica it can dominate the step.
    if (m.sync_bn_pct > 25 && !sync_noted_ && steps_done >= 10) {
      sync_noted_ = true;
      char buf[512];
      std::snprintf(buf, sizeof buf,
                    "cutrain: --sync-bn: the replicas waited in BatchNorm's synchronisation for "
                    "%.0f%% of the last steps' time (three small all-reduces per BatchNorm layer "
                    "and micro-batch, each waiting for the slowest replica): more images per "
                    "replica (--batch) or fewer micro-batches (--accum) make it a smaller share",
                    m.sync_bn_pct);
      note(buf);
    }
  }
  if (due) {
    const StepMetrics m = record_.take(steps_done, epoch, r.lr, loss_scale, images_total_,
                                       wait_total_, sync_total);
    metrics_.write(m);
    if (events_) events_->scalars(m.step, step_scalars(m, skipped_));
    skipped_ = 0;
  }
}

void RunReporter::epoch(int epoch, int epochs, int64_t step, const EvalResult* e,
                        const std::vector<std::string>& class_names, const EvalResult* average) {
  progress_.end_line();
  say_report_failures();
  const double seconds = std::chrono::duration<double>(Clock::now() - epoch_start_).count();
  std::fprintf(out_, "epoch %d/%d  train loss %.4f  acc %.2f%%", epoch, epochs,
               epoch_images_ ? epoch_loss_ / double(epoch_images_) : 0,
               epoch_images_ ? 100 * epoch_correct_ / double(epoch_images_) : 0);
  if (e) {
    std::fprintf(out_, "  |  val loss %.4f  top-1 %.2f%%  top-5 %.2f%%", e->loss,
                 100 * e->top1_accuracy(), 100 * e->top5_accuracy());
    if (average)
      std::fprintf(out_, "  |  EMA loss %.4f  top-1 %.2f%%", average->loss,
                   100 * average->top1_accuracy());
    nlohmann::json per_class = nlohmann::json::array();
    for (size_t k = 0; k < e->class_images.size(); k++)
      per_class.push_back({{"class", k < class_names.size() ? class_names[k] : std::to_string(k)},
                           {"images", e->class_images[k]},
                           {"top1", e->class_images[k] ? double(e->class_top1[k]) /
                                                             double(e->class_images[k])
                                                       : 0.0}});
    nlohmann::json record = {
        {"epoch", epoch}, {"step", step}, {"loss", e->loss}, {"top1", e->top1_accuracy()},
        {"top5", e->top5_accuracy()}, {"images", e->images}, {"bad_files", e->bad_files},
        {"seconds", e->seconds},
        {"time", std::chrono::duration<double>(Clock::now() - start_).count()},
        {"per_class", per_class}};
    if (average) {
      record["ema_loss"] = average->loss;
      record["ema_top1"] = average->top1_accuracy();
      record["ema_top5"] = average->top5_accuracy();
    }
    const size_t K = e->class_images.size();
    if (K <= kMaxConfusionClasses && e->confusion.size() == K * K) {
      nlohmann::json rows = nlohmann::json::array();
      for (size_t y = 0; y < K; y++)
        rows.push_back(std::vector<int64_t>(e->confusion.begin() + long(y * K),
                                            e->confusion.begin() + long((y + 1) * K)));
      record["confusion"] = rows;
    }
    metrics_.write("eval", record);
    if (events_) {
      std::vector<std::pair<std::string, double>> v = {
          {"val/loss", e->loss}, {"val/top1", e->top1_accuracy()}, {"val/top5", e->top5_accuracy()}};
      if (average)
        for (const auto& [tag, x] :
             {std::pair<const char*, double>{"val_ema/loss", average->loss},
              {"val_ema/top1", average->top1_accuracy()},
              {"val_ema/top5", average->top5_accuracy()}})
          v.emplace_back(tag, x);
      for (const auto& c : per_class)
        v.emplace_back("val_class_top1/" + c["class"].get<std::string>(), c["top1"].get<double>());
      events_->scalars(step, v);
    }
  }
  std::fprintf(out_, "  |  %.1f s\n", seconds);
  std::fflush(out_);
  epoch_loss_ = epoch_correct_ = 0;
  epoch_images_ = 0;
  epoch_start_ = Clock::now();
}

void RunReporter::checkpoint(int64_t step, const std::string& path, bool best) {
  metrics_.write("checkpoint", {{"step", step}, {"path", path}, {"best", best}});
}

bool RunReporter::refresh_report(bool say_now) {
  std::string failure;
  {
    std::lock_guard<std::mutex> lock(report_mu_);
    try {
      write_report(cfg_.out);
    } catch (const std::exception& e) {
      failure = e.what();
    } catch (...) {
      failure = "an unknown exception";
    }
  }
  if (!failure.empty()) {
    std::lock_guard<std::mutex> lock(failures_mu_);
    report_failures_.push_back(failure);
  }
  if (say_now) say_report_failures();
  return failure.empty();
}

void RunReporter::say_report_failures() {
  std::vector<std::string> failures;
  {
    std::lock_guard<std::mutex> lock(failures_mu_);  // not report_mu_: never wait for a write
    failures.swap(report_failures_);
  }
  for (const std::string& why : failures)
    note("cutrain: could not write " + cfg_.out + "/report.html (training goes on): " + why);
}

void RunReporter::note(const std::string& line) {
  progress_.end_line();
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace cutrain
