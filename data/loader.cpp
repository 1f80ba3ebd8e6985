#include "data/loader.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>

#include "data/gpu_timeline.h"
#include "data/trace.h"
#include "kernels/check.h"
#include "kernels/printable.h"
#include "kernels/thread_start.h"

namespace cutrain {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

// One batch's worth of memory, on the host and (with a GPU) on the device.
struct Loader::Slot {
  enum class State { free, filling, full, in_use };
  State state = State::free;

  std::vector<uint8_t> host_images;  // CPU mode
  std::vector<InputCrop> host_crops;
  std::vector<int32_t> host_labels;
  // GPU mode: copies overlap only from pinned memory. One buffer on each side, the crop windows
  // and labels (B each) first, then the images, so that a batch goes over in one copy.
  PinnedBuffer pinned;
  uint8_t* images = nullptr;         // (B,P,P,C) uncut, P = uncut_side: whichever is in use
  InputCrop* crops = nullptr;        // (B) each sample's crop window in its uncut image
  int32_t* labels = nullptr;         // (B)
  std::vector<int64_t> indices;      // the batch's sample indices, compacted on completion
  std::vector<char> good;            // per position: decoded fine
  int n = 0;

  DeviceBuffer dev;                  // GPU mode: the same layout on the device
  size_t images_at = 0;              //   where the images start in both
  std::unique_ptr<Event> copied, consumed, copy_start;  // GPU mode
  bool consumed_pending = false;     // a release recorded `consumed`; wait before writing
  // When the device gave the slot back, as a worker waiting for `consumed` saw it: the epoch
  // (long ago) when no worker had to wait. Batch::wait_held_s is the next() wait before it.
  std::chrono::steady_clock::time_point freed_at{};
  double load_s = 0;                 // the workers' read + decode + augment seconds on it
  bool copy_timed = false;           // copy_start/copied hold a copy not yet added to stats

  int64_t seq = -1;
  SamplerCursor where;
  int remaining = 0;                 // samples not yet loaded (guarded by the loader's mutex)
};

Loader::Loader(std::shared_ptr<const SampleSource> source, const SamplerConfig& sampler,
               const LoaderConfig& config, SamplerCursor start)
    : src_(std::move(source)), sampler_(sampler), cfg_(config) {
  CHECK(src_, "loader: no sample source");
  CHECK(src_->size() > 0, "loader: the source has no samples");
  CHECK(sampler.num_samples == src_->size(),
        "loader: the sampler is for " << sampler.num_samples << " samples but the source has "
                                      << src_->size());
  CHECK(cfg_.ring >= 1, "loader: the ring needs at least 1 slot, got " << cfg_.ring);
  if (cfg_.threads <= 0) {
    const int hw = int(std::thread::hardware_concurrency());
    cfg_.threads = hw > 1 ? hw - 1 : 1;
  }
  sample_bytes_ = src_->sample_bytes();
  side_ = uncut_side(src_->spec());
  spec_size_ = src_->spec().size;
  if (!cfg_.bad_files_path.empty()) {  // the files an earlier process of the run listed
    std::ifstream f(cfg_.bad_files_path);
    for (std::string line; std::getline(f, line);) listed_bad_.insert(line.substr(0, line.find('\t')));
  }
  bad_flag_ = std::vector<std::atomic<uint8_t>>(size_t(src_->size()));
  const size_t B = size_t(batch_capacity());
  const bool gpu = cfg_.gpu >= 0;
  std::optional<DeviceGuard> on_gpu;  // the stream, the events and the memory belong to it
  if (gpu) {
    USER_CHECK(gpu_usable(), "loader: cannot copy batches to cuda:" << cfg_.gpu << ": "
                                                               << gpu_unavailable_reason());
    USER_CHECK(cfg_.gpu < gpu_count(), "loader: cuda:" << cfg_.gpu << " does not exist ("
                                                  << gpu_count() << " devices)");
    on_gpu.emplace(cfg_.gpu);
    copy_stream_ = std::make_unique<Stream>(cfg_.gpu);
    copy_trace_ = std::make_unique<GpuTimeline>(
        cfg_.tracer,
        "copy stream (" + (cfg_.label.empty() ? "" : cfg_.label + ", ") + "cuda:" +
            std::to_string(cfg_.gpu) + ")",
        copy_stream_->get());
  }
  for (int i = 0; i < cfg_.ring; i++) {
    auto s = std::make_unique<Slot>();
    if (gpu) {
      s->images_at = batch_images_offset(int(B));
      const size_t bytes = s->images_at + B * sample_bytes_;
      s->pinned = PinnedBuffer(bytes);
      char* p = static_cast<char*>(s->pinned.data());
      s->crops = reinterpret_cast<InputCrop*>(p);
      s->labels = reinterpret_cast<int32_t*>(p + B * sizeof(InputCrop));
      s->images = reinterpret_cast<uint8_t*>(p + s->images_at);
      s->dev = DeviceBuffer(bytes, cfg_.gpu, copy_stream_->get());
      s->copied = std::make_unique<Event>(true);
      s->copy_start = std::make_unique<Event>(true);
      s->consumed = std::make_unique<Event>(false);
    } else {
      s->host_images.resize(B * sample_bytes_);
      s->host_crops.resize(B);
      s->host_labels.resize(B);
      s->images = s->host_images.data();
      s->crops = s->host_crops.data();
      s->labels = s->host_labels.data();
    }
    slots_.push_back(std::move(s));
  }
  assign_cursor_ = deliver_cursor_ = start;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < cfg_.ring; i++) assign_locked(i);
  }
  workers_.reserve(size_t(cfg_.threads));  // push_back cannot throw once a thread runs
  try {
    for (int t = 0; t < cfg_.threads; t++)
      workers_.push_back(start_thread("decode thread " + std::to_string(t + 1) + " of " +
                                          std::to_string(cfg_.threads),
                                      [this, t] { worker_main(t); }));
  } catch (...) {  // the destructor does not run for a constructor that throws
    shutdown();
    throw;
  }
}

void Loader::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  full_cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  if (copy_stream_) copy_stream_->synchronize();  // no copy may outlive its buffers
  if (copy_trace_) copy_trace_->flush();           // the workers are gone: no lock needed
}

Loader::~Loader() { shutdown(); }

void Loader::assign_locked(int slot) {
  Slot& s = *slots_[size_t(slot)];
  s.seq = next_assign_seq_++;
  s.where = assign_cursor_;
  assign_cursor_ = sampler_.next(assign_cursor_);
  s.indices = sampler_.batch(s.where.epoch, s.where.batch);
  s.good.assign(s.indices.size(), 0);
  s.remaining = int(s.indices.size());
  s.state = Slot::State::filling;
  s.freed_at = {};
  s.load_s = 0;
  slot_of_seq_[s.seq] = slot;
  if (s.remaining == 0) {  // an empty shard (tiny last batch split over many replicas)
    s.n = 0;
    s.state = Slot::State::full;
    full_cv_.notify_all();
    return;
  }
  // A task is a run of samples: small enough that every worker gets a share of the batch,
  // large enough that tiny images (28x28 decodes in microseconds) do not spend their time on
  // the queue's lock. About four tasks per worker per batch.
  const int n = s.remaining;
  const int chunk = std::max(1, n / (4 * cfg_.threads));
  for (int pos = 0; pos < n; pos += chunk) tasks_.push_back(Task{slot, pos, std::min(n, pos + chunk)});
  work_cv_.notify_all();
}

void Loader::worker_main(int index) {
  if (cfg_.gpu >= 0) set_device(cfg_.gpu);  // the current device is per thread
  if (cfg_.tracer)
    cfg_.tracer->name_thread((cfg_.label.empty() ? "" : cfg_.label + " ") + "loader worker " +
                             std::to_string(index));
  StageTimes times;
  double idle = 0, slot_wait = 0;
  for (;;) {
    Task task;
    bool wait_consumed = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto t0 = std::chrono::steady_clock::now();
      work_cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      idle += seconds_since(t0);
      if (stop_) break;
      task = tasks_.front();
      tasks_.pop_front();
      wait_consumed = slots_[size_t(task.slot)]->consumed_pending;
    }
    Slot& s = *slots_[size_t(task.slot)];
    std::chrono::steady_clock::time_point freed{};  // when the device gave the slot back
    if (wait_consumed && !s.consumed->done()) {  // the batch it held is still read by the GPU
      TraceSpan span(cfg_.tracer, "wait for slot", "loader");
      const auto t0 = std::chrono::steady_clock::now();
      s.consumed->synchronize();
      freed = std::chrono::steady_clock::now();
      slot_wait += std::chrono::duration<double>(freed - t0).count();
    }
    try {
      TraceSpan span(cfg_.tracer, "decode", "loader");  // read + decode + augment of the run
      span.arg("batch", s.seq);
      span.arg("samples", task.end - task.begin);
      for (int pos = task.begin; pos < task.end; pos++) {
        const int64_t index = s.indices[size_t(pos)];
        bool ok = false;
        if (!known_bad(index)) {
          const uint64_t key =
              sampler_.draw_augment_key(s.where.epoch, s.where.batch, pos, index);
          InputCrop& window = s.crops[size_t(pos)];
          window = InputCrop{};
          const DecodeResult r =
              src_->load(index, key, s.images + size_t(pos) * sample_bytes_, window, times);
          ok = r.ok();
          if (!ok) record_bad(index, r);  // throws in strict mode
          // On the host, before the window reaches a GPU: its kernel reads what it is told.
          if (ok) input_check_crops(1, side_, side_, spec_size_, &window);
        }
        s.good[size_t(pos)] = ok;
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
      stop_ = true;
      work_cv_.notify_all();
      full_cv_.notify_all();
      break;
    }
    bool last = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      s.remaining -= task.end - task.begin;
      last = s.remaining == 0;
      s.freed_at = std::max(s.freed_at, freed);
      s.load_s += times.read_s + times.decode_s + times.augment_s;
      stats_.stages.read_s += times.read_s;
      stats_.stages.decode_s += times.decode_s;
      stats_.stages.augment_s += times.augment_s;
      stats_.worker_idle_s += idle;
      stats_.slot_wait_s += slot_wait;
      times = StageTimes();
      idle = slot_wait = 0;
    }
    if (last) complete(task.slot);
  }
}

void Loader::complete(int slot) {
  Slot& s = *slots_[size_t(slot)];
  // Compact: move the good samples to the front, keeping their order.
  int n = 0;
  for (size_t pos = 0; pos < s.indices.size(); pos++) {
    if (!s.good[pos]) continue;
    if (size_t(n) != pos) {
      std::memmove(s.images + size_t(n) * sample_bytes_, s.images + pos * sample_bytes_,
                   sample_bytes_);
      s.crops[n] = s.crops[pos];
      s.indices[size_t(n)] = s.indices[pos];
    }
    s.labels[n] = src_->label(s.indices[size_t(n)]);
    n++;
  }
  s.indices.resize(size_t(n));
  s.n = n;
  if (cfg_.gpu >= 0 && n > 0) {
    // The host-side issue of the copy on this worker's row; the copy itself on the copy
    // stream's row (copy_trace_: finished copies are moved into the tracer here, never
    // waiting) and in LoaderStats::copy_ms (its event pair, read back in release()).
    TraceSpan span(cfg_.tracer, "copy issue", "copy");
    span.arg("batch", s.seq);
    if (s.copy_timed) {  // the slot's previous copy, still running when it was released
      s.copied->synchronize();  // done by now: the slot's consumption (waited for) came after
      const double ms = s.copied->ms_since(*s.copy_start);
      std::lock_guard<std::mutex> lock(mu_);
      stats_.copy_ms += ms;
    }
    cudaStream_t cs = copy_stream_->get();
    std::lock_guard<std::mutex> lock(copy_mu_);
    copy_trace_->collect();
    copy_trace_->begin("copy batch", {"batch", s.seq});
    s.copy_start->record(cs);
    // Windows and labels (the whole capacity: small) and the batch's n images, in one copy
    // (batch_copy_costs says what it costs: keep the two together).
    copy_async(s.dev.data(), s.pinned.data(), s.images_at + size_t(n) * sample_bytes_, cs);
    s.copied->record(cs);
    copy_trace_->end();
    s.copy_timed = true;
  }
  std::lock_guard<std::mutex> lock(mu_);
  s.state = Slot::State::full;
  full_cv_.notify_all();
}

Batch Loader::next(cudaStream_t compute) {
  TraceSpan span(cfg_.tracer, "wait for batch", "loader");  // made before the lock, ends after
  std::unique_lock<std::mutex> lock(mu_);
  span.arg("batch", next_deliver_seq_);
  for (const auto& s : slots_) occupancy_sum_ += s->state == Slot::State::full;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t seq = next_deliver_seq_;
  auto ready = [&] {
    if (error_ || stop_) return true;
    auto it = slot_of_seq_.find(seq);
    return it != slot_of_seq_.end() && slots_[size_t(it->second)]->state == Slot::State::full;
  };
  full_cv_.wait(lock, ready);
  const auto t1 = std::chrono::steady_clock::now();
  if (error_) std::rethrow_exception(error_);
  CHECK(!stop_, "loader: next() after the loader was stopped");
  const int slot = slot_of_seq_[seq];
  slot_of_seq_.erase(seq);
  Slot& s = *slots_[size_t(slot)];
  // The wait, and the part of it before the device gave the slot back (no worker could write
  // the batch yet). Its workers are done, so they have all said when that was.
  const double wait_s = std::chrono::duration<double>(t1 - t0).count();
  const double held_s =
      std::clamp(std::chrono::duration<double>(s.freed_at - t0).count(), 0.0, wait_s);
  stats_.consumer_wait_s += wait_s;
  stats_.consumer_wait_held_s += held_s;
  s.state = Slot::State::in_use;
  next_deliver_seq_++;
  deliver_cursor_ = sampler_.next(deliver_cursor_);
  stats_.batches++;
  stats_.samples += s.n;
  stats_.mean_full_slots = double(occupancy_sum_) / double(stats_.batches);
  if (cfg_.gpu >= 0 && s.n > 0) s.copied->wait(compute);

  Batch b;
  b.seq = seq;
  b.where = s.where;
  b.n = s.n;
  b.side = side_;
  b.size = spec_size_;
  b.channels = src_->spec().channels;
  b.images = s.images;
  b.crops = s.crops;
  b.labels = s.labels;
  b.indices = s.indices.data();
  if (cfg_.gpu >= 0) {
    const char* d = static_cast<const char*>(s.dev.data());
    b.d_crops = reinterpret_cast<const InputCrop*>(d);
    b.d_labels = reinterpret_cast<const int32_t*>(d + size_t(batch_capacity()) * sizeof(InputCrop));
    b.d_images = d + s.images_at;
  }
  b.slot = slot;
  b.load_s = s.load_s;
  b.wait_s = wait_s;
  b.wait_held_s = held_s;
  return b;
}

void Loader::release(const Batch& b, cudaStream_t compute) {
  CHECK(b.slot >= 0 && b.slot < int(slots_.size()), "loader: release of an unknown batch");
  Slot& s = *slots_[size_t(b.slot)];
  std::lock_guard<std::mutex> lock(mu_);
  CHECK(s.state == Slot::State::in_use && s.seq == b.seq,
        "loader: batch " << b.seq << " released twice or not taken with next()");
  if (cfg_.gpu >= 0) {
    // The copy's time, if it has finished: the compute stream waited for it, the host did not,
    // so it may still run; then the worker that refills the slot counts it (complete()).
    if (s.copy_timed && s.copied->done()) {
      stats_.copy_ms += s.copied->ms_since(*s.copy_start);
      s.copy_timed = false;
    }
    s.consumed->record(compute);
    s.consumed_pending = true;
  }
  s.state = Slot::State::free;
  if (!stop_) assign_locked(b.slot);
}

bool Loader::known_bad(int64_t index) {
  return bad_flag_[size_t(index)].load(std::memory_order_relaxed) != 0;
}

void Loader::record_bad(int64_t index, const DecodeResult& r) {
  const std::string name = src_->name(index);
  // The name comes from a list or a folder: printed printable, as is the decoder's message.
  USER_CHECK(!cfg_.strict, "bad file (" << image_error_name(r.error) << "): " << printable(name)
                                        << ": " << printable(r.message) << " (--strict: stopping)");
  std::lock_guard<std::mutex> lock(bad_mu_);
  if (bad_flag_[size_t(index)].exchange(1)) return;  // two workers of two epochs: count it once
  bad_.push_back(BadFile{index, name, r.error, r.message});
  const size_t count = bad_.size();
  if (int(count) <= cfg_.print_bad)
    std::fprintf(stderr, "cutrain: skipping bad file (%s): %s: %s\n", image_error_name(r.error),
                 printable(name).c_str(), printable(r.message).c_str());
  if (int(count) == cfg_.print_bad)
    std::fprintf(stderr, "cutrain: further bad files are not printed%s%s\n",
                 cfg_.bad_files_path.empty() ? "" : "; all are listed in ",
                 printable(cfg_.bad_files_path).c_str());
  // One line per file in the run's list, however often the run is resumed: a file listed
  // by an earlier process is found again (it is still bad), but not listed twice.
  if (!cfg_.bad_files_path.empty() && listed_bad_.insert(name).second) {
    std::ofstream f(cfg_.bad_files_path, std::ios::app);
    f << name << '\t' << image_error_name(r.error) << '\t' << r.message << '\n';
    f.close();
    if (!f.good() && !bad_file_write_failed_) {  // say so once; training goes on
      bad_file_write_failed_ = true;
      std::fprintf(stderr, "cutrain: cannot write %s: %s\n", printable(cfg_.bad_files_path).c_str(),
                   std::strerror(errno));
    }
  }
}

SamplerCursor Loader::cursor() const {
  std::lock_guard<std::mutex> lock(mu_);
  return deliver_cursor_;
}

LoaderStats Loader::stats() const {
  LoaderStats st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    st = stats_;
  }
  std::lock_guard<std::mutex> lock(bad_mu_);
  st.bad_files = int64_t(bad_.size());
  return st;
}

std::vector<BadFile> Loader::bad_files() const {
  std::lock_guard<std::mutex> lock(bad_mu_);
  return bad_;
}

int Loader::batch_capacity() const {
  // A replica's shard of a global batch of B is at most ceil(B / R) (data/sampler.h).
  const SamplerConfig& sc = sampler_.config();
  return int((sc.batch_size + sc.replicas - 1) / sc.replicas);
}

size_t batch_images_offset(int capacity) {
  const size_t head = size_t(capacity) * (sizeof(InputCrop) + sizeof(int32_t));
  return (head + 255) / 256 * 256;  // the images on a 256-byte boundary
}

std::vector<LaunchCost> batch_copy_costs(int n, int capacity, size_t sample_bytes) {
  if (n <= 0) return {};
  LaunchCost c = copy_cost("copy (batch to the device, copy stream)",
                           batch_images_offset(capacity) + size_t(n) * sample_bytes, false);
  c.other_stream = true;
  return {c};
}

}  // namespace cutrain
