// defines: Checkpoint (all a run needs to continue exactly), write_checkpoint / read_checkpoint
// (one checksummed HDF5 file, written crash-safely), checkpoint_checksum, CheckpointWriter
// (writes on a background thread, keeps the last N and the best) and newest_checkpoint (the
// file `--resume DIR` continues from).
//
//   Checkpoint c;                                   // filled by the trainer: weights, master
//   c.step = 1200; c.tensors.push_back({"conv1.w", w.clone()});   // weights, optimizer state,
//   c.scalars["loss_scale"] = 65536;                // BN statistics, scaler state, ...
//   writer.submit(std::move(c), 1200, /*is_best=*/false);  // returns at once; written behind
//   ...
//   Checkpoint back = read_checkpoint(newest_checkpoint(dir));   // verified, bit for bit
//
// On disk: one HDF5 file, format "cutrain-checkpoint", version kCheckpointVersion:
//
//   /tensors/<name>  one dataset per tensor, named exactly as in Checkpoint::tensors. A flat
//                    group: the dots of "block2.bn1.running_mean" are part of the name, not a
//                    path, so "bn1" and "bn1.gamma" can both exist (as group and dataset they
//                    could not) and no name needs escaping. Shape as the tensor's (rank 0: a
//                    scalar dataspace; a dimension may be 0), contiguous, no filters. Types:
//                    f32 IEEE F32LE, f64 IEEE F64LE, i32 STD I32LE, f16 IEEE binary16 LE (what
//                    h5py reads as numpy float16), so every bit round-trips.
//                    Attribute xxh64 (uint64): xxh64 of the tensor's bytes.
//   /tensor_names    strings (T): the names in Checkpoint order (HDF5 lists a group by name)
//   /scalars         a group with one float64 attribute per entry of Checkpoint::scalars
//   attributes of /: format = "cutrain-checkpoint", version (int32), step, epoch,
//                    cursor_epoch, cursor_batch (int64), seed (uint64), config_json (a
//                    variable-length string: kept in the global heap, so not bound by the 64 KiB
//                    limit on attributes), data_fingerprint (the same kind of string; absent
//                    in checkpoints written before it), checksum (uint64, see
//                    checkpoint_checksum)
//
// Files written by CheckpointWriter in DIR: step-<step, 8 digits or more>.h5, the last N of
// them, and best.h5, a hard link to the best one (a copy where the file system has no hard
// links), so keeping the best costs no disk space and survives the pruning of its step file.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "data/sampler.h"
#include "nn/tensor.h"

namespace cutrain {

class Tracer;

constexpr const char* kCheckpointFormat = "cutrain-checkpoint";
// 2: the data_fingerprint attribute (version 1 had none; read_checkpoint reads both).
constexpr int kCheckpointVersion = 2;

struct Checkpoint {
  std::string config_json;  // the run's effective configuration
  std::string data_fingerprint;  // of the training data, as JSON (data/fingerprint.h); "": none
                                 //   (written before fingerprints were)
  int64_t step = 0;         // optimizer steps done
  int64_t epoch = 0;
  SamplerCursor cursor;     // the next batch to train on
  uint64_t seed = 0;
  // Every named tensor: weights, master weights, optimizer state, BN running statistics. Any
  // dtype, any shape, on the CPU. Names: non-empty, no '/' and no NUL, not ".", distinct.
  std::vector<std::pair<std::string, Tensor>> tensors;
  // Loss scale, scaler counters, best accuracy, ... (names non-empty, no NUL).
  std::map<std::string, double> scalars;
  // Set while part of the checkpoint is still on its way from a GPU (Trainer::snapshot_async:
  // tensors still on the device, scalars the device still holds): completes it in place,
  // waiting for the device. Call complete() before reading such a checkpoint; the
  // CheckpointWriter does, on its own thread, so the training thread never waits for it.
  std::function<void(Checkpoint&)> pending;

  void complete();  // runs and clears `pending`, if set
  // The tensor called `name`; throws "the checkpoint has no tensor '<name>'".
  const Tensor& tensor(const std::string& name) const;
};

// Throws cutrain::Error for what write_checkpoint refuses: a pending checkpoint, a bad or
// duplicate name, an undefined or non-CPU tensor, a negative step/epoch/cursor, a NUL in
// config_json.
void validate_checkpoint(const Checkpoint& c);

// xxh64 of this canonical record, in which every integer is a uint64 little-endian and every
// string is its length (as such an integer) followed by its bytes:
//   "cutrain-checkpoint", version, config_json, step, epoch, cursor.epoch, cursor.batch, seed,
//   number of scalars, then per scalar in name order: name, the bits of the double,
//   number of tensors, then per tensor in order: name, dtype name ("f32", "f16", "f64",
//   "i32"), rank, each dimension, xxh64 of its bytes (tensor_hashes[i]),
//   then data_fingerprint when it is not empty.
// So it covers every tensor's name, dtype, shape and bytes and all the metadata; one xxh64
// pass per tensor, which the writer and the reader make anyway. `version` is the file's (a
// version 1 file's record holds 1).
uint64_t checkpoint_checksum(const Checkpoint& c, const std::vector<uint64_t>& tensor_hashes,
                             int version = kCheckpointVersion);

// Writes `c` to `path` (layout above): the HDF5 file is made in memory (HDF5's core driver),
// then written through data/atomic_file.h (write_file_atomically: a temporary file beside it,
// closed, fsynced and renamed), so `path` holds the old file or the whole new one, never a torn
// one, and a full disk is one UserError naming the path and the system's reason. Throws
// cutrain::Error for what validate_checkpoint refuses.
// With a tracer, its parts are spans on the calling thread's row: "hash" (xxh64 of every
// tensor), "hdf5" (the file made in memory), "write + fsync + rename".
void write_checkpoint(const Checkpoint& c, const std::string& path, Tracer* tracer = nullptr);

// Reads and verifies a checkpoint. Throws cutrain::Error naming the file when it is missing,
// not an HDF5 file, not a cutrain checkpoint, of a newer version, lacks a field, holds a tensor
// of a type cutrain does not store, and "checksum mismatch: <path> is damaged (...)" when a
// tensor's bytes or the metadata differ from what was written.
Checkpoint read_checkpoint(const std::string& path);

// <dir>/step-00001200.h5 and <dir>/best.h5
std::string checkpoint_path(const std::string& dir, int64_t step);
std::string best_checkpoint_path(const std::string& dir);

// The newest complete checkpoint in dir: the highest-step step-*.h5 that reads, verifies and
// holds the step its name says. Files passed over (damaged, truncated, temporary files of an
// unfinished write) are described in `skipped` ("<path>: <why>"), or, when skipped is null,
// printed to stderr one line each. "" when there is none, or dir does not exist; throws when
// dir is a file. Reads every tensor of the file it returns (verification is the whole read).
std::string newest_checkpoint(const std::string& dir,
                              std::vector<std::string>* skipped = nullptr);

// Writes checkpoints on its own thread, so that training does not wait for the disk.
//
// Queue: one write in flight plus one snapshot waiting. submit() on a full queue blocks until
// the write in flight ends (and returns the seconds it waited): no checkpoint is ever dropped
// (a newer snapshot replacing a waiting one could drop the only copy of a best model, or the
// SIGINT save), memory is bounded by two snapshots, and a stall shows up as a number the
// caller can report instead of as silently missing files.
//
// A snapshot holding inf or NaN (a diverged run) is refused, as a write failure naming the
// tensor: the newest checkpoint stays the last good one.
//
// After step S is complete on disk (and best.h5 re-linked when is_best), the step files with a
// step below S are pruned to the newest keep_last - 1; files with a step above S (from a run
// that went further before this one resumed from an earlier step) are left alone.
//
// Errors on the writer thread are kept and rethrown (as one cutrain::Error carrying every
// message since the last report) by the next submit() or wait(); a later write is still
// attempted. The destructor waits and prints an error nobody collected to stderr.
//
// With a tracer (data/trace.h; it must outlive the writer), the writer thread's row is
// "checkpoint writer": one span "write step-<step>.h5" per checkpoint (arg step; recorded
// even when the write fails) holding "from GPU" (a pending snapshot completed) and
// write_checkpoint's spans, then "link best.h5" and "prune".
class CheckpointWriter {
 public:
  // Creates dir if needed and removes temporary files there left by killed writers.
  explicit CheckpointWriter(const std::string& dir, int keep_last = 3,
                            Tracer* tracer = nullptr);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Queues `snapshot` for checkpoint_path(dir, step). The snapshot is the writer's from now on:
  // its tensors must be copies (Tensor::clone()) that the caller no longer writes into.
  // snapshot.step must equal step; the snapshot is validated here, before queueing (a pending
  // one on the writer's thread, once complete(): an error then comes with the next call).
  double submit(Checkpoint snapshot, int64_t step, bool is_best);
  // Blocks until every submitted checkpoint is on disk (or failed); rethrows failures.
  void wait();

  const std::string& dir() const { return dir_; }

  // Called on the writer's thread once a checkpoint is complete on disk (and best.h5 linked
  // when is_best): a record of it written now never names a file that is not there. Set it
  // before the first submit(); what it throws counts as that write's failure.
  std::function<void(int64_t step, const std::string& path, bool is_best)> on_written;
  // Called on the writer's thread after a checkpoint is written and the older ones pruned,
  // outside the write's trace span: for work that reads the folder as the run leaves it (the
  // report page). Not called when the write failed. wait() waits for it too.
  std::function<void(int64_t step)> after_write;

 private:
  struct Job {
    Checkpoint snapshot;
    int64_t step;
    bool is_best;
  };
  void run();                    // the writer thread
  void write(Job& job);          // one checkpoint: completed, file, best link, pruning
  void throw_pending_errors();   // under mu_

  const std::string dir_;
  const int keep_last_;
  Tracer* const tracer_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::optional<Job> queued_;     // the snapshot waiting for the writer
  bool busy_ = false;             // a write is in flight
  bool stop_ = false;
  std::vector<std::string> errors_;
  bool internal_error_ = false;   // one of errors_ is a bug (Error), not the disk (UserError)
  std::thread thread_;
};

}  // namespace cutrain
