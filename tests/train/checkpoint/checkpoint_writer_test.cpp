// CheckpointWriter: the last N and the best kept; the write really happens on the writer's
// thread; a full queue blocks submit(); background errors surface from wait() and submit()
// (and from the destructor, on stderr); temporary files of dead writers removed; a pending
// snapshot (a GPU's, still on its way) completed on the writer's thread.
// newest_checkpoint: the highest step that verifies, damaged and temporary files named.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <optional>
#include <thread>

#include "data/hdf5_handle.h"
#include "tests/train/checkpoint/checkpoint_fixture.h"

using namespace cutrain;
using namespace cutrain_test;
namespace fs = std::filesystem;

namespace {

std::string step_name(int64_t step) {
  return fs::path(checkpoint_path(".", step)).filename().string();
}

// The process id of a process that has ended.
long dead_pid() {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  return long(child);
}

}  // namespace

TEST_CASE("checkpoint writer: keeps the last N and the best; step files above are left alone") {
  REQUIRE(step_name(7) == "step-00000007.h5");
  REQUIRE(step_name(123456789) == "step-123456789.h5");
  TempDir dir;
  write_checkpoint(small_checkpoint(100), checkpoint_path(dir.str(), 100));  // an older run's
  {
    CheckpointWriter writer(dir.str(), 2);
    for (int64_t step : {10, 20, 30, 40, 50})
      writer.submit(small_checkpoint(step), step, /*is_best=*/step == 30);
    writer.wait();
    REQUIRE(files_in(dir.str()) == std::set<std::string>{"best.h5", step_name(40), step_name(50),
                                                          step_name(100)});
    require_identical(read_checkpoint(best_checkpoint_path(dir.str())), small_checkpoint(30));
    for (int64_t step : {40, 50})
      require_identical(read_checkpoint(checkpoint_path(dir.str(), step)), small_checkpoint(step));

    writer.submit(small_checkpoint(60), 60, true);  // a new best replaces the old one
    writer.wait();
    REQUIRE(fs::equivalent(best_checkpoint_path(dir.str()), checkpoint_path(dir.str(), 60)));
    REQUIRE(fs::hard_link_count(checkpoint_path(dir.str(), 60)) == 2);  // a link, not a copy
  }
  TempDir dir3;
  CheckpointWriter writer(dir3.str());  // keeps 3 by default
  for (int64_t step = 1; step <= 5; step++) writer.submit(small_checkpoint(step), step, false);
  writer.wait();
  REQUIRE(files_in(dir3.str()) == std::set<std::string>{step_name(3), step_name(4), step_name(5)});
}

TEST_CASE("checkpoint writer: the write happens on its own thread; submit returns first") {
  TempDir dir;
  CheckpointWriter writer(dir.str());
  const std::string path = checkpoint_path(dir.str(), 1);
  {
    // While this thread holds the HDF5 lock, no other thread can create the file: had submit()
    // written it itself (the lock is recursive, so this thread could), it would exist now.
    H5Lock lock;
    writer.submit(small_checkpoint(1), 1, false);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE(files_in(dir.str()).empty());
  }
  writer.wait();
  require_identical(read_checkpoint(path), small_checkpoint(1));
}

TEST_CASE("checkpoint writer: with one write in flight and one waiting, submit() blocks") {
  TempDir dir;
  CheckpointWriter writer(dir.str());
  std::atomic<bool> third_returned{false};
  std::thread third;
  struct Joiner {  // joins `third` however the test ends (a failed REQUIRE throws)
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } joiner{third};
  {
    H5Lock lock;  // stalls the writer thread at its first HDF5 call
    writer.submit(small_checkpoint(1), 1, false);
    writer.submit(small_checkpoint(2), 2, false);  // returns once step 1 is taken up
    third = std::thread([&] {
      writer.submit(small_checkpoint(3), 3, false);
      third_returned = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    REQUIRE(!third_returned);  // step 1 cannot finish, step 2 waits: no room for step 3
  }
  third.join();  // returns once the lock is gone: step 1 is written, step 2 taken up
  REQUIRE(third_returned);
  writer.wait();
  REQUIRE(files_in(dir.str()) == std::set<std::string>{step_name(1), step_name(2), step_name(3)});
}

TEST_CASE("checkpoint writer: a failure on the writer thread surfaces from wait() and submit()") {
  TempDir dir;
  const std::string ckpt = dir / "ckpt";
  CheckpointWriter writer(ckpt);
  // The folder is replaced by a file: even root cannot create a file inside it.
  fs::remove_all(ckpt);
  write_text(ckpt, "not a folder");
  writer.submit(small_checkpoint(1), 1, false);
  // The path and the system's reason, as a user's error (the disk, the folder: no bug).
  REQUIRE_USER_ERROR(writer.wait(),
                     "cannot create '" + checkpoint_path(ckpt, 1) + "': Not a directory");
  REQUIRE_NOTHROW(writer.wait());  // reported once
  writer.submit(small_checkpoint(1), 1, false);
  REQUIRE_USER_ERROR(writer.wait(), "cannot create '" + checkpoint_path(ckpt, 1) + "'");

  // Without wait(): the error comes from a later submit() (step 2 fails while step 3 waits
  // for room, and step 4's submit must then report it).
  writer.submit(small_checkpoint(2), 2, false);
  std::string message;
  try {
    writer.submit(small_checkpoint(3), 3, false);
    writer.submit(small_checkpoint(4), 4, false);
  } catch (const Error& e) {
    message = e.what();
  }
  REQUIRE(message.find("cannot create '" + checkpoint_path(ckpt, 2) + "'") != std::string::npos);
  try {
    writer.wait();  // step 3's failure, if it was queued
  } catch (const Error&) {
  }

  // The folder is back: the writer goes on.
  fs::remove(ckpt);
  fs::create_directory(ckpt);
  writer.submit(small_checkpoint(5), 5, false);
  writer.wait();
  require_identical(read_checkpoint(checkpoint_path(ckpt, 5)), small_checkpoint(5));

  // Refused at once, on the caller's thread: a mislabelled or invalid snapshot.
  REQUIRE_ERROR(writer.submit(small_checkpoint(6), 7, false),
                "the snapshot of step 6 was submitted as step 7");
  Checkpoint bad = small_checkpoint(8);
  bad.tensors.emplace_back("", Tensor::zeros({1}, DType::f32));
  REQUIRE_ERROR(writer.submit(bad, 8, false), "empty name");
  REQUIRE_ERROR(CheckpointWriter(dir.str(), 0), "must keep at least 1 checkpoint, not 0");
  write_text(dir / "file", "x");
  REQUIRE_ERROR(CheckpointWriter(dir / "file"), "cannot make the checkpoint folder");
}

TEST_CASE("checkpoint writer: a snapshot holding inf or NaN is not written; the last good stays") {
  TempDir dir;
  CheckpointWriter writer(dir.str());
  writer.submit(small_checkpoint(1), 1, false);
  Checkpoint diverged = small_checkpoint(2);
  diverged.tensors[0].second.data<float>()[7] = std::nanf("");
  writer.submit(diverged, 2, false);
  REQUIRE_USER_ERROR(writer.wait(), "the checkpoint of step 2 is not written: 'conv1.w' holds "
                                    "inf or NaN (element 7): the run has diverged");
  Checkpoint inf = small_checkpoint(3);
  inf.tensors.emplace_back("h", Tensor::from_doubles({1, INFINITY}, {2}, DType::f16));
  writer.submit(inf, 3, false);
  REQUIRE_USER_ERROR(writer.wait(), "'h' holds inf or NaN (element 1)");
  REQUIRE(newest_checkpoint(dir.str()) == checkpoint_path(dir.str(), 1));
  REQUIRE(files_in(dir.str()) == std::set<std::string>{step_name(1)});
}

TEST_CASE("checkpoint writer: an error nobody collected is printed by the destructor, alone") {
  { H5Lock first; }  // this thread uses HDF5 before the writer thread does
  TempDir dir;
  const std::string log = dir / "stderr.txt";
  std::fflush(stderr);
  const int saved = dup(2);
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE((saved >= 0 && fd >= 0));
  dup2(fd, 2);
  close(fd);
  {
    CheckpointWriter writer(dir / "ckpt");
    fs::remove_all(dir / "ckpt");
    write_text(dir / "ckpt", "not a folder");
    writer.submit(small_checkpoint(1), 1, false);
  }  // waits, cannot throw: prints
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  const std::vector<uint8_t> bytes = read_bytes(log);
  const std::string text(bytes.begin(), bytes.end());
  INFO(text);
  REQUIRE(text.find("cutrain: checkpoint writer: ") != std::string::npos);
  REQUIRE(text.find(checkpoint_path(dir / "ckpt", 1)) != std::string::npos);
  // HDF5's own error stack is not printed from the writer thread either (its printing is off
  // in every thread that takes the HDF5 lock, not just the first).
  REQUIRE(text.find("HDF5-DIAG") == std::string::npos);
}

TEST_CASE("checkpoint writer: temporary files of dead writers are removed at start") {
  TempDir dir;
  const std::string dead = std::to_string(dead_pid()), live = std::to_string(getpid());
  for (const std::string& name : {"step-00000007.h5.tmp-" + dead, "best.h5.tmp-" + dead,
                                  "step-00000008.h5.tmp-" + live, "notes.txt.tmp-" + dead})
    write_text(dir / name, "partial");
  CheckpointWriter writer(dir.str());
  REQUIRE(files_in(dir.str()) ==
          std::set<std::string>{"step-00000008.h5.tmp-" + live, "notes.txt.tmp-" + dead});
}

TEST_CASE("newest_checkpoint: the highest step that verifies; damaged and temporary files named") {
  TempDir dir;
  REQUIRE(newest_checkpoint(dir / "missing").empty());
  REQUIRE(newest_checkpoint(dir.str()).empty());
  write_text(dir / "a-file", "x");
  REQUIRE_ERROR(newest_checkpoint(dir / "a-file"), "is a file, not a checkpoint folder");

  for (int64_t step : {10, 20, 30, 40})
    write_checkpoint(small_checkpoint(step), checkpoint_path(dir.str(), step));
  std::vector<std::string> skipped;
  REQUIRE(newest_checkpoint(dir.str(), &skipped) == checkpoint_path(dir.str(), 40));
  REQUIRE(skipped.empty());

  const std::string p20 = checkpoint_path(dir.str(), 20), p30 = checkpoint_path(dir.str(), 30),
                    p40 = checkpoint_path(dir.str(), 40), p50 = checkpoint_path(dir.str(), 50);
  flip_byte_in(p40, "step-40-pattern|step-40-pattern|", 7);  // damaged
  const std::vector<uint8_t> whole = read_bytes(p30);        // truncated
  write_bytes(p30, std::vector<uint8_t>(whole.begin(), whole.begin() + long(whole.size() / 2)));
  fs::copy_file(p20, p50);  // a file whose name lies about its step
  write_text(p50 + ".tmp-12345", "partial");
  write_text(dir / "best.h5", "not even HDF5");  // not a step file: not considered
  write_text(dir / "step-1x.h5", "not a step name");
  REQUIRE(newest_checkpoint(dir.str(), &skipped) == p20);
  REQUIRE(skipped.size() == 4);
  REQUIRE(skipped[0] == p50 + ".tmp-12345: the temporary file of an unfinished write");
  REQUIRE(skipped[1].find(p50 + ": ") == 0);
  REQUIRE(skipped[1].find("it holds step 20, not the step of its name") != std::string::npos);
  REQUIRE(skipped[2].find(p40 + ": ") == 0);
  REQUIRE(skipped[2].find("checksum mismatch: " + p40 + " is damaged") != std::string::npos);
  REQUIRE(skipped[3].find(p30 + ": ") == 0);
  REQUIRE(skipped[3].find("truncated file") != std::string::npos);

  flip_byte_in(p20, "step-20-pattern|step-20-pattern|", 7);
  flip_byte_in(p50, "step-20-pattern|step-20-pattern|", 7);
  skipped.clear();
  REQUIRE(newest_checkpoint(dir.str(), &skipped) == checkpoint_path(dir.str(), 10));
  fs::remove(checkpoint_path(dir.str(), 10));
  REQUIRE(newest_checkpoint(dir.str(), &skipped).empty());
}

TEST_CASE("checkpoint writer: a pending snapshot is completed on the writer's thread, then written") {
  // What Trainer::snapshot_async hands over on a GPU: tensors that are not the final ones yet
  // and scalars still missing; `pending` fills them in. Here it stands for the device's copies
  // with a plain function, so the writer's side of the protocol runs on the CPU.
  TempDir dir;
  CheckpointWriter writer(dir.str());
  const Checkpoint want = small_checkpoint(3);
  Checkpoint c = want;
  for (auto& named : c.tensors) named.second = Tensor();  // undefined: validation would refuse
  c.scalars.clear();
  std::atomic<bool> completed{false};
  std::thread::id completed_on;
  c.pending = [&](Checkpoint& ck) {
    completed_on = std::this_thread::get_id();
    ck.tensors = want.tensors;
    ck.scalars = want.scalars;
    completed = true;
  };
  writer.submit(std::move(c), 3, false);  // validated only once complete, on the writer
  writer.wait();
  REQUIRE(completed);
  REQUIRE(completed_on != std::this_thread::get_id());
  require_identical(read_checkpoint(checkpoint_path(dir.str(), 3)), want);

  // A completion that fails is the writer's failure: reported by the next wait().
  Checkpoint failing = small_checkpoint(4);
  failing.pending = [](Checkpoint&) { throw Error("the device's copy failed"); };
  writer.submit(std::move(failing), 4, false);
  REQUIRE_ERROR(writer.wait(), "the device's copy failed");
  REQUIRE(!fs::exists(checkpoint_path(dir.str(), 4)));

  // complete() runs the completion once and clears it; until then nothing takes it as whole.
  int calls = 0;
  Checkpoint once = small_checkpoint(5);
  once.pending = [&](Checkpoint&) { calls++; };
  REQUIRE_ERROR(validate_checkpoint(once), "the checkpoint of step 5 is still pending");
  REQUIRE_ERROR(write_checkpoint(once, dir / "x.h5"), "still pending");
  once.complete();
  once.complete();
  REQUIRE(calls == 1);
  REQUIRE(!once.pending);
}
