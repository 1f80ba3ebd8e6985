// defines: Loader, the data pipeline: decode worker threads -> a ring of batch slots ->
// (on a GPU) copies on their own stream -> the training loop.
//
//                  free slots                                      full slots
//   release() ───────────────► [assign next batch] ──► tasks ──► workers ──► [complete] ──► next()
//                                 (sampler order)   (runs of     decode,     compact bad samples,
//                                                    samples)    uncut into  copy on copy stream,
//                                                                the slot    record `copied`
//
// Why parts of batches, not whole batches, are the unit of work: every worker helps fill the
// oldest batch, so a batch is ready T times sooner than if one thread decoded it, and a ring
// of a few slots keeps T threads busy without T slots of pinned memory.
//
// The rules that keep it correct:
//  - A slot is rewritten only after the batch it held is consumed. On a GPU, release() records
//    an event on the compute stream and the workers wait for that event before writing into
//    the slot: refilling a slot whose copy or whose device buffer is still in use is the
//    classic corruption bug of prefetching loaders.
//  - next() makes the compute stream wait on the slot's `copied` event: the training thread
//    never blocks on the copy (no device-wide synchronisation anywhere).
//  - Batches come out in sampler order whatever the number of threads, and augmentation is
//    keyed on (seed, epoch, sample): the bytes of every batch are a function of the seed.
//  - A bad sample (missing, truncated, corrupt ... file) is skipped: the batch shrinks by one,
//    the file is counted, named (the first few on stderr, all of them in a file), and skipped
//    without another try in later epochs. With strict = true it stops the run instead.
//  - An exception in a worker stops the loader and is rethrown by next().
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "data/sampler.h"
#include "data/source.h"
#include "kernels/gpu.h"
#include "kernels/input.h"  // InputCrop: each sample's crop window, as the input kernels read it
#include "kernels/launch_plan.h"

namespace cutrain {

class GpuTimeline;
class Tracer;

struct LoaderConfig {
  int threads = 0;              // decode workers; 0: hardware threads - 1, at least 1
  int ring = 4;                 // batch slots; 1 works (no prefetch), 3-4 keep workers busy
  int gpu = -1;                 // copy batches to this device; -1: keep them on the host
  bool strict = false;          // a bad file stops the run instead of being skipped
  std::string bad_files_path;   // every bad file is appended here as it is found, once: a
                                // name already there (an earlier process of the run) is not
                                // appended again ("": none)
  int print_bad = 10;           // how many bad files to name on stderr
  Tracer* tracer = nullptr;     // record spans here (data/trace.h); must outlive the loader.
                                // Rows "loader worker <i>": "decode" (one task: a run of
                                // samples), "wait for slot", "copy issue" (GPU: the host-side
                                // issue of the batch's copy). On the thread calling next():
                                // "wait for batch". GPU: row "copy stream (cuda:<gpu>)",
                                // "copy batch" (arg batch), the copy itself as the copy
                                // stream ran it, timed with events (data/gpu_timeline.h).
  std::string label;            // names this loader among several (data-parallel replicas:
                                // "replica 1"): rows "replica 1 loader worker <i>" and
                                // "copy stream (replica 1, cuda:<gpu>)"; "": as above
};

// One batch, valid from next() until release(). Its images are uncut (data/image.h): each
// the crop window with its margin, side P = uncut_side(spec), and the window's place in it
// (crops); the conversion into the model's input cuts the S x S windows out
// (train/engine/batch_input.h, kernels/input.h), on the device when the batch is there.
struct Batch {
  int64_t seq = 0;                    // 0, 1, 2, ... since the loader started
  SamplerCursor where;                // its epoch and batch number
  int n = 0;                          // samples (bad files removed)
  int side = 0;                       // P: the uncut images' side (S + 2 pad, or S)
  int size = 0;                       // S: the crop window's side, the model's input size
  int channels = 0;                   // C
  const uint8_t* images = nullptr;    // (n,P,P,C) uint8 NHWC, host (pinned when gpu >= 0)
  const InputCrop* crops = nullptr;   // (n) each window's place, checked (input_check_crops)
  const int32_t* labels = nullptr;    // (n)
  const int64_t* indices = nullptr;   // (n) sample indices in the source
  const void* d_images = nullptr;     // gpu >= 0: the same on the device, copied with the
  const InputCrop* d_crops = nullptr; //   batch on the copy stream, ready on the compute
  const int32_t* d_labels = nullptr;  //   stream given to next()
  int slot = -1;
  // What it cost, for the run's pipeline figures (train/engine/engine.h, StepResult):
  double load_s = 0;       // the workers' seconds reading, decoding and augmenting it (summed
                           //   over the workers that shared it; waits not included)
  double wait_s = 0;       // how long next() blocked for it
  double wait_held_s = 0;  // of wait_s, the part in which its slot was still held by the
                           //   device (GPU: the batch before it in the slot not yet consumed,
                           //   so no worker could write it): back-pressure, not slow decoding
};

struct LoaderStats {
  StageTimes stages;             // read, decode, augment: summed over the workers (seconds)
  double worker_idle_s = 0;      // workers with nothing to do: every slot full or in use
  double slot_wait_s = 0;        // workers waiting for a released slot's consumption event
  double copy_ms = 0;            // host-to-device copies, timed with events (gpu only)
  double consumer_wait_s = 0;    // next() blocked because the batch was not ready
  double consumer_wait_held_s = 0;  // of it, while the batch's slot was still held by the
                                    //   device (Batch::wait_held_s): the rest is decoding
  double mean_full_slots = 0;    // ring occupancy seen by next(): near `ring` = data is ahead
  int64_t batches = 0, samples = 0, bad_files = 0;
};

// A GPU loader's slot holds a batch of up to `capacity` samples as one buffer on each side:
// the crop windows, the labels, then (at this offset) the images. A batch goes over in one
// copy on the copy stream: batch_copy_costs (kernels/launch_plan.h).
size_t batch_images_offset(int capacity);
std::vector<LaunchCost> batch_copy_costs(int n, int capacity, size_t sample_bytes);

class Loader {
 public:
  Loader(std::shared_ptr<const SampleSource> source, const SamplerConfig& sampler,
         const LoaderConfig& config, SamplerCursor start = {});
  ~Loader();  // stops and joins the workers; safe at any point
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch in sampler order; blocks until it is decoded. On a GPU, `compute` is made
  // to wait for the batch's copy (an event, no host block). Rethrows a worker's exception.
  Batch next(cudaStream_t compute = nullptr);
  // Gives the batch's slot back. On a GPU, the slot is refilled only after the work queued
  // on `compute` so far (which reads the batch) has finished.
  void release(const Batch& b, cudaStream_t compute = nullptr);

  SamplerCursor cursor() const;  // where the next call of next() will be: saved for resume
  LoaderStats stats() const;
  std::vector<BadFile> bad_files() const;
  const Sampler& sampler() const { return sampler_; }
  int threads() const { return int(workers_.size()); }
  size_t sample_bytes() const { return sample_bytes_; }  // an uncut image's: P * P * C
  int batch_capacity() const;  // samples a slot holds: this replica's share of a batch

 private:
  struct Slot;
  struct Task {  // load positions [begin, end) of a slot's batch
    int slot;
    int begin, end;
  };

  void worker_main(int index);
  void shutdown();  // stops and joins the workers, waits for the copies (the destructor's)
  void assign_locked(int slot);             // give a free slot the next batch, queue its tasks
  void complete(int slot);                  // last sample done: compact, copy, mark full
  bool known_bad(int64_t index);
  void record_bad(int64_t index, const DecodeResult& r);

  std::shared_ptr<const SampleSource> src_;
  Sampler sampler_;
  LoaderConfig cfg_;
  size_t sample_bytes_;                     // of an uncut image: P * P * C
  int side_ = 0, spec_size_ = 0;            // P and S
  std::unique_ptr<Stream> copy_stream_;
  // Copies are issued one batch at a time (workers finishing two batches at once would mix
  // their copies and events on the stream); the copy stream's trace row is filled meanwhile.
  std::mutex copy_mu_;
  std::unique_ptr<GpuTimeline> copy_trace_;  // guarded by copy_mu_
  std::vector<std::unique_ptr<Slot>> slots_;

  mutable std::mutex mu_;                   // guards everything below
  std::condition_variable work_cv_, full_cv_;
  std::deque<Task> tasks_;                  // FIFO: the oldest batch is filled first
  int64_t next_assign_seq_ = 0, next_deliver_seq_ = 0;
  SamplerCursor assign_cursor_, deliver_cursor_;
  std::unordered_map<int64_t, int> slot_of_seq_;
  bool stop_ = false;
  std::exception_ptr error_;
  LoaderStats stats_;
  int64_t occupancy_sum_ = 0;

  std::vector<std::atomic<uint8_t>> bad_flag_;  // per sample: known bad (read without a lock)
  mutable std::mutex bad_mu_;               // guards the bad-file record
  std::vector<BadFile> bad_;
  std::unordered_set<std::string> listed_bad_;  // the names in bad_files_path
  bool bad_file_write_failed_ = false;

  std::vector<std::thread> workers_;
};

}  // namespace cutrain
