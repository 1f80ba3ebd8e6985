// The scratch folder of the feeds (fuzz/feed.h).
#include "fuzz/feed.h"

#include <sys/statvfs.h>
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

const fs::path& scratch_dir() {
  static const fs::path dir = [] {
    std::string tmpl = (scratch_root() / "cutrain-fuzz-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error("fuzz: mkdtemp(" + tmpl + "): " + std::strerror(errno));
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(scratch_dir(), ec);
    });
    return fs::path(tmpl);
  }();
  return dir;
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
