#include "train/run/run.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "data/atomic_file.h"
#include "kernels/check.h"
#include "kernels/gpu.h"
#include "nn/context.h"
#include "train/run/checkpoint.h"
#include "train/run/dataset.h"
#include "data/trace.h"
#include "train/run/device.h"
#include "train/run/memory_plan.h"
#include "train/run/reporter.h"
#include "train/run/signals.h"
#include "train/engine/trainer.h"

namespace cutrain {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The checkpoint --resume continues from, and the configuration of the resumed run.
Checkpoint load_resume_point(TrainConfig& cfg, const std::vector<std::string>& given, FILE* out) {
  const std::string dir = cfg.resume;
  const std::string path = newest_checkpoint(dir);
  USER_CHECK(!path.empty(), "--resume " << dir << ": no complete checkpoint there");
  Checkpoint c = read_checkpoint(path);
  const TrainConfig saved = config_from_json_text(c.config_json, path);
  cfg = resume_config(saved, cfg, given);
  // Checkpoints go on where they were unless --out says otherwise.
  if (std::find(given.begin(), given.end(), "out") == given.end()) cfg.out = dir;
  cfg.resume = dir;
  std::fprintf(out, "resuming from %s: step %lld, epoch %lld, next batch %s\n", path.c_str(),
               (long long)c.step, (long long)c.epoch, cursor_to_string(c.cursor).c_str());
  return c;
}

}  // namespace

RunSummary run_training(TrainConfig cfg, const std::vector<std::string>& given, FILE* out,
                        bool allow_data_change) {
  const auto t_start = Clock::now();
  RunSummary sum;

  // ---- the configuration ---------------------------------------------------------------
  Checkpoint resume_point;
  const bool resuming = !cfg.resume.empty();
  if (resuming) resume_point = load_resume_point(cfg, given, out);
  validate_config(cfg);  // before the device is chosen from --device and --devices
  // --devices cpu,... runs on the CPU, --devices 0,1,... on those GPUs; without it, --device.
  const std::vector<std::string> replica_devices = parse_devices(cfg.devices);
  const std::string device_name =
      replica_devices.empty() ? cfg.device : replica_devices[0] == "cpu" ? "cpu" : "cuda";
  RunDevice device = choose_device(device_name, cfg.precision);
  const std::vector<int> gpus = gpu_ordinals(cfg.devices);
  for (int g : gpus)
    USER_CHECK(g < gpu_count(), "--devices " << cfg.devices << ": GPU " << g << " does not exist ("
                                        << gpu_count() << " usable)");
  if (!gpus.empty()) {
    device.gpu = gpus[0];
    set_device(gpus[0]);  // this thread's: no context is ever made on a GPU the run skips
  }
  if (!device.notice.empty()) std::fprintf(stderr, "%s\n", device.notice.c_str());
  // A run that cannot fit in memory is refused as soon as its shapes are known.
  const std::vector<std::string> notes =
      resolve_config(cfg, [&](const TrainConfig& c) { check_run_memory(c, device); });
  if (cfg.cuda_graph && device.device == Device::cpu)
    std::fprintf(stderr, "cutrain: --cuda-graph has no effect on the CPU\n");
  if (!resuming) {
    std::vector<std::string> skipped;
    const std::string existing = newest_checkpoint(cfg.out, &skipped);
    USER_CHECK(existing.empty(), "--out " << cfg.out << " holds checkpoints of an earlier run ("
                                     << existing << "): continue it with --resume " << cfg.out
                                     << ", or choose another --out");
  }
  std::error_code made;
  std::filesystem::create_directories(cfg.out, made);
  USER_CHECK(!made, "cannot create the folder '" << cfg.out << "': " << made.message());
  const std::string config_text = config_to_json_text(cfg);
  write_file_atomically(cfg.out + "/config.json", config_text);
  std::fprintf(out, "cutrain train: %s, configuration (saved as %s/config.json):\n%s",
               device.describe().c_str(), cfg.out.c_str(), config_text.c_str());
  for (const std::string& n : notes) std::fprintf(out, "  %s\n", n.c_str());
  sum.config = cfg;

  // ---- the trainer ---------------------------------------------------------------------
  std::unique_ptr<Tracer> tracer;  // before the trainer: its loader's workers record into it
  if (!cfg.trace.empty()) {
    tracer = std::make_unique<Tracer>();
    tracer->name_thread("main");
  }
  Trainer t(cfg, device);
  t.tracer = tracer.get();
  if (resuming && allow_data_change &&
      (resume_point.data_fingerprint.empty() || !t.data_change(resume_point).empty())) {
    const std::string note = t.restore_at_next_epoch(resume_point);
    std::fprintf(out, "%s\n", note.c_str());
    // Step files of the old data above the new step would stay "newest" in this folder.
    std::error_code ec;
    const bool same_folder = std::filesystem::weakly_canonical(cfg.out, ec) ==
                             std::filesystem::weakly_canonical(cfg.resume, ec);
    USER_CHECK(t.steps_done() >= resume_point.step || !same_folder,
               "--allow-data-change: the run would go on at step "
                   << t.steps_done() << ", below the checkpoint's " << resume_point.step
                   << ", whose files would then stay the newest in " << cfg.out
                   << ": continue into another folder with --out");
  } else if (resuming) {
    t.restore(resume_point);  // exact; refused when the data changed
    if (allow_data_change)
      std::fprintf(out, "--allow-data-change: the training data are the checkpoint's: the run "
                        "goes on exactly\n");
  }
  std::fputs(t.model().table().c_str(), out);
  if (t.replicas() > 1) std::fprintf(out, "replicas: %s\n", t.replicas_description().c_str());
  std::fputs(t.peer_report().c_str(), out);  // GPU replicas: who reaches whom, how fast
  std::fprintf(out, "data: %lld training images (%lld steps of %d per epoch, %d epochs)%s\n",
               (long long)t.train_data().size(), (long long)t.steps_per_epoch(), cfg.batch,
               cfg.epochs,
               has_validation(cfg) ? "" : ", no validation data (--val or --val-split)");
  if (!t.balance_description().empty())
    std::fprintf(out, "%s\n", t.balance_description().c_str());
  if (has_validation(cfg))
    std::fprintf(out, "validation: %lld images, %s\n", (long long)t.val_data()->size(),
                 validation_name(cfg).c_str());
  const MemoryPlan& mem = t.memory_plan();
  std::fprintf(out, "memory (estimated): %s on the host", bytes_str(MemoryPlan::total(mem.host)).c_str());
  if (!mem.device.empty())
    std::fprintf(out, ", %s on each GPU replica", bytes_str(MemoryPlan::total(mem.device)).c_str());
  std::fprintf(out, "\n");
  std::fflush(out);

  double best_top1 = -1;
  if (resuming && resume_point.scalars.count("best_top1"))
    best_top1 = resume_point.scalars.at("best_top1");
  sum.first_step = t.steps_done();

  RunReporter report(cfg, t.steps_done(), t.total_steps(), out);
  CheckpointWriter writer(cfg.out, cfg.keep, tracer.get());  // its row in the trace
  writer.on_written = [&](int64_t step, const std::string& path, bool is_best) {
    report.checkpoint(step, path, is_best);  // the metrics file takes lines from any thread
  };
  t.notice = [&](const std::string& line) { report.note(line); };
  auto save = [&](bool is_best, std::map<std::string, double> extra) {
    extra["best_top1"] = best_top1;
    double waited = 0;
    {
      TraceSpan span(tracer.get(), "checkpoint snapshot", "train");
      // On a GPU: cloned on the device after the queued steps; the writer thread brings it over.
      waited = writer.submit(t.snapshot_async(extra), t.steps_done(), is_best);
    }
    sum.last_checkpoint = checkpoint_path(cfg.out, t.steps_done());
    if (waited > 1.0)
      report.note("cutrain: waited " + std::to_string(waited) + " s for the checkpoint writer");
  };

  // ---- the loop ------------------------------------------------------------------------
  // launch() queues a step (on the CPU: does it); results() hands out the steps whose loss is
  // known, without waiting. Before an evaluation (its numbers go with the epoch's line), a stop
  // on a signal and the end, results(true) waits for the steps in flight; a checkpoint alone
  // does not wait (Trainer::snapshot_async).
  StopSignals signals;
  auto take = [&](bool wait) {
    const auto t0 = Clock::now();
    const std::vector<StepResult> rs = t.results(wait);
    sum.train_seconds += seconds_since(t0);
    for (const StepResult& r : rs) {
      sum.losses.push_back(r.loss);
      sum.graph_steps += r.graph;
      report.step(r, r.step + 1, device.dtype == DType::f16 ? r.scale_after : 0.0);
    }
  };
  while (t.steps_done() < t.total_steps()) {
    const auto t_step = Clock::now();
    t.launch();
    sum.train_seconds += seconds_since(t_step);
    const bool epoch_end = t.steps_done() % t.steps_per_epoch() == 0;
    const int signal = signals.received();  // read once: a signal arriving later waits a step
    const bool save_now = epoch_end || signal != 0 ||
                          (cfg.checkpoint_every > 0 && t.steps_done() % cfg.checkpoint_every == 0);
    take(epoch_end || signal != 0);

    if (epoch_end) {
      std::map<std::string, double> extra;
      bool is_best = false;
      if (t.has_validation()) {
        sum.final_eval = t.evaluate();
        const EvalResult& e = sum.final_eval;
        extra = {{"val_loss", e.loss}, {"val_top1", e.top1_accuracy()},
                 {"val_top5", e.top5_accuracy()}};
        is_best = e.top1_accuracy() > best_top1;
        if (is_best) best_top1 = e.top1_accuracy();
      }
      report.epoch(t.epochs_done(), cfg.epochs, t.steps_done(),
                   t.has_validation() ? &sum.final_eval : nullptr, cfg.class_names);
      save(is_best, extra);
    } else if (save_now) {
      save(false, {});
    }
    if (signal != 0) {
      writer.wait();
      report.end_line();
      std::fprintf(out, "stopped by %s after step %lld; checkpoint %s\n"
                        "continue with: cutrain train --resume %s\n",
                   signals.name(), (long long)t.steps_done(), sum.last_checkpoint.c_str(),
                   cfg.out.c_str());
      sum.exit_code = 128 + signal;
      break;
    }
  }
  take(true);  // nothing is left in flight (the loop ends on an epoch's end, or a signal)
  writer.wait();
  sum.steps = t.steps_done();
  sum.seconds = seconds_since(t_start);
  if (tracer) {
    std::string why;
    if (tracer->write(cfg.trace, &why))
      std::fprintf(out, "trace: %s (open it in ui.perfetto.dev or chrome://tracing)\n",
                   cfg.trace.c_str());
    else
      report.note("cutrain: could not write the trace: " + why);
  }
  if (sum.exit_code != 0) return sum;

  // ---- the final report ----------------------------------------------------------------
  if (sum.first_step == t.total_steps())
    std::fprintf(out, "the run was already complete (%lld steps)\n", (long long)t.steps_done());
  if (t.has_validation()) {
    if (sum.final_eval.images == 0) sum.final_eval = t.evaluate();
    std::fprintf(out, "final: %s\n%s", eval_summary(sum.final_eval).c_str(),
                 per_class_report(sum.final_eval, cfg.class_names).c_str());
  }
  if (cfg.cuda_graph && device.device == Device::cuda)
    std::fprintf(out, "CUDA graph: %lld of %lld steps replayed from it\n",
                 (long long)sum.graph_steps, (long long)sum.losses.size());
  const std::string best = best_checkpoint_path(cfg.out);
  std::fprintf(out, "trained %lld steps in %.1f s (%.0f images/s in the steps); checkpoints in "
                    "%s%s; metrics: %s\n",
               (long long)(t.steps_done() - sum.first_step), sum.seconds,
               sum.train_seconds > 0
                   ? double((t.steps_done() - sum.first_step) * cfg.batch) / sum.train_seconds
                   : 0.0,
               cfg.out.c_str(),
               std::filesystem::exists(best) ? (" (best: " + best + ")").c_str() : "",
               report.metrics_path().c_str());
  return sum;
}

}  // namespace cutrain
