// defines: Deadline, the collective timeout's clock (--collective-timeout): how long a wait has
// run, not counting time the process itself was stopped.
//
// A wait for the other replicas or ranks polls, and gives up once it has waited `seconds`:
//
//   Deadline d(timeout);                  // 0 or less: never
//   while (!arrived()) {
//     if (d.passed()) fail(d.waited());   // name whom it waited for
//     nap();                              // at most kPollSeconds between two polls
//   }
//
// The steady clock goes on while the process is stopped (Ctrl-Z then fg, a scheduler that
// suspends a job): a healthy run resumed an hour later would find every wait past its deadline
// at once. So the time between two polls counts only when it is short; a longer gap is time
// the process did not run (or a machine so loaded that the waiting thread did not run), and
// the deadline moves by as much. A deadline moved too far is harmless: the wait goes on.
#pragma once
#include <chrono>

namespace cutrain {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  // A poller waits at most this long between two calls of passed()...
  static constexpr double kPollSeconds = 0.25;
  // ... so a gap longer than this was a stop, not a wait.
  static constexpr double kGapSeconds = 2;

  explicit Deadline(double seconds, Clock::time_point start = Clock::now())
      : limit_(seconds), last_(start) {}
  // True once the waits since the start add up to more than `seconds` (never for 0). `now`
  // is for tests.
  bool passed(Clock::time_point now = Clock::now()) {
    const double gap = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    if (gap < kGapSeconds) waited_ += gap;
    return limit_ > 0 && waited_ > limit_;
  }
  double waited() const { return waited_; }  // seconds, as of the last passed()

 private:
  double limit_;
  double waited_ = 0;
  Clock::time_point last_;
};

}  // namespace cutrain
