// CheckpointWriter (the background writer: one write in flight, one snapshot waiting, the
// last N and the best kept) and newest_checkpoint (what a resumed run continues from).
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "data/atomic_file.h"
#include "data/trace.h"
#include "kernels/check.h"
#include "kernels/printable.h"
#include "kernels/thread_start.h"
#include "train/checkpoint/checkpoint.h"

namespace cutrain {

namespace fs = std::filesystem;

namespace {

constexpr const char* kBestName = "best.h5";

// "step-00001200.h5" -> 1200; -1 for any other name.
int64_t step_of_name(const std::string& name) {
  const std::string pre = "step-", suf = ".h5";
  if (name.size() <= pre.size() + suf.size() || name.compare(0, pre.size(), pre) != 0 ||
      name.compare(name.size() - suf.size(), suf.size(), suf) != 0)
    return -1;
  const std::string digits = name.substr(pre.size(), name.size() - pre.size() - suf.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](unsigned char c) {
        return std::isdigit(c);
      }))
    return -1;
  return std::stoll(digits);
}

bool is_checkpoint_name(const std::string& name) {
  return step_of_name(name) >= 0 || name == kBestName;
}

// The step files in dir, by increasing step.
std::vector<std::pair<int64_t, std::string>> step_files(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const int64_t step = step_of_name(e.path().filename().string());
    if (step >= 0 && e.is_regular_file()) files.emplace_back(step, e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// best := a hard link to `path` (a copy where the file system has no hard links), replaced
// atomically like any other file.
void link_best(const std::string& path, const std::string& best) {
  std::error_code ec;
  if (fs::equivalent(path, best, ec)) return;  // already that very file
  write_atomically(best, [&](const std::string& tmp) {
    if (::link(path.c_str(), tmp.c_str()) == 0) return;
    fs::copy_file(path, tmp, fs::copy_options::overwrite_existing, ec);
    USER_CHECK(!ec, "cannot link or copy '" << path << "' to '" << tmp << "': " << ec.message());
  });
}

// The span of one whole write, named after its file (TraceSpan takes literals only). Recorded
// when the write ends, by return or by exception, so a failed write shows too.
class WholeWriteSpan {
 public:
  WholeWriteSpan(Tracer* tracer, std::string name, int64_t step)
      : tracer_(tracer), name_(std::move(name)), step_(step), begin_(Tracer::Clock::now()) {}
  ~WholeWriteSpan() {
    if (tracer_)
      tracer_->complete(std::move(name_), "checkpoint", begin_, Tracer::Clock::now(),
                        {"step", step_});
  }
  WholeWriteSpan(const WholeWriteSpan&) = delete;
  WholeWriteSpan& operator=(const WholeWriteSpan&) = delete;

 private:
  Tracer* tracer_;
  std::string name_;
  int64_t step_;
  Tracer::Clock::time_point begin_;
};

}  // namespace

std::string checkpoint_path(const std::string& dir, int64_t step) {
  CHECK(step >= 0, "a checkpoint step cannot be negative: " << step);
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld.h5", static_cast<long long>(step));
  return (fs::path(dir) / name).string();
}

std::string best_checkpoint_path(const std::string& dir) {
  return (fs::path(dir) / kBestName).string();
}

std::string newest_checkpoint(const std::string& dir, std::vector<std::string>* skipped) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return "";
  USER_CHECK(fs::is_directory(dir, ec), "'" << dir << "' is a file, not a checkpoint folder");
  auto report = [&](const std::string& line) {
    if (skipped)
      skipped->push_back(line);
    else
      std::fprintf(stderr, "cutrain: skipping %s\n", printable(line).c_str());
  };
  std::vector<std::string> temps;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    std::string final_name;
    if (parse_temp_name(e.path().filename().string(), &final_name, nullptr) &&
        is_checkpoint_name(final_name))
      temps.push_back(e.path().string());
  }
  std::sort(temps.begin(), temps.end());
  for (const std::string& t : temps) report(t + ": the temporary file of an unfinished write");

  const auto files = step_files(dir);
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    try {
      const Checkpoint c = read_checkpoint(it->second);
      CHECK(c.step == it->first, "it holds step " << c.step << ", not the step of its name");
      return it->second;
    } catch (const std::exception& e) {  // damaged, truncated, foreign: try the next older one
      report(it->second + ": " + e.what());
    }
  }
  return "";
}

CheckpointWriter::CheckpointWriter(const std::string& dir, int keep_last, Tracer* tracer)
    : dir_(dir), keep_last_(keep_last), tracer_(tracer) {
  CHECK(keep_last >= 1, "a checkpoint writer must keep at least 1 checkpoint, not " << keep_last);
  CHECK(!dir.empty(), "no folder for the checkpoints");
  std::error_code ec;
  fs::create_directories(dir, ec);
  USER_CHECK(fs::is_directory(dir), "cannot make the checkpoint folder '"
                                   << dir << "': " << (ec ? ec.message() : "a file is in the way"));
  remove_stale_temp_files(dir, is_checkpoint_name);
  thread_ = start_thread("the checkpoint writer thread", [this] { run(); });
  pthread_setname_np(thread_.native_handle(), "ckpt-writer");  // for debuggers and traces
}

CheckpointWriter::~CheckpointWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();  // the writer finishes what was submitted first
  for (const std::string& e : errors_)
    std::fprintf(stderr, "cutrain: checkpoint writer: %s\n", printable_message(e).c_str());
}

double CheckpointWriter::submit(Checkpoint snapshot, int64_t step, bool is_best) {
  CHECK(snapshot.step == step, "the snapshot of step " << snapshot.step
                                   << " was submitted as step " << step);
  if (!snapshot.pending) validate_checkpoint(snapshot);
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  throw_pending_errors();
  changed_.wait(lock, [&] { return !queued_; });
  throw_pending_errors();  // the write we waited for may have failed
  queued_ = Job{std::move(snapshot), step, is_best};
  lock.unlock();
  changed_.notify_all();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void CheckpointWriter::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [&] { return !queued_ && !busy_; });
  throw_pending_errors();
}

void CheckpointWriter::throw_pending_errors() {
  if (errors_.empty()) return;
  std::string text = errors_.size() == 1 ? errors_[0]
                                         : std::to_string(errors_.size()) + " failures:";
  for (size_t i = 0; errors_.size() > 1 && i < errors_.size(); i++) text += "\n  " + errors_[i];
  errors_.clear();
  const bool internal = internal_error_;
  internal_error_ = false;
  if (internal) CHECK(false, "checkpoint writer: " << text);
  USER_CHECK(false, text);
}

void CheckpointWriter::run() {
  if (tracer_) tracer_->name_thread("checkpoint writer");
  for (;;) {
    std::optional<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [&] { return stop_ || queued_; });
      if (!queued_) return;  // stopping, and everything submitted is written
      job = std::move(queued_);
      queued_.reset();
      busy_ = true;
    }
    changed_.notify_all();  // the queue has room again
    std::string error;
    bool internal = true;
    try {
      write(*job);
      if (after_write) after_write(job->step);
    } catch (const UserError& e) {  // the disk, the folder: the message says it all
      error = e.what();
      internal = false;
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "an unknown exception while writing step " + std::to_string(job->step);
    }
    job.reset();  // free the snapshot before saying we are idle
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error.empty()) errors_.push_back(error), internal_error_ |= internal;
      busy_ = false;
    }
    changed_.notify_all();
  }
}

void CheckpointWriter::write(Job& job) {
  const std::string path = checkpoint_path(dir_, job.step);
  WholeWriteSpan span(tracer_, "write " + fs::path(path).filename().string(), job.step);
  if (job.snapshot.pending) {
    TraceSpan from_gpu(tracer_, "from GPU", "checkpoint");
    job.snapshot.complete();
  }
  // A diverged state is never saved: the newest checkpoint stays the last good one. (The
  // file format itself keeps any bits, inf and NaN included.)
  for (const auto& [name, t] : job.snapshot.tensors) {
    const int64_t bad = first_nonfinite(t);
    USER_CHECK(bad < 0, "the checkpoint of step " << job.step << " is not written: '" << name
                                                  << "' holds inf or NaN (element " << bad
                                                  << "): the run has diverged");
  }
  write_checkpoint(job.snapshot, path, tracer_);  // validates it first
  if (job.is_best) {
    TraceSpan link(tracer_, "link best.h5", "checkpoint");
    link_best(path, best_checkpoint_path(dir_));
  }
  if (on_written) on_written(job.step, path, job.is_best);
  // Only now, with the new file complete, may older ones go: the newest keep_last - 1 of the
  // steps below this one stay. best.h5 is a link of its own, so pruning never removes it.
  TraceSpan prune(tracer_, "prune", "checkpoint");
  std::vector<std::pair<int64_t, std::string>> older = step_files(dir_);
  older.erase(std::remove_if(older.begin(), older.end(),
                             [&](const auto& f) { return f.first >= job.step; }),
              older.end());
  const size_t keep = size_t(keep_last_ - 1);
  for (size_t i = 0; i + keep < older.size(); i++) {
    std::error_code ec;
    fs::remove(older[i].second, ec);
    USER_CHECK(!ec, "step " << job.step << " is written, but the old checkpoint '" << older[i].second
                       << "' cannot be removed: " << ec.message());
  }
}

}  // namespace cutrain
