// defines: StopSignals, how SIGINT (Ctrl-C) and SIGTERM (a scheduler's "time is up") stop a
// training run without losing work.
//
// The first signal only sets a flag (an async-signal-safe store to a volatile sig_atomic_t)
// and writes one line to stderr (write(2) is async-signal-safe; printf is not). The training
// loop checks the flag after each step: it finishes that step, saves a checkpoint, waits for
// it to be on disk and exits. A second signal means "now": the handler calls _exit() at once.
// That is safe for the checkpoints: they are written to a temporary file and renamed, so an
// exit in the middle of a write leaves the previous checkpoints as they were.
//
// Installed with sigaction (SA_RESTART, so the loader's waits are not interrupted) for the
// lifetime of the object; the previous handlers come back in the destructor. One at a time.
#pragma once
#include <csignal>

namespace cutrain {

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // 0, or the first signal received (SIGINT, SIGTERM).
  int received() const;
  const char* name() const;  // "SIGINT", "SIGTERM" or ""

 private:
  struct sigaction old_int_, old_term_;
};

}  // namespace cutrain
