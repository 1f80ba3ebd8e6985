// A folder of JPEG files with its lists (see image_set.h). The order of work is what makes it
// safe to kill: remove the old lists, write every image, then rename the new lists into place.
#include "data/image_set.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

#include "data/atomic_file.h"
#include "kernels/check.h"
#include "kernels/thread_start.h"

namespace cutrain {
namespace {
namespace fs = std::filesystem;

// The list of a split, exactly as it is written: one "path<TAB>label" line per image.
std::string list_text(const ImageSetSplit& split) {
  std::string s;
  for (size_t i = 0; i < split.labels.size(); i++)
    s += image_set_path(split.name, split.labels[i], int64_t(i)) + "\t" +
         std::to_string(split.labels[i]) + "\n";
  return s;
}

std::string lines_text(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
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

// What the files named `name` under out_dir must hold: the lists, classes.txt, recipe.txt.
struct Expected {
  std::string name, text;
};

// A previous write is complete when its lists, classes.txt and recipe.txt are exactly what this
// one would write and every listed image exists and is non-empty. A recipe this call does not
// write must not be there either.
bool is_complete(const fs::path& out, const std::vector<Expected>& files, bool recipe,
                 const std::vector<ImageSetSplit>& splits) {
  std::string text;
  for (const Expected& e : files)
    if (!read_text((out / e.name).string(), &text) || text != e.text) return false;
  if (!recipe && fs::exists(out / "recipe.txt")) return false;
  for (const ImageSetSplit& s : splits)
    for (size_t i = 0; i < s.labels.size(); i++) {
      std::error_code ec;
      const auto size = fs::file_size(out / image_set_path(s.name, s.labels[i], int64_t(i)), ec);
      if (ec || size == 0) return false;
    }
  return true;
}

// Runs work(i) for every i in [0, total) on `threads` threads, which take chunks of indices
// from a shared counter. The calling thread only waits, calling progress about four times a
// second. The first exception thrown by any worker stops the others and is rethrown here.
void parallel_for(int64_t total, int threads, const std::function<void(int64_t)>& work,
                  const std::function<void(int64_t, int64_t)>& progress) {
  constexpr int64_t kChunk = 16;
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

std::string image_set_path(const std::string& split, int label, int64_t index) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "/%d/%05lld.jpg", label, (long long)index);
  return split + buf;
}

ImageSetSummary write_image_set(const std::string& out_dir,
                                const std::vector<std::string>& class_names,
                                const std::vector<ImageSetSplit>& splits,
                                const std::function<std::vector<uint8_t>(int, int64_t)>& jpeg,
                                const std::string& recipe, const ImageSetOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  USER_CHECK(opt.threads >= 0, "threads must be >= 0 (0: the hardware threads); got " << opt.threads);
  USER_CHECK(!out_dir.empty(), "the output folder must be named");
  CHECK(!class_names.empty() && !splits.empty(), "write_image_set: no classes or no splits");
  const int classes = int(class_names.size());
  for (const ImageSetSplit& s : splits) {
    CHECK(s.labels.size() <= 100000, "write_image_set: " << s.name << " has " << s.labels.size()
                                                         << " images; the names hold 5 digits");
    for (size_t i = 0; i < s.labels.size(); i++)
      CHECK(s.labels[i] >= 0 && s.labels[i] < classes,
            "write_image_set: " << s.name << " image " << i << " has label " << s.labels[i]
                                << ", outside [0, " << classes << ")");
  }
  const fs::path out(out_dir);
  ImageSetSummary sum;
  std::vector<Expected> files;
  for (const ImageSetSplit& s : splits) {
    files.push_back({s.name + ".txt", list_text(s)});
    sum.lists.push_back((out / files.back().name).string());
  }
  files.push_back({"classes.txt", lines_text(class_names)});
  sum.classes_file = (out / "classes.txt").string();
  if (!recipe.empty()) files.push_back({"recipe.txt", recipe});
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  if (!opt.force && is_complete(out, files, !recipe.empty(), splits)) {
    sum.reused = true;
    sum.seconds = seconds();
    return sum;
  }

  // From here on no list may point at an image being rewritten: remove them first (and a
  // recipe this call does not write).
  std::vector<std::string> old_files;
  for (const ImageSetSplit& s : splits) old_files.push_back(s.name + ".txt");
  old_files.insert(old_files.end(), {"classes.txt", "recipe.txt"});
  for (const std::string& name : old_files) {
    std::error_code ec;
    fs::remove(out / name, ec);
    USER_CHECK(!ec, (out / name).string() << ": cannot remove the old file: " << ec.message());
  }
  std::vector<int64_t> first;  // each split's first global index
  int64_t total = 0;
  for (const ImageSetSplit& s : splits) {
    first.push_back(total);
    total += int64_t(s.labels.size());
    for (int c = 0; c < classes; c++) {
      const fs::path folder = out / s.name / std::to_string(c);
      std::error_code ec;
      fs::create_directories(folder, ec);
      USER_CHECK(!ec, folder.string() << ": cannot create the folder: " << ec.message());
    }
  }

  if (opt.prepare) opt.prepare();
  sum.threads = opt.threads > 0 ? opt.threads
                                : int(std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<int64_t> bytes{0};
  parallel_for(total, sum.threads, [&](int64_t g) {
    int s = int(splits.size()) - 1;  // global index -> split and index in the split
    while (g < first[size_t(s)]) s--;
    const int64_t i = g - first[size_t(s)];
    const ImageSetSplit& split = splits[size_t(s)];
    const std::vector<uint8_t> file = jpeg(s, i);
    const fs::path path = out / image_set_path(split.name, split.labels[size_t(i)], i);
    write_file(path.string(), file.data(), file.size());
    bytes += int64_t(file.size());
  }, opt.progress);
  sum.jpeg_bytes = bytes;

  // Every image is on disk: now the lists may appear, classes.txt and the recipe last.
  for (const Expected& e : files) write_file_atomically((out / e.name).string(), e.text);
  sum.seconds = seconds();
  return sum;
}

}  // namespace cutrain
