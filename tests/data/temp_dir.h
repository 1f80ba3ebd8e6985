// defines: TempDir, a fresh folder under the system's temp directory, removed with everything
// in it when the TempDir goes out of scope; and write_text() to put a file in it.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <cstdlib>
#include <string>

namespace cutrain_test {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "cutrain-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error("mkdtemp(" + tmpl + ") failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // path() / rel, as a string
  std::string operator/(const std::string& rel) const { return (path_ / rel).string(); }
  std::string file(const std::string& name) const { return *this / name; }

 private:
  std::filesystem::path path_;
};

// Writes `bytes` exactly as given (binary: "\r\n" stays "\r\n"), creating parent folders.
inline void write_text(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace cutrain_test
