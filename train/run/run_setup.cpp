// The steps that set a training run up (train/run/run_setup.h).
#include "train/run/run_setup.h"

#include <algorithm>
#include <filesystem>

#include "data/atomic_file.h"
#include "kernels/check.h"
#include "kernels/gpu.h"
#include "kernels/parallel.h"
#include "kernels/printable.h"
#include "train/replicas/mpi.h"
#include "train/setup/memory_plan.h"
#include "train/setup/resolve.h"

namespace cutrain {

void lock_run_folder(const std::string& dir, const std::string& option, bool create,
                     std::vector<std::unique_ptr<FolderLock>>& locks) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (create) {
    fs::create_directories(dir, ec);
    USER_CHECK(!ec, "cannot create the folder '" << dir << "': " << ec.message());
  }
  if (!fs::is_directory(dir, ec)) return;
  for (const auto& held : locks)
    if (fs::equivalent(held->dir(), dir, ec)) return;
  locks.push_back(std::make_unique<FolderLock>(dir, "cutrain train", option));
}

std::string resume_folder(const std::string& resume) {
  std::error_code ec;
  return std::filesystem::is_regular_file(resume, ec)
             ? std::filesystem::path(resume).parent_path().string()
             : resume;
}

// The checkpoint --resume continues from, and the configuration of the resumed run.
Checkpoint load_resume_point(TrainConfig& cfg, const std::vector<std::string>& given, FILE* out) {
  const std::string dir = cfg.resume;
  const std::string path = newest_checkpoint(dir);
  USER_CHECK(!path.empty(), "--resume " << dir << ": no complete checkpoint there");
  Checkpoint c = read_checkpoint(path);
  const TrainConfig saved = config_from_json_text(c.config_json, path);
  cfg = resume_config(saved, cfg, given);
  // The compute threads are the run's unless the replicas changed (their shards, and so
  // oneDNN's bits, change anyway): then they are worked out again for the new layout.
  const bool threads_given =
      std::find(given.begin(), given.end(), "compute_threads") != given.end();
  if (!threads_given && (cfg.devices != saved.devices || cfg.device != saved.device))
    cfg.compute_threads = 0;
  // Checkpoints go on where they were unless --out says otherwise.
  if (std::find(given.begin(), given.end(), "out") == given.end()) cfg.out = dir;
  cfg.resume = dir;
  std::fprintf(out, "resuming from %s: step %lld, epoch %lld, next batch %s\n",
               printable(path).c_str(),
               (long long)c.step, (long long)c.epoch, cursor_to_string(c.cursor).c_str());
  return c;
}

// Where the run computes: --devices cpu,... on the CPU, --devices 0,1,... on those GPUs (the
// first made this thread's), without it --device; the reason for the choice on stderr. Under
// mpirun, this process's place among the others, and on GPUs without --devices the GPU of its
// local rank (ranks beyond the GPUs share them, round robin).
RunDevice choose_run_device(const TrainConfig& cfg, const Mpi* mpi) {
  const std::vector<std::string> replica_devices = parse_devices(cfg.devices);
  const std::string device_name =
      replica_devices.empty() ? cfg.device : replica_devices[0] == "cpu" ? "cpu" : "cuda";
  RunDevice device = choose_device(device_name, cfg.precision);
  const std::vector<int> gpus = gpu_ordinals(cfg.devices);
  for (int g : gpus)
    USER_CHECK(g < gpu_count(), "--devices " << cfg.devices << ": GPU " << g << " does not exist ("
                                        << gpu_count() << " usable)");
  const bool rank_gpu = gpus.empty() && mpi && device.device == Device::cuda;
  if (!gpus.empty()) device.gpu = gpus[0];
  if (rank_gpu) device.gpu = mpi->local_rank() % gpu_count();
  // this thread's: no context is ever made on a GPU the run skips
  if (!gpus.empty() || rank_gpu) set_device(device.gpu);
  device.mpi = mpi;
  if (!device.notice.empty() && (!mpi || mpi->root()))
    std::fprintf(stderr, "%s\n", device.notice.c_str());
  return device;
}

// What is not given, worked out from the data (size, channels, classes, mean/std, ...); a run
// that cannot fit in memory is refused as soon as its shapes are known. Returns the notes
// that say what was worked out.
std::vector<std::string> resolve_run_config(TrainConfig& cfg, const RunDevice& device) {
  const std::vector<std::string> notes =
      resolve_config(cfg, [&](const TrainConfig& c) { check_run_memory(c, device); });
  // Saved resolved, so a resumed run keeps its count (and oneDNN its bits) on another machine.
  cfg.compute_threads = run_compute_threads(cfg, device);
  // The metrics and trace files as absolute paths: config.json then says where they are for
  // `cutrain report RUN` run from any folder (train/report/report.h).
  for (std::string* path : {&cfg.metrics, &cfg.trace})
    if (!path->empty()) *path = std::filesystem::absolute(*path).lexically_normal().string();
  // This process's replicas computing side by side (--sync-bn), against the cores it may use.
  const int at_once = cpu_replicas_side_by_side(cfg, device), cores = available_cores();
  if (device.device == Device::cpu && int64_t(cfg.compute_threads) * at_once > cores &&
      (!device.mpi || device.mpi->root())) {
    auto count = [](int n, const std::string& what) {
      return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
    };
    std::string say = "cutrain: " + count(cfg.compute_threads, "compute thread");
    if (at_once > 1) say += " for each of " + std::to_string(at_once) + " replicas";
    say += " on " + count(cores, "core") + ": the threads will take turns";
    if (!cfg.resume.empty())
      say += " (a resumed run keeps the count it started with, which keeps oneDNN's sums in the "
             "same order; --compute-threads changes it)";
    std::fprintf(stderr, "%s\n", say.c_str());
  }
  if (cfg.sync_bn && replica_count(cfg) == 1 && !device.mpi)
    std::fprintf(stderr, "cutrain: --sync-bn has no effect with one replica (its batch is the "
                         "whole batch); it matters with --devices or mpirun\n");
  return notes;
}

// The --out folder with the configuration in it (OUT/config.json), and the configuration
// printed. A new run refuses a folder that holds an earlier run's checkpoints.
void save_config(const TrainConfig& cfg, bool resuming, const RunDevice& device,
                 const std::vector<std::string>& notes, FILE* out) {
  if (!resuming) {
    std::vector<std::string> skipped;
    const std::string existing = newest_checkpoint(cfg.out, &skipped);
    USER_CHECK(existing.empty(), "--out " << cfg.out << " holds checkpoints of an earlier run ("
                                     << existing << "): continue it with --resume " << cfg.out
                                     << ", or choose another --out");
  }
  std::error_code made;
  std::filesystem::create_directories(cfg.out, made);
  USER_CHECK(!made, "cannot create the folder '" << printable(cfg.out) << "': " << made.message());
  const std::string config_text = config_to_json_text(cfg);
  write_file_atomically(cfg.out + "/config.json", config_text);
  // The configuration holds paths and class names from outside: shown printable (JSON escapes
  // C0 controls, not DEL, C1 or bidi controls), its own line breaks kept.
  std::fprintf(out, "cutrain train: %s, configuration (saved as %s/config.json):\n%s",
               device.describe().c_str(), printable(cfg.out).c_str(),
               printable_message(config_text).c_str());
  for (const std::string& n : notes) std::fprintf(out, "  %s\n", printable_message(n).c_str());
}

}  // namespace cutrain
