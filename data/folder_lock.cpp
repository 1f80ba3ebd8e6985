// One writer per folder (see folder_lock.h).
#include "data/folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "kernels/check.h"

namespace cutrain {

std::string folder_lock_holder(const std::string& command) {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &utc);
  return "pid " + std::to_string(::getpid()) + " on " + host + ", " + command + ", since " + when;
}

FolderLock::FolderLock(const std::string& dir, const std::string& command,
                       const std::string& option)
    : dir_(dir) {
  const std::string path = (std::filesystem::path(dir) / kFile).string();
  // O_CLOEXEC: a child process (a browser, mpirun's helpers) must not inherit the lock.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  USER_CHECK(fd_ >= 0, option << ": cannot open the lock file '" << path
                              << "': " << std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder(512, '\0');
    const ssize_t n = ::pread(fd_, &holder[0], holder.size(), 0);
    holder.resize(n > 0 ? size_t(n) : 0);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    ::close(fd_);
    fd_ = -1;
    USER_CHECK(err != EWOULDBLOCK, option << " is in use by another process ("
                                          << (holder.empty() ? "it has just started" : holder)
                                          << "): a run folder has one writer at a time. Wait "
                                          << "for it to end (or stop it), or choose another "
                                          << "folder");
    USER_CHECK(false, option << ": cannot lock '" << path << "': " << std::strerror(err));
  }
  // Who holds it, for the message of the next one: written after the lock is ours.
  const std::string me = folder_lock_holder(command) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != ssize_t(me.size())) {
    // The lock holds all the same; only the next refusal's message is the poorer for it.
  }
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace cutrain
