// Fashion-MNIST import: IDX files -> grayscale JPEGs + train/test lists + classes.txt.
// The order of work is what makes it safe to kill: remove old lists, write every image, then
// rename the new lists into place.
#include "data/fashion_mnist.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

#include "data/atomic_file.h"
#include "data/idx.h"
#include "data/image.h"
#include "kernels/check.h"
#include "kernels/thread_start.h"

namespace cutrain {
namespace {
namespace fs = std::filesystem;

constexpr int kClasses = 10;

// The two splits: the folder and list name, and the prefix of the IDX files.
struct SplitName {
  const char* name;
  const char* idx_prefix;
};
constexpr SplitName kSplits[2] = {{"train", "train"}, {"test", "t10k"}};

std::string idx_file(const std::string& dir, const char* prefix, const char* kind) {
  return (fs::path(dir) / (std::string(prefix) + "-" + kind + "-ubyte.gz")).string();
}

// "train/9/00000.jpg": relative to out_dir.
std::string image_path(const char* split, int label, int64_t index) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s/%d/%05lld.jpg", split, label, (long long)index);
  return buf;
}

// The list of a split, exactly as it is written: one "path<TAB>label" line per image.
std::string list_text(const char* split, const std::vector<uint8_t>& labels) {
  std::string s;
  for (size_t i = 0; i < labels.size(); i++)
    s += image_path(split, labels[i], int64_t(i)) + "\t" + std::to_string(labels[i]) + "\n";
  return s;
}

std::string classes_text() {
  std::string s;
  for (const std::string& c : fashion_mnist_classes()) s += c + "\n";
  return s;
}

void check_labels(const std::vector<uint8_t>& labels, const std::string& path) {
  for (size_t i = 0; i < labels.size(); i++)
    USER_CHECK(labels[i] < kClasses, path << ": label " << int(labels[i]) << " of sample " << i
                                     << " is outside [0, " << kClasses << ")");
}

// Reads the whole file into *out; false when it cannot be read.
bool read_text(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), {});
  return !f.bad();
}

void write_file(const std::string& path, const void* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  USER_CHECK(f != nullptr, path << ": cannot create: " << std::strerror(errno));
  const bool wrote = std::fwrite(data, 1, size, f) == size;
  const int werr = errno;
  const bool closed = std::fclose(f) == 0;  // reports a full disk on buffered data
  USER_CHECK(wrote && closed, path << ": write failed: " << std::strerror(wrote ? errno : werr));
}

// A previous import is complete when its lists and classes.txt are exactly what this one
// would write and every listed image exists and is non-empty.
bool is_complete(const std::string& out_dir, const std::string expected_lists[2],
                 const std::vector<uint8_t>* labels[2]) {
  std::string text;
  if (!read_text((fs::path(out_dir) / "classes.txt").string(), &text) || text != classes_text())
    return false;
  for (int s = 0; s < 2; s++) {
    const fs::path list = fs::path(out_dir) / (std::string(kSplits[s].name) + ".txt");
    if (!read_text(list.string(), &text) || text != expected_lists[s]) return false;
    for (size_t i = 0; i < labels[s]->size(); i++) {
      std::error_code ec;
      const auto size = fs::file_size(
          fs::path(out_dir) / image_path(kSplits[s].name, (*labels[s])[i], int64_t(i)), ec);
      if (ec || size == 0) return false;
    }
  }
  return true;
}

// Runs work(i) for every i in [0, total) on `threads` threads, which take chunks of indices
// from a shared counter. The calling thread only waits, calling progress about four times a
// second. The first exception thrown by any worker stops the others and is rethrown here.
void parallel_for(int64_t total, int threads, const std::function<void(int64_t)>& work,
                  const std::function<void(int64_t, int64_t)>& progress) {
  constexpr int64_t kChunk = 64;
  std::atomic<int64_t> next{0}, done{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex m;
  std::condition_variable finished;
  int running = threads;  // guarded by m
  auto worker = [&] {
    try {
      for (int64_t begin; !failed && (begin = next.fetch_add(kChunk)) < total;) {
        const int64_t end = std::min(begin + kChunk, total);
        for (int64_t i = begin; i < end; i++) work(i);
        done += end - begin;
      }
    } catch (...) {
      std::lock_guard<std::mutex> lk(m);
      if (!error) error = std::current_exception();
      failed = true;
    }
    std::lock_guard<std::mutex> lk(m);
    if (--running == 0) finished.notify_one();
  };
  // Joins on every way out, so a throw here never leaves a joinable thread behind.
  struct JoinAll {
    std::vector<std::thread> pool;
    ~JoinAll() {
      for (auto& t : pool)
        if (t.joinable()) t.join();
    }
  } workers;
  workers.pool.reserve(size_t(threads));
  try {
    for (int t = 0; t < threads; t++)
      workers.pool.push_back(start_thread("encoder thread " + std::to_string(t + 1) + " of " +
                                              std::to_string(threads),
                                          worker));
  } catch (...) {
    failed = true;  // the running ones stop at their next chunk; JoinAll joins them
    throw;
  }
  {
    std::unique_lock<std::mutex> lk(m);
    while (!finished.wait_for(lk, std::chrono::milliseconds(250), [&] { return running == 0; }))
      if (progress && done < total) {  // the final count is reported once, below
        lk.unlock();
        progress(done, total);
        lk.lock();
      }
  }
  for (auto& t : workers.pool) t.join();
  if (error) std::rethrow_exception(error);
  if (progress) progress(done, total);
}

}  // namespace

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress",
                                                 "Coat",        "Sandal",  "Shirt",    "Sneaker",
                                                 "Bag",         "Ankle boot"};
  return names;
}

std::string fashion_mnist_idx_dir() {
  const char* dir = std::getenv("CUTRAIN_FASHION_MNIST_DIR");
  return dir != nullptr && *dir != 0 ? dir : kFashionMnistDir;
}

ImportSummary import_fashion_mnist(const std::string& idx_dir, const std::string& out_dir,
                                   const ImportOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  USER_CHECK(opt.quality >= 1 && opt.quality <= 100,
        "JPEG quality must be in [1, 100]; got " << opt.quality);
  USER_CHECK(opt.threads >= 0, "threads must be >= 0 (0: the hardware threads); got " << opt.threads);
  USER_CHECK(!out_dir.empty(), "the output folder must be named");
  const fs::path out(out_dir);
  ImportSummary sum;
  sum.out_dir = out_dir;
  sum.train_list = (out / "train.txt").string();
  sum.test_list = (out / "test.txt").string();
  sum.classes_file = (out / "classes.txt").string();
  const std::string list_paths[2] = {sum.train_list, sum.test_list};
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };

  // The labels alone (a few kB) decide what the lists must say, and so whether a previous
  // import can be kept; the images (55 MB) are read only when there is work to do.
  std::vector<uint8_t> labels[2];
  std::string lists[2];
  for (int s = 0; s < 2; s++) {
    const std::string path = idx_file(idx_dir, kSplits[s].idx_prefix, "labels-idx1");
    labels[s] = read_idx_labels(path);
    check_labels(labels[s], path);
    lists[s] = list_text(kSplits[s].name, labels[s]);
  }
  sum.train = int64_t(labels[0].size());
  sum.test = int64_t(labels[1].size());
  const std::vector<uint8_t>* label_ptrs[2] = {&labels[0], &labels[1]};
  if (!opt.force && is_complete(out_dir, lists, label_ptrs)) {
    sum.reused = true;
    sum.seconds = seconds();
    return sum;
  }

  // From here on no list may point at an image being rewritten: remove them first.
  for (const std::string& p : {sum.train_list, sum.test_list, sum.classes_file}) {
    std::error_code ec;
    fs::remove(p, ec);
    USER_CHECK(!ec, p << ": cannot remove the old file: " << ec.message());
  }
  IdxImages images[2];
  for (int s = 0; s < 2; s++) {
    IdxDataset d = read_idx_dataset(idx_file(idx_dir, kSplits[s].idx_prefix, "images-idx3"),
                                    idx_file(idx_dir, kSplits[s].idx_prefix, "labels-idx1"));
    USER_CHECK(d.labels == labels[s], idx_dir << ": the label file changed during the import");
    images[s] = std::move(d.images);
    for (int c = 0; c < kClasses; c++) {
      const fs::path folder = out / kSplits[s].name / std::to_string(c);
      std::error_code ec;
      fs::create_directories(folder, ec);
      USER_CHECK(!ec, folder.string() << ": cannot create the folder: " << ec.message());
    }
  }

  sum.threads = opt.threads > 0 ? opt.threads
                                : int(std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<int64_t> bytes{0};
  parallel_for(sum.train + sum.test, sum.threads, [&](int64_t g) {
    const int s = g < sum.train ? 0 : 1;  // global index -> split and index in the split
    const int64_t i = s == 0 ? g : g - sum.train;
    const IdxImages& im = images[s];
    const std::vector<uint8_t> jpeg = encode_jpeg(im.image(i), im.H, im.W, 1, opt.quality);
    write_file((out / image_path(kSplits[s].name, labels[s][size_t(i)], i)).string(),
               jpeg.data(), jpeg.size());
    bytes += int64_t(jpeg.size());
  }, opt.progress);
  sum.jpeg_bytes = bytes;

  // Every image is on disk: now the lists may appear, classes.txt last.
  for (int s = 0; s < 2; s++) write_file_atomically(list_paths[s], lists[s]);
  write_file_atomically(sum.classes_file, classes_text());
  sum.seconds = seconds();
  return sum;
}

}  // namespace cutrain
