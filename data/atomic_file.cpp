// Crash-safe file replacement: temporary file, fsync, rename, fsync the folder.
#include "data/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "kernels/check.h"

namespace cutrain {

namespace fs = std::filesystem;

namespace {
constexpr const char* kTempMark = ".tmp-";

fs::path folder_of(const std::string& path) {
  const fs::path p(path);
  return p.has_parent_path() ? p.parent_path() : fs::path(".");
}
}  // namespace

std::string temp_path_for(const std::string& path) {
  return path + kTempMark + std::to_string(::getpid());
}

bool parse_temp_name(const std::string& name, std::string* final_name, long* pid) {
  const size_t at = name.rfind(kTempMark);
  if (at == std::string::npos || at == 0) return false;
  const std::string digits = name.substr(at + std::strlen(kTempMark));
  if (digits.empty() || digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(),
                   [](unsigned char c) { return std::isdigit(c); }))
    return false;
  if (final_name) *final_name = name.substr(0, at);
  if (pid) *pid = std::stol(digits);
  return true;
}

void remove_stale_temp_files(const std::string& dir,
                             const std::function<bool(const std::string& final_name)>& ours) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::string final_name;
    long pid = 0;
    if (!parse_temp_name(e.path().filename().string(), &final_name, &pid) || !ours(final_name))
      continue;
    if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) fs::remove(e.path(), ec);
  }
}

void fsync_path(const std::string& path, bool is_dir) {
  const int fd = ::open(path.c_str(), is_dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  USER_CHECK(fd >= 0, "cannot open '" << path << "' to sync it: " << std::strerror(errno));
  const int status = ::fsync(fd);
  const int saved_errno = errno;
  ::close(fd);
  USER_CHECK(status == 0, "cannot sync '" << path << "' to disk: " << std::strerror(saved_errno));
}

void write_atomically(const std::string& path,
                      const std::function<void(const std::string& tmp)>& write) {
  const fs::path dir = folder_of(path);
  const std::string name = fs::path(path).filename().string();
  remove_stale_temp_files(dir.string(), [&](const std::string& n) { return n == name; });
  const std::string tmp = temp_path_for(path);
  try {
    write(tmp);
    fsync_path(tmp);
    USER_CHECK(::rename(tmp.c_str(), path.c_str()) == 0,
          "cannot rename '" << tmp << "' to '" << path << "': " << std::strerror(errno));
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  fsync_path(dir.string(), true);  // the rename itself is durable
}

void write_file_atomically(const std::string& path, const void* bytes, size_t n) {
  write_atomically(path, [&](const std::string& tmp) {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    USER_CHECK(fd >= 0, "cannot create '" << path << "': " << std::strerror(errno));
    const char* p = static_cast<const char*>(bytes);
    int error = 0;
    for (size_t done = 0; done < n && error == 0;) {
      const ssize_t w = ::write(fd, p + done, n - done);
      if (w > 0)
        done += size_t(w);
      else if (w < 0 && errno != EINTR)
        error = errno;
    }
    if (::close(fd) != 0 && error == 0) error = errno;
    USER_CHECK(error == 0, "cannot write '" << path << "': " << std::strerror(error));
  });
}

void write_file_atomically(const std::string& path, const std::string& text) {
  write_file_atomically(path, text.data(), text.size());
}

}  // namespace cutrain
