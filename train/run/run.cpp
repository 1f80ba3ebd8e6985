#include "train/run/run.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "data/loader.h"
#include "data/trace.h"
#include "data/units.h"
#include "kernels/check.h"
#include "kernels/gpu.h"
#include "train/checkpoint/checkpoint.h"
#include "train/engine/trainer.h"
#include "train/replicas/mpi.h"
#include "train/run/reporter.h"
#include "train/run/run_setup.h"
#include "train/run/signals.h"
#include "train/setup/device.h"
#include "train/setup/kernel_choice.h"
#include "train/setup/memory_plan.h"
#include "train/setup/val_split.h"

namespace cutrain {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- the trainer ---------------------------------------------------------------------

// --trace: the trace the main thread, the loader's workers and the checkpoint writer record
// into (null without it). Under mpirun every rank records its own (trace_file).
std::unique_ptr<Tracer> start_trace(const TrainConfig& cfg, const Mpi* mpi) {
  if (cfg.trace.empty()) return nullptr;
  auto tracer = std::make_unique<Tracer>();
  tracer->name_thread(mpi ? "rank " + std::to_string(mpi->rank()) + " main" : "main");
  return tracer;
}

// The file --trace names, or under mpirun rank r's: trace.json -> trace.rank1.json.
std::string trace_file(const std::string& trace, const Mpi* mpi) {
  if (!mpi) return trace;
  const std::filesystem::path p(trace);
  const std::string rank = ".rank" + std::to_string(mpi->rank());
  return (p.parent_path() / (p.stem().string() + rank + p.extension().string())).string();
}

// --resume: the trainer at the checkpoint's step, exactly; with --allow-data-change and data
// that changed, at the start of the epoch after it.
void restore_trainer(Trainer& t, const Checkpoint& resume_point, const TrainConfig& cfg,
                     bool allow_data_change, FILE* out) {
  if (allow_data_change &&
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
  } else {
    t.restore(resume_point);  // exact; refused when the data changed
    if (allow_data_change)
      std::fprintf(out, "--allow-data-change: the training data are the checkpoint's: the run "
                        "goes on exactly\n");
  }
}

// What the run will do: the model's table, the replicas and their links, the data, --balance,
// the validation data and the memory estimate.
void print_plan(Trainer& t, const TrainConfig& cfg, FILE* out) {
  std::fputs(t.model().table().c_str(), out);
  if (t.world() > 1) std::fprintf(out, "replicas: %s\n", t.replicas_description().c_str());
  std::fputs(t.peer_report().c_str(), out);  // GPU replicas: who reaches whom, how fast
  std::fprintf(out, "data: %lld training images (%lld steps of %d per epoch, %d epochs)%s\n",
               (long long)t.train_data().size(), (long long)t.steps_per_epoch(), cfg.batch,
               cfg.epochs,
               has_validation(cfg) ? "" : ", no validation data (--val or --val-split)");
  std::fprintf(out, "%s\n", t.threads_description().c_str());
  if (!t.graph_description().empty()) std::fprintf(out, "%s\n", t.graph_description().c_str());
  if (!t.balance_description().empty())
    std::fprintf(out, "%s\n", t.balance_description().c_str());
  if (has_validation(cfg))
    std::fprintf(out, "validation: %lld images, %s\n", (long long)t.val_data()->size(),
                 validation_name(cfg).c_str());
  if (!cfg.recipe.empty())
    std::fprintf(out, "recipe %s: its options, under those given on the command line (the "
                      "result in config.json)\n", cfg.recipe.c_str());
  if (cfg.ema > 0)
    std::fprintf(out, "moving average of the weights (--ema %g): evaluated after each epoch "
                      "beside the weights%s\n", cfg.ema,
                 has_validation(cfg) ? "; best.h5 is chosen by its validation top-1" : "");
  if (cfg.tta == "flip" && has_validation(cfg))
    std::fprintf(out, "test-time flips (--tta flip): each validation image's logits averaged "
                      "with its mirror image's\n");
  const MemoryPlan& mem = t.memory_plan();
  std::fprintf(out, "memory (estimated): %s on the host", bytes_str(MemoryPlan::total(mem.host)).c_str());
  if (!mem.device.empty())
    std::fprintf(out, ", %s on each GPU replica", bytes_str(MemoryPlan::total(mem.device)).c_str());
  std::fprintf(out, "\n");
  std::fflush(out);
}

// ---- the loop ------------------------------------------------------------------------

// The best validation top-1 of the run so far (-1: none): a resumed run's, from its checkpoint.
double saved_best_top1(const Checkpoint& resume_point) {
  const auto it = resume_point.scalars.find("best_top1");
  return it == resume_point.scalars.end() ? -1 : it->second;
}

// The trainer's notes and the writer's finished checkpoints go to the reporter; once an
// epoch's checkpoint is on disk and the older ones pruned (its evaluation already in the
// metrics), the report page is rewritten, on the writer's thread, so that training does not
// wait for it.
void connect_reports(Trainer& t, CheckpointWriter& writer, RunReporter& report) {
  writer.on_written = [&report](int64_t step, const std::string& path, bool is_best) {
    report.checkpoint(step, path, is_best);  // the metrics file takes lines from any thread
  };
  const int64_t per_epoch = t.steps_per_epoch();
  writer.after_write = [&report, per_epoch](int64_t step) {
    if (per_epoch > 0 && step % per_epoch == 0) report.refresh_report(/*say_now=*/false);
  };
  t.notice = [&report](const std::string& line) { report.note(line); };
}

// What the loop and the final report share: the run's parts (run_training owns them) and
// what the run has found so far.
struct Run {
  const TrainConfig& cfg;
  const RunDevice& device;
  Trainer& t;
  // Under mpirun only rank 0 reports and writes checkpoints: null on the other ranks, which
  // still take every step, every collective and every snapshot's BatchNorm average.
  RunReporter* report;
  CheckpointWriter* writer;
  Tracer* tracer;    // null without --trace
  FILE* out;
  RunSummary& sum;
  double best_top1;  // the best validation top-1 so far (-1: none), kept in each checkpoint
  std::set<std::string> bad_seen;  // the bad files found so far, by any rank
  int bad_named = 0;               // of them, named by rank 0 (under mpirun)
  bool report_page = false;        // OUT/report.html written at the end
};

// The bad files found since the last call, by any rank, into the run's count; under mpirun
// rank 0 names each once, whichever rank found it (the loaders name none: run_training), as
// far as a loader would (LoaderConfig::print_bad). Every rank calls it at the same points: an
// epoch's end, the end.
void gather_bad_files(Run& run) {
  const Mpi* mpi = run.device.mpi;
  // "rank\tname\terror\tmessage\n" per file; a tab or a line break in a name or a message
  // becomes a space (here only: the loader's list keeps the name as it is).
  auto field = [](std::string t) {
    std::replace_if(t.begin(), t.end(), [](char c) { return c == '\t' || c == '\n'; }, ' ');
    return t;
  };
  std::string mine;
  for (const auto& [rank, b] : run.t.bad_files())
    if (!run.bad_seen.count(field(b.name)))
      mine += std::to_string(rank) + '\t' + field(b.name) + '\t' + image_error_name(b.kind) +
              '\t' + field(b.message) + '\n';
  const std::vector<std::string> all = mpi ? mpi->all_gather_text(mine) : std::vector{mine};
  const int limit = LoaderConfig{}.print_bad;
  for (const std::string& text : all) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      std::istringstream fields(line);
      std::string rank, name, error, message;
      std::getline(fields, rank, '\t'), std::getline(fields, name, '\t');
      std::getline(fields, error, '\t'), std::getline(fields, message);
      if (!run.bad_seen.insert(name).second || !mpi || !run.report) continue;
      if (run.bad_named++ < limit)
        run.report->note("cutrain: skipping bad file (" + error + ")" +
                         (rank == "0" ? std::string() : ", found by rank " + rank) + ": " +
                         name + ": " + message);
      if (run.bad_named == limit)
        run.report->note("cutrain: further bad files are not named; all are listed in " +
                         run.cfg.out + "/bad_files.replica<rank>.txt");
    }
  }
  run.sum.bad_files = int64_t(run.bad_seen.size());
}

// The steps whose results have arrived (wait: all those launched) into the summary and the
// reports.
void take_results(Run& run, bool wait) {
  const auto t0 = Clock::now();
  const std::vector<StepResult> rs = run.t.results(wait);
  run.sum.train_seconds += seconds_since(t0);
  for (const StepResult& r : rs) {
    run.sum.losses.push_back(r.loss);
    run.sum.graph_steps += r.graph;
    if (run.report)
      run.report->step(r, r.step + 1, run.device.dtype == DType::f16 ? r.scale_after : 0.0);
  }
}

// A checkpoint of the steps launched so far, handed to the writer's thread.
void save_checkpoint(Run& run, bool is_best, std::map<std::string, double> extra) {
  const Mpi* mpi = run.device.mpi;
  // Rank 0 may wait here for its writer (a full queue, a slow disk) while the others would go
  // on: they wait for it at the barrier below, with no deadline, as for its evaluation.
  const Mpi::RootWorksAlone solo(mpi);
  extra["best_top1"] = run.best_top1;
  double waited = 0;
  {
    TraceSpan span(run.tracer, "checkpoint snapshot", "train");
    // On a GPU: cloned on the device after the queued steps; the writer thread brings it over.
    Checkpoint c = run.t.snapshot_async(extra);
    if (mpi) {
      // Rank 0 writes for all, after every rank's weights and optimizer state were found
      // equal to its own (their hashes, gathered: a collective every rank takes part in).
      const std::string diff = run.t.replicas_difference();
      USER_CHECK(diff.empty(), "the checkpoint of step " << run.t.steps_done() << " is not "
                                   << "written: " << diff << ": the processes have drifted apart");
    }
    // Rank 0 writes (the replicas are equal).
    if (run.writer) waited = run.writer->submit(std::move(c), run.t.steps_done(), is_best);
  }
  if (mpi) mpi->barrier();
  if (!run.writer) return;
  run.sum.last_checkpoint = checkpoint_path(run.cfg.out, run.t.steps_done());
  if (waited > 1.0)
    run.report->note("cutrain: waited " + std::to_string(waited) + " s for the checkpoint writer");
}

// The end of an epoch: evaluate on the validation data (if any), with --ema the weights'
// average too, the epoch's line, a checkpoint (best.h5 when its top-1 is the best so far: the
// average's with --ema, the run's header says so).
void end_epoch(Run& run) {
  Trainer& t = run.t;
  gather_bad_files(run);
  // Rank 0 evaluates and reports alone: the others wait for it in the checkpoint's collective,
  // for as long as that takes (the collective timeout is for collectives, not for its work).
  const Mpi::RootWorksAlone solo(run.device.mpi);
  std::map<std::string, double> extra;
  bool is_best = false;
  if (t.has_validation()) {
    run.sum.final_eval = t.evaluate();
    const EvalResult& e = run.sum.final_eval;
    extra = {{"val_loss", e.loss}, {"val_top1", e.top1_accuracy()},
             {"val_top5", e.top5_accuracy()}};
    double top1 = e.top1_accuracy();
    if (t.has_average()) {
      run.sum.final_average_eval = t.evaluate(/*averaged=*/true);
      const EvalResult& a = run.sum.final_average_eval;
      extra["val_ema_loss"] = a.loss;
      extra["val_ema_top1"] = a.top1_accuracy();
      top1 = a.top1_accuracy();  // best.h5 follows the average
    }
    is_best = top1 > run.best_top1;
    if (is_best) run.best_top1 = top1;
  }
  if (run.report)
    run.report->epoch(t.epochs_done(), run.cfg.epochs, t.steps_done(),
                      t.has_validation() ? &run.sum.final_eval : nullptr, run.cfg.class_names,
                      t.has_validation() && t.has_average() ? &run.sum.final_average_eval
                                                            : nullptr);
  save_checkpoint(run, is_best, extra);
}

// The clean stop on SIGINT/SIGTERM: the checkpoint on disk, how to go on, exit 128 + signal.
// After the run's last collective: rank 0 may wait long for its writer.
void stop_on_signal(Run& run, const StopSignals& signals, int signal) {
  run.sum.exit_code = 128 + signal;
  if (!run.writer) return;  // rank 0 says it
  run.writer->wait();
  run.report->end_line();
  std::fprintf(run.out, "stopped by %s after step %lld; checkpoint %s\n"
                        "continue with: cutrain train --resume %s\n",
               signals.name(), (long long)run.t.steps_done(), run.sum.last_checkpoint.c_str(),
               run.cfg.out.c_str());
}

// The steps until the last one or a signal, then nothing left in flight and every checkpoint
// on disk. launch() queues a step (on the CPU: does it); results() hands out the steps whose
// loss is known, without waiting. Before an evaluation (its numbers go with the epoch's line),
// a stop on a signal and the end, results(true) waits for the steps in flight; a checkpoint
// alone does not wait (Trainer::snapshot_async).
void train_loop(Run& run, const StopSignals& signals) {
  Trainer& t = run.t;
  int stopped_by = 0;  // the signal
  while (t.steps_done() < t.total_steps()) {
    const auto t_step = Clock::now();
    t.launch();
    run.sum.train_seconds += seconds_since(t_step);
    const bool epoch_end = t.steps_done() % t.steps_per_epoch() == 0;
    // Read once: a signal arriving later waits a step. Under mpirun every rank stops at the
    // same step: the first that any rank saw a signal at (mpirun passes SIGINT and SIGTERM on
    // to every rank, which may see it a step apart).
    int signal = signals.received();
    if (run.device.mpi) signal = int(run.device.mpi->max(signal));
    const bool save_now = epoch_end || signal != 0 ||
                          (run.cfg.checkpoint_every > 0 &&
                           t.steps_done() % run.cfg.checkpoint_every == 0);
    take_results(run, epoch_end || signal != 0);

    if (epoch_end)
      end_epoch(run);
    else if (save_now)
      save_checkpoint(run, false, {});
    if (signal != 0) {
      stopped_by = signal;
      break;
    }
  }
  take_results(run, true);  // nothing is left in flight (the loop ends on an epoch's end, or a signal)
  gather_bad_files(run);
  // The last collective is behind: rank 0 waits for its writer while the others end.
  if (stopped_by != 0)
    stop_on_signal(run, signals, stopped_by);
  else if (run.writer)
    run.writer->wait();
}

// ---- the end -------------------------------------------------------------------------

// --trace: the trace file, or a note saying why it could not be written. Under mpirun each
// rank writes its own (trace_file); rank 0 says where.
void write_trace(Run& run) {
  if (!run.tracer) return;
  const Mpi* mpi = run.device.mpi;
  const std::string path = trace_file(run.cfg.trace, mpi);
  std::string why;
  if (!run.tracer->write(path, &why)) {
    const std::string line = "cutrain: could not write the trace " + path + ": " + why;
    if (run.report)
      run.report->note(line);
    else
      std::fprintf(stderr, "%s (rank %d)\n", line.c_str(), mpi ? mpi->rank() : 0);
  } else if (run.report) {
    std::fprintf(run.out, "trace: %s%s (open it in ui.perfetto.dev or chrome://tracing)\n",
                 path.c_str(), mpi ? ", one file per rank" : "");
  }
}

// The final report of a finished run: the validation metrics with per-class accuracy, the
// steps the CUDA graph ran, and the summary line (time, images/s, checkpoints, metrics).
void final_report(Run& run) {
  const TrainConfig& cfg = run.cfg;
  Trainer& t = run.t;
  RunSummary& sum = run.sum;
  if (sum.first_step == t.total_steps())
    std::fprintf(run.out, "the run was already complete (%lld steps)\n", (long long)t.steps_done());
  if (t.has_validation()) {
    if (sum.final_eval.images == 0) sum.final_eval = t.evaluate();
    std::fprintf(run.out, "final: %s\n%s", eval_summary(sum.final_eval).c_str(),
                 per_class_report(sum.final_eval, cfg.class_names).c_str());
    if (t.has_average()) {
      if (sum.final_average_eval.images == 0) sum.final_average_eval = t.evaluate(true);
      std::fprintf(run.out, "final, the weights' moving average (--ema %g): %s\n%s", cfg.ema,
                   eval_summary(sum.final_average_eval).c_str(),
                   per_class_report(sum.final_average_eval, cfg.class_names).c_str());
    }
  }
  if (cfg.cuda_graph && run.device.device == Device::cuda)
    std::fprintf(run.out, "CUDA graph: %lld of %lld steps replayed from it\n",
                 (long long)sum.graph_steps, (long long)sum.losses.size());
  if (sum.bad_files > 0)
    std::fprintf(run.out, "bad files: %lld skipped, listed in %s/%s\n", (long long)sum.bad_files,
                 cfg.out.c_str(), t.world() > 1 ? "bad_files.replica<rank>.txt" : "bad_files.txt");
  const std::string best = best_checkpoint_path(cfg.out);
  std::fprintf(run.out, "trained %lld steps in %.1f s (%.0f images/s in the steps); checkpoints in "
                        "%s%s; metrics: %s%s\n",
               (long long)(t.steps_done() - sum.first_step), sum.seconds,
               sum.train_seconds > 0
                   ? double((t.steps_done() - sum.first_step) * cfg.batch) / sum.train_seconds
                   : 0.0,
               cfg.out.c_str(),
               std::filesystem::exists(best) ? (" (best: " + best + ")").c_str() : "",
               run.report->metrics_path().c_str(),
               run.report_page ? ("; report: " + cfg.out + "/report.html").c_str() : "");
}

}  // namespace

RunSummary run_training(TrainConfig cfg, const std::vector<std::string>& given, FILE* out,
                        bool allow_data_change, const Mpi* mpi) {
  const auto t_start = Clock::now();
  RunSummary sum;
  // Under mpirun rank 0 prints, reports and writes for the run; the others print nothing (an
  // error still reaches stderr).
  const bool root = !mpi || mpi->root();
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> quiet(nullptr, &std::fclose);
  if (!root) {
    quiet.reset(std::fopen("/dev/null", "w"));
    USER_CHECK(quiet, "cannot open /dev/null");
    out = quiet.get();
  }

  // One writer per run folder, before anything in it is read or written: a new run's --out, or
  // the folder --resume continues, and then its --out if that is another (rank 0's locks).
  const bool resuming = !cfg.resume.empty();
  std::vector<std::unique_ptr<FolderLock>> locks;
  if (root && resuming)
    lock_run_folder(resume_folder(cfg.resume), "--resume " + cfg.resume, false, locks);
  else if (root)
    lock_run_folder(cfg.out, "--out " + cfg.out, true, locks);

  // The configuration: the checkpoint's on --resume, checked, completed from the data, saved.
  Checkpoint resume_point;  // empty without --resume
  if (resuming) resume_point = load_resume_point(cfg, given, out);
  if (root && resuming) lock_run_folder(cfg.out, "--out " + cfg.out, true, locks);
  validate_config(cfg);  // before the device is chosen from --device and --devices
  const RunDevice device = choose_run_device(cfg, mpi);
  std::vector<std::string> notes = resolve_run_config(cfg, device);
  // --conv auto on a GPU: each layer's kernels timed (a new run), saved with the configuration
  const auto t_conv = Clock::now();
  choose_conv_kernels(cfg, device, resuming, notes);
  const double conv_auto_s = seconds_since(t_conv);
  if (root) save_config(cfg, resuming, device, notes, out);
  if (mpi) mpi->barrier();  // the --out folder is there (or rank 0 failed and stops them all)
  sum.config = cfg;

  // The trainer, at the checkpoint's step on --resume, and what it will do.
  std::unique_ptr<Tracer> tracer;  // first: the loader's workers record into it
  tracer = start_trace(cfg, mpi);
  Trainer t(cfg, device);
  t.tracer = tracer.get();
  if (resuming) restore_trainer(t, resume_point, cfg, allow_data_change, out);
  print_plan(t, cfg, out);
  // From here on a rank that waits too long for the others in a collective stops the run
  // (--collective-timeout, train/replicas/mpi.h); the set-up's waits had none (rank 0 resolves
  // the configuration and writes config.json alone, as long as that takes).
  if (mpi) mpi->set_timeout(cfg.collective_timeout);

  // The loop: steps, an evaluation and a checkpoint each epoch, until the end or a signal.
  sum.first_step = t.steps_done();
  std::optional<RunReporter> report;
  std::optional<CheckpointWriter> writer;
  if (root) {
    report.emplace(cfg, t.steps_done(), t.total_steps(), out);
    report->start(t.steps_per_epoch(), device.describe() + (t.world() > 1 ? ", " +
                  std::to_string(t.world()) + " replicas" : ""), seconds_since(t_start),
                  conv_auto_s);
    writer.emplace(cfg.out, cfg.keep, tracer.get());  // its row in the trace
    connect_reports(t, *writer, *report);
  }
  StopSignals signals;  // SIGINT/SIGTERM, until the run returns
  Run run{cfg,   device, t,   report ? &*report : nullptr, writer ? &*writer : nullptr,
          tracer.get(), out, sum, saved_best_top1(resume_point), {}, 0, false};
  try {
    train_loop(run, signals);
  } catch (...) {  // a run that fails (diverged, the disk) still gets its page, up to the failure
    // Under mpirun the other ranks will not join another collective: the steps queued behind
    // one (NCCL), and the writer's copies behind them, must not wait for them.
    t.engine().abort_collective();
    writer.reset();  // its last job done (and its own page, whose failure it keeps), then ours
    if (report) report->refresh_report(/*say_now=*/true);
    throw;
  }

  // The end: the trace, the report page (linking the trace); the final report unless a signal
  // stopped the run.
  sum.steps = t.steps_done();
  sum.seconds = seconds_since(t_start);
  write_trace(run);
  if (report) run.report_page = report->refresh_report(/*say_now=*/true);
  if (sum.exit_code == 0 && root) final_report(run);
  return sum;
}

}  // namespace cutrain
