// defines: ScratchDir, a fresh temporary folder for a test, removed with everything in it when
// the test ends (pass or fail); read_bytes() and write_bytes() for building bad files.
//
// The folder goes under $TMPDIR (else /tmp). A test that creates tens of thousands of files
// may ask for memory instead: /dev/shm, when TMPDIR is not set and it has 1 GiB free. On
// disk that many creations can be slow for reasons that have nothing to do with the code
// under test: ext4 without a journal skips, one by one, inodes deleted in the last 12 hours
// (recently_deleted() in the kernel), so every earlier run makes the next one slower; a
// 70,000-file import measured 1 s there and 10-20 s on such a disk.
#pragma once
#include <atomic>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <sys/statvfs.h>
#include <unistd.h>

namespace cutrain_test {

class ScratchDir {
 public:
  enum Where { disk, memory_if_possible };
  explicit ScratchDir(const std::string& tag, Where where = disk) {
    static std::atomic<int> serial{0};
    const std::filesystem::path root =
        where == memory_if_possible && memory_ok() ? "/dev/shm"
                                                   : std::filesystem::temp_directory_path();
    path_ = root / ("cutrain_" + tag + "_" + std::to_string(getpid()) + "_" +
                    std::to_string(serial++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;  // never throw from a destructor
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // this folder / name
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  static bool memory_ok() {
    if (std::getenv("TMPDIR") != nullptr) return false;  // the user chose a place
    struct statvfs fs;
    return statvfs("/dev/shm", &fs) == 0 && access("/dev/shm", W_OK) == 0 &&
           uint64_t(fs.f_bavail) * fs.f_frsize >= (uint64_t(1) << 30);
  }
  std::filesystem::path path_;
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

}  // namespace cutrain_test
