// defines: FolderLock, one writer per folder: an exclusive flock(2) on DIR/.cutrain.lock, held
// while the FolderLock lives. A second writer is refused at once, told who holds the folder
// (pid, host, command, since when: the holder writes them into the lock file). The kernel
// releases a flock when the process that holds it ends, however it ends, so kill -9 leaves no
// stale lock; the file itself stays (removing it would let two processes lock two different
// files of the same name).
//
// flock works between the processes of one machine. On some network file systems (NFS without
// lock support, or where flock is emulated per client) two machines can each hold it: there, one
// run folder per machine is the user's to keep.
//
//   FolderLock lock("runs/r1", "cutrain train");   // UserError if another process holds it
#pragma once
#include <string>

namespace cutrain {

class FolderLock {
 public:
  static constexpr const char* kFile = ".cutrain.lock";

  // Locks `dir`, which must exist, for `command` ("cutrain train"); `option` names the folder
  // the way the user gave it, for the message ("--out runs/r1"). Refused with a UserError that
  // names the holder when another process holds the lock; nothing is waited for.
  FolderLock(const std::string& dir, const std::string& command, const std::string& option);
  ~FolderLock();  // releases it
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int fd_ = -1;
};

// "pid 1234 on host-a, cutrain train, since 2026-11-28 14:03:11 UTC": what a holder writes.
std::string folder_lock_holder(const std::string& command);

}  // namespace cutrain
