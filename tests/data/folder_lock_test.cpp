// One writer per folder (data/folder_lock.h): a second lock on a held folder is refused at once,
// naming the holder (pid, host, command, since when) and what to do; released with its
// FolderLock, and by the kernel when its process ends (tests/train/run/run_lock_test.cpp kills
// one with SIGKILL).
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

#include "data/folder_lock.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"

using namespace cutrain;
using namespace cutrain_test;

TEST_CASE("folder lock: a held folder is refused, naming the holder; free again once released") {
  TempDir dir;
  std::optional<FolderLock> first;
  first.emplace(dir.path(), "cutrain test", "--out runs/a");
  // The holder said who it is in the lock file.
  const std::string holder = read_text(dir / FolderLock::kFile);
  REQUIRE(holder.rfind("pid " + std::to_string(::getpid()) + " on ", 0) == 0);
  REQUIRE(holder.find(", cutrain test, since 20") != std::string::npos);
  REQUIRE(holder.find(" UTC\n") != std::string::npos);
  // A second lock, even from this process (flock locks an open file, not a process), is refused.
  REQUIRE_USER_ERROR(FolderLock(dir.path(), "cutrain train", "--resume runs/a"),
                     "--resume runs/a is in use by another process (pid " +
                         std::to_string(::getpid()) + " on ");
  REQUIRE_USER_ERROR(FolderLock(dir.path(), "cutrain train", "--out x"),
                     "a run folder has one writer at a time. Wait for it to end (or stop it), "
                     "or choose another folder");
  first.reset();
  FolderLock second(dir.path(), "cutrain train", "--out x");  // free again
  REQUIRE(read_text(dir / FolderLock::kFile).find(", cutrain train, since") != std::string::npos);
  REQUIRE(std::filesystem::exists(dir / FolderLock::kFile));  // the file stays: see the header
}

TEST_CASE("folder lock: a folder that is not there cannot be locked, and says so") {
  TempDir dir;
  REQUIRE_USER_ERROR(FolderLock(dir / "missing", "cutrain train", "--out missing"),
                     "--out missing: cannot open the lock file");
}
