// defines: TempDir, a fresh folder for one test, removed with everything in it when the test
// ends (pass or fail); write_text(), write_bytes() and read_bytes() to make and read files.
//
// The folder goes under $TMPDIR (else /tmp). A test that creates tens of thousands of files
// may ask for memory instead (TempDir::memory_if_possible): /dev/shm, when TMPDIR is not set
// and it has 1 GiB free. On disk that many creations can be slow for reasons that have nothing
// to do with the code under test: ext4 without a journal skips, one by one, inodes deleted in
// the last 12 hours, so every earlier run makes the next one slower (a 70,000-file import
// measured 1 s in memory and 10-20 s on such a disk).
#pragma once
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace cutrain_test {

class TempDir {
 public:
  enum Where { disk, memory_if_possible };
  explicit TempDir(Where where = disk) {
    const std::filesystem::path root = where == memory_if_possible && memory_ok()
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::temp_directory_path();
    std::string tmpl = (root / "cutrain-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error("mkdtemp(" + tmpl + ") failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;  // a destructor must not throw; a leftover temp dir is harmless
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  // path() / rel, as a string
  std::string operator/(const std::string& rel) const { return (path_ / rel).string(); }
  std::string file(const std::string& name) const { return *this / name; }

 private:
  static bool memory_ok() {
    if (std::getenv("TMPDIR") != nullptr) return false;  // the user chose a place
    struct statvfs fs;
    return statvfs("/dev/shm", &fs) == 0 && access("/dev/shm", W_OK) == 0 &&
           uint64_t(fs.f_bavail) * fs.f_frsize >= (uint64_t(1) << 30);
  }
  std::filesystem::path path_;
};

// A file's whole contents, as bytes ("" when it cannot be read).
inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A file a run's report goes to (run_training's `out`), read back with text().
struct RunLog {
  std::string path;
  FILE* f;
  explicit RunLog(const std::string& p) : path(p), f(std::fopen(p.c_str(), "w")) {}
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;
  ~RunLog() { std::fclose(f); }
  std::string text() {
    std::fflush(f);
    return read_text(path);
  }
};

// Writes `bytes` exactly as given (binary: "\r\n" stays "\r\n"), creating parent folders.
inline void write_text(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!f.good()) throw std::runtime_error("cannot write " + path);
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f.good()) throw std::runtime_error("cannot read " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

}  // namespace cutrain_test
