// The scratch folder of the feeds (fuzz/feed.h).
#include "fuzz/feed.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace cutrain_fuzz {

namespace fs = std::filesystem;

namespace {

// /dev/shm unless the user chose a place: a fuzzer writes its input thousands of times a
// second, and memory is where that costs nothing.
fs::path scratch_root() {
  if (std::getenv("TMPDIR") == nullptr && ::access("/dev/shm", W_OK) == 0) return "/dev/shm";
  return fs::temp_directory_path();
}

// A process that crashed (a finding; in fork mode, libhdf5's) left its folder behind: the
// folders of processes that no longer run are removed. The folder's name holds its pid.
void remove_stale_folders(const fs::path& root) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("cutrain-fuzz-", 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + 13, nullptr, 10);
    if (pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH) fs::remove_all(e.path(), ec);
  }
}

const fs::path& scratch_dir() {
  // Never destroyed: the exit handler needs it after the statics are gone.
  static const fs::path* dir = [] {
    remove_stale_folders(scratch_root());
    std::string tmpl =
        (scratch_root() / ("cutrain-fuzz-" + std::to_string(::getpid()) + "-XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error("fuzz: mkdtemp(" + tmpl + "): " + std::strerror(errno));
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(scratch_dir(), ec);
    });
    return new fs::path(tmpl);
  }();
  return *dir;
}

}  // namespace

std::string scratch_file(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = (scratch_dir() / name).string();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("fuzz: cannot write " + path);
  const bool written = size == 0 || std::fwrite(data, 1, size, f) == size;
  if (std::fclose(f) != 0 || !written) throw std::runtime_error("fuzz: cannot write " + path);
  return path;
}

void scratch_remove(const std::string& name) {
  std::error_code ec;
  fs::remove(scratch_dir() / name, ec);
}

}  // namespace cutrain_fuzz
