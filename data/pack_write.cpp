// write_pack: decode threads -> an ordered, bounded window -> one writer thread -> HDF5.
//
// Why this shape: decoding is the slow part and parallelises, but the serial HDF5 library is
// not thread-safe, so every H5 call is made by ONE thread, the caller's (and under H5Lock,
// in case other threads use HDF5 meanwhile). Workers decode image i into slot i % window of a
// bounded window; the writer takes the images in list order, so the pack's order is the list's
// whatever the thread count, and memory stays at `window` images however long the list is.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include "data/atomic_file.h"
#include "data/hdf5_io.h"
#include "data/pack.h"
#include "kernels/check.h"
#include "kernels/thread_start.h"

namespace cutrain {

namespace fs = std::filesystem;

namespace {

// Chunks of whole images, about 64 KiB: one chunk holds one image of 128x128x3 and up, 83 of
// Fashion-MNIST's 28x28x1. A random read touches one chunk; small images do not pay HDF5's
// per-chunk cost (an index entry, a separate I/O) 60,000 times; and a pack small enough to be
// read whole at open (PackSource) is read in large pieces.
// No compression. Measured on Fashion-MNIST's 60,000 training images (28x28x1, 47 MB of
// pixels; 2-core VM, files in the page cache):
//   chunk (images)  deflate  write MB/s  file MB  random single-image reads/s
//        1            -         156       51.0        278,000
//       83            -         802       47.1        100,000
//       83            1          72       27.3          3,300
//      512            -        1228       47.4         24,000
// Deflate saves 40% of the disk but makes every random read inflate a whole chunk (30x
// slower) and writing 10x slower; disk is cheap next to a GPU waiting for data.
constexpr int64_t kChunkTargetBytes = 64 << 10;
// The writer hands HDF5 this many bytes at a time (a whole number of chunks).
constexpr int64_t kWriteTargetBytes = 4 << 20;

// The ordered window between decode workers and the writer (a bounded reorder queue).
class DecodeWindow {
 public:
  struct Slot {
    std::vector<uint8_t> pixels;  // (H, W, C)
    DecodeResult result;
    bool ready = false;
  };

  DecodeWindow(int64_t total, int64_t window, size_t image_bytes)
      : total_(total), slots_(size_t(window)) {
    for (Slot& s : slots_) s.pixels.resize(image_bytes);
  }

  // Worker: the next image to decode, once its slot is free; -1 when there is none left.
  int64_t claim() {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopped_ || next_ >= total_) return -1;
    const int64_t i = next_++;
    slot_free_.wait(lock, [&] { return stopped_ || i < released_ + int64_t(slots_.size()); });
    return stopped_ ? -1 : i;
  }
  uint8_t* pixels(int64_t i) { return slots_[slot(i)].pixels.data(); }
  void publish(int64_t i, DecodeResult r) {
    std::lock_guard<std::mutex> lock(mu_);
    slots_[slot(i)].result = std::move(r);
    slots_[slot(i)].ready = true;
    ready_.notify_all();
  }

  // Writer: waits for image i (rethrowing a worker's exception), then hands back its slot.
  const Slot& wait(int64_t i) {
    std::unique_lock<std::mutex> lock(mu_);
    ready_.wait(lock, [&] { return error_ || slots_[slot(i)].ready; });
    if (error_) std::rethrow_exception(error_);
    return slots_[slot(i)];
  }
  void release(int64_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    slots_[slot(i)].ready = false;
    released_ = i + 1;
    slot_free_.notify_all();
  }

  // Stops the workers (they finish the image they hold); with an error, the writer rethrows it.
  void stop(std::exception_ptr error = nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    if (error && !error_) error_ = error;
    slot_free_.notify_all();
    ready_.notify_all();
  }

 private:
  size_t slot(int64_t i) const { return size_t(i % int64_t(slots_.size())); }

  const int64_t total_;
  std::vector<Slot> slots_;
  std::mutex mu_;
  std::condition_variable slot_free_, ready_;
  int64_t next_ = 0;      // next image to claim
  int64_t released_ = 0;  // images the writer is done with
  bool stopped_ = false;
  std::exception_ptr error_;
};

// Starts the decode workers; on destruction (normal or by exception) stops and joins them.
class DecodeWorkers {
 public:
  DecodeWorkers(int threads, DecodeWindow& window, const ImageList& list, const ImageSpec& spec)
      : window_(window) {
    try {
      start(threads, list, spec);
    } catch (...) {  // could not start a thread: stop the ones that did start
      stop_and_join();
      throw;
    }
  }
  ~DecodeWorkers() { stop_and_join(); }

 private:
  void stop_and_join() {
    window_.stop();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }
  void start(int threads, const ImageList& list, const ImageSpec& spec) {
    DecodeWindow& window = window_;
    for (int t = 0; t < threads; t++) {
      const std::string name =
          "decode thread " + std::to_string(t + 1) + " of " + std::to_string(threads);
      threads_.push_back(start_thread(name, [&window, &list, spec] {
        try {
          for (int64_t i; (i = window.claim()) >= 0;)
            window.publish(i, load_sample(list.samples[size_t(i)].path, spec, 0, window.pixels(i)));
        } catch (...) {
          window.stop(std::current_exception());  // a bug or no memory, not a bad file
        }
      }));
    }
  }

  DecodeWindow& window_;
  std::vector<std::thread> threads_;
};

// All the HDF5 work: creates `path`, writes everything, closes it (checked). On an exception
// the handles close in reverse order as the stack unwinds. Messages name `shown`, the pack
// the user asked for (`path` is its temporary name), and the system's reason: a write that
// fails (a full disk, a file size limit) is a user error saying where and why.
void write_pack_file(const ImageList& list, const std::string& path, const std::string& shown,
                     const PackOptions& opt, const PackProgress& progress,
                     PackSummary& summary) {
  const int64_t n = int64_t(list.samples.size());
  const int S = opt.size, C = opt.channels;
  const int64_t image_bytes = int64_t(S) * S * C;
  const int64_t chunk = std::max<int64_t>(1, kChunkTargetBytes / image_bytes);
  const int64_t batch = chunk * std::max<int64_t>(1, kWriteTargetBytes / (chunk * image_bytes));

  // Only this thread makes H5 calls, and only while it holds the HDF5 lock: here, in flush(),
  // and at the end. It lets go while it waits for decoded images, so that other threads of
  // the process (a PackSource, a checkpoint) can use HDF5 meanwhile.
  std::unique_lock<std::recursive_mutex> h5(hdf5_mutex());
  H5Handle fapl = h5_file_access();
  H5Handle file = h5_owned(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()),
                           H5Fclose, "cannot create '" + shown + "'");

  // /images (N, S, S, C) uint8; N is an upper bound, shrunk to the packed count at the end.
  const hsize_t dims[4] = {hsize_t(n), hsize_t(S), hsize_t(S), hsize_t(C)};
  const hsize_t max_dims[4] = {H5S_UNLIMITED, hsize_t(S), hsize_t(S), hsize_t(C)};
  const hsize_t chunk_dims[4] = {hsize_t(chunk), hsize_t(S), hsize_t(S), hsize_t(C)};
  H5Handle dcpl = h5_owned(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "dataset properties");
  h5_check(H5Pset_chunk(dcpl.get(), 4, chunk_dims), "dataset properties");
  // Every chunk is written whole, so filling it with zeros first would only cost time.
  h5_check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "dataset properties");
  H5Handle space = h5_owned(H5Screate_simple(4, dims, max_dims), H5Sclose, "dataspace");
  H5Handle images = h5_owned(H5Dcreate2(file.get(), "images", H5T_STD_U8LE, space.get(),
                                        H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                             H5Dclose, "cannot create dataset 'images' in '" + shown + "'");

  std::vector<uint8_t> staging;  // (batch, S, S, C): the next images to write
  staging.reserve(size_t(batch * image_bytes));
  std::vector<int32_t> labels;
  std::vector<int64_t> source_index;
  auto flush = [&] {
    const hsize_t start[4] = {hsize_t(summary.packed), 0, 0, 0};
    const hsize_t count[4] = {hsize_t(int64_t(staging.size()) / image_bytes), hsize_t(S),
                              hsize_t(S), hsize_t(C)};
    if (count[0] == 0) return;
    H5Lock lock;
    H5Handle mem = h5_owned(H5Screate_simple(4, count, nullptr), H5Sclose, "dataspace");
    h5_check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr),
             "select images");
    h5_check(H5Dwrite(images.get(), H5T_NATIVE_UINT8, mem.get(), space.get(), H5P_DEFAULT,
                      staging.data()),
             "cannot write images to '" + shown + "'");
    summary.packed += int64_t(count[0]);
    staging.clear();
  };

  h5.unlock();
  {
    const int threads = opt.threads > 0 ? opt.threads
                                        : int(std::max(1u, std::thread::hardware_concurrency()));
    ImageSpec spec;  // a centred size x size square, no randomness
    spec.size = S;
    spec.channels = C;
    spec.resize = S;
    DecodeWindow window(n, std::max<int64_t>(4 * threads, 16), size_t(image_bytes));
    DecodeWorkers workers(threads, window, list, spec);
    for (int64_t i = 0; i < n; i++) {
      const DecodeWindow::Slot& s = window.wait(i);
      const Sample& sample = list.samples[size_t(i)];
      if (s.result.ok()) {
        staging.insert(staging.end(), s.pixels.begin(), s.pixels.end());
        labels.push_back(sample.label);
        source_index.push_back(i);
        if (int64_t(staging.size()) == batch * image_bytes) flush();
      } else {
        USER_CHECK(!opt.strict, "bad image (--strict stops at the first): " << sample.path << ": "
                                << s.result.message);
        summary.bad.push_back({i, sample.path, s.result.error, s.result.message});
      }
      window.release(i);
      if (progress) progress(i + 1, n);
    }
  }  // the workers are joined here
  flush();
  h5.lock();
  USER_CHECK(summary.packed > 0, "none of the " << n << " images of '" << list.source
                                << "' could be loaded; the first: " << summary.bad[0].name
                                << ": " << summary.bad[0].message);

  const hsize_t final_dims[4] = {hsize_t(summary.packed), hsize_t(S), hsize_t(S), hsize_t(C)};
  h5_check(H5Dset_extent(images.get(), final_dims), "cannot resize 'images' in '" + shown + "'");
  try {  // the labels, names and attributes: a failure here is the file's too
    h5_write_vector(file.get(), "labels", labels.data(), summary.packed, H5T_NATIVE_INT32,
                    H5T_STD_I32LE);
    h5_write_vector(file.get(), "source_index", source_index.data(), summary.packed,
                    H5T_NATIVE_INT64, H5T_STD_I64LE);
    h5_write_strings(file.get(), "class_names", list.class_names);
    std::vector<std::string> bad_files, bad_reasons;
    for (const BadFile& b : summary.bad) {
      bad_files.push_back(b.name);
      bad_reasons.push_back(b.message);
    }
    h5_write_strings(file.get(), "bad_files", bad_files);
    h5_write_strings(file.get(), "bad_reasons", bad_reasons);

    const hid_t root = file.get();
    h5_write_string_attribute(root, "format", kPackFormat);
    h5_write_int_attribute(root, "version", kPackVersion, H5T_STD_I32LE);
    h5_write_int_attribute(root, "size", S, H5T_STD_I32LE);
    h5_write_int_attribute(root, "channels", C, H5T_STD_I32LE);
    h5_write_string_attribute(root, "source", list.source.empty() ? "" :
                              fs::absolute(list.source).lexically_normal().string());
    h5_write_uint_attribute(root, "source_hash", image_list_hash(list));
    h5_write_int_attribute(root, "source_count", n, H5T_STD_I64LE);
  } catch (const UserError& e) {
    throw UserError("cannot write '" + shown + "': " + e.what());
  }

  images.close();
  space.close();
  USER_CHECK(file.close(), "cannot finish writing '" << shown << "': " << h5_error_text());
}

}  // namespace

PackSummary write_pack(const ImageList& list, const std::string& out_path,
                       const PackOptions& opt, const PackProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  USER_CHECK(opt.size >= 1, "pack size must be at least 1, got " << opt.size);
  USER_CHECK(opt.channels == 1 || opt.channels == 3,
        "pack channels must be 1 or 3, got " << opt.channels);
  USER_CHECK(opt.threads >= 0, "pack threads must be >= 0 (0: all), got " << opt.threads);
  USER_CHECK(!list.samples.empty(), "the image list '" << list.source << "' has no samples");
  USER_CHECK(!out_path.empty(), "no output path for the pack");
  std::error_code ec;
  USER_CHECK(!fs::is_directory(out_path, ec), "'" << out_path << "' is a folder, not a pack file");
  USER_CHECK(!fs::equivalent(out_path, list.source, ec),
        "the pack '" << out_path << "' would overwrite its own image list");

  PackSummary summary;
  summary.listed = int64_t(list.samples.size());
  // Atomic: a reader opening out_path gets the old pack or the new one; one that has the old
  // pack open keeps reading it (its inode lives on until closed). See data/atomic_file.h.
  write_atomically(out_path, [&](const std::string& tmp) {
    write_pack_file(list, tmp, out_path, opt, progress, summary);
  });
  summary.bytes_on_disk = int64_t(fs::file_size(out_path));
  summary.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace cutrain
